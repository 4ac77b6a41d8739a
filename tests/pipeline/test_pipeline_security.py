"""The data source and sink over SASL_SSL, with Spark's `kafka.security.protocol`, `kafka.sasl.*`
and `kafka.ssl.*` options, judged by librdkafka on the broker's plaintext listener; a wrong
password fails the job with Kafka's authentication error, and an option the client cannot use
is refused before Spark runs.

The jobs' own clients (metadata, ListOffsets, DescribeConfigs, CreateTopics, the copy's
producer) log in with the same options: copy, audit and lag run as a SCRAM-SHA-512 user whom
ACLs allow only what the jobs need (the broker's authorizer is on; the plaintext listener, the
judge's, and the PLAIN user of the data source's tests are super users), and a wrong password is
refused in one line, before Spark starts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AclOperation,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from deploy.broker_process import BrokerProcess
from pipeline.audit import MirrorSpec, audit
from pipeline.copy import copy
from pipeline.lag import lag
from pipeline.options import PipelineError, parse_read_options
from security.certs import Identity, create_certificates
from tests.pipeline.brokers import pipeline_broker_process
from tests.pipeline.cli import causeway_pipeline
from tests.pipeline.clients import consume_all, create_topic, produce, spark_records
from tests.support.secured import AUTHORIZER, TIMEOUT_S, allow

pytestmark = pytest.mark.compat
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="admin" password="admin-secret" user_spark="spark-secret";')
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
AUDITOR = "auditor"  # the jobs' SCRAM user


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("certs")
    create_certificates(out, [Identity("broker", "broker", ("localhost", "127.0.0.1"))])
    return out


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, certs: Path) -> Iterator[BrokerProcess]:
    process = pipeline_broker_process(
        tmp_path_factory.mktemp("secured") / "broker",
        "listeners=PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0", "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512",
        f"listener.name.sasl_ssl.plain.sasl.jaas.config={JAAS}",
        f"listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config={SCRAM_JAAS}",
        "ssl.keystore.type=PEM", f"ssl.keystore.location={certs / 'broker.pem'}",
        # ACLs bind the jobs' user; the judge (PLAINTEXT: ANONYMOUS) and the data source's PLAIN
        # user, whose tests are about logging in, may do anything.
        f"authorizer.class.name={AUTHORIZER}", "super.users=User:ANONYMOUS;User:spark")
    yield process
    assert process.stop() == 0, process.log_tail()


def _options(broker: BrokerProcess, certs: Path, password: str = "spark-secret") -> dict[str, str]:
    return {"kafka.bootstrap.servers": broker.listeners["SASL_SSL"], "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "PLAIN",
            "kafka.sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required "
                                      f'username="spark" password="{password}";',
            "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": str(certs / "ca.crt")}


def test_read_and_write_over_sasl_ssl_match_librdkafka(spark: SparkSession, secured: BrokerProcess,
                                                       certs: Path) -> None:
    plain = secured.listeners["PLAINTEXT"]
    create_topic(plain, "sec-in", 2)
    create_topic(plain, "sec-out", 2)
    produce(plain, "sec-in", [{"partition": i % 2, "key": b"k%d" % i, "value": b"v%d" % i} for i in range(200)])
    options = _options(secured, certs)
    df = spark.read.format("causeway").options(**options).option("subscribe", "sec-in").load()
    assert spark_records(df) == consume_all(plain, "sec-in", [0, 1])
    df.select("key", "value", "partition").write.format("causeway").options(**options) \
        .option("topic", "sec-out").mode("append").save()
    written = consume_all(plain, "sec-out", [0, 1])
    assert sorted((r.key, r.value) for r in written) == sorted((b"k%d" % i, b"v%d" % i) for i in range(200))


def test_a_wrong_password_fails_the_read_with_the_authentication_error(
        spark: SparkSession, secured: BrokerProcess, certs: Path) -> None:
    create_topic(secured.listeners["PLAINTEXT"], "sec-denied", 1)
    with pytest.raises(PySparkException, match="SASL_AUTHENTICATION_FAILED"):
        spark.read.format("causeway").options(**_options(secured, certs, "wrong")) \
            .option("subscribe", "sec-denied").load().collect()


@pytest.mark.parametrize(("extra", "message"), [
    ({"kafka.ssl.trustore.location": "/x"}, "ssl.trustore.location"),
    ({"kafka.ssl.truststore.location": "/nonexistent/ca.crt", "kafka.ssl.truststore.type": "PEM"}, "/nonexistent"),
    ({"kafka.sasl.mechanism": "GSSAPI"}, "GSSAPI"),
])
def test_security_options_the_client_cannot_use_are_refused_before_spark_runs(
        secured: BrokerProcess, certs: Path, extra: dict[str, str], message: str) -> None:
    with pytest.raises(PipelineError, match=message):
        parse_read_options({**_options(secured, certs), "subscribe": "t", **extra})


@pytest.fixture(scope="module")
def auditor(secured: BrokerProcess) -> str:
    """The SCRAM user the jobs log in as, allowed what they need on the topics `sa-*` and their
    copies `src.sa-*`: reading, describing and their configs at the source; creating, writing
    and reading the copies; reading the mirror's positions (mm2-offsets.*, the audit's);
    idempotent writes (the copy's producer)."""
    judge = AdminClient({"bootstrap.servers": secured.listeners["PLAINTEXT"]})
    credential = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
    for future in judge.alter_user_scram_credentials(
            [UserScramCredentialUpsertion(AUDITOR, credential, f"{AUDITOR}-secret".encode())]).values():
        future.result(timeout=TIMEOUT_S)
    user, prefixed = f"User:{AUDITOR}", ResourcePatternType.PREFIXED
    bindings = [allow(user, ResourceType.TOPIC, prefix, op, prefixed)
                for prefix, ops in (("sa-", (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS)),
                                    ("src.sa-", (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE,
                                                 AclOperation.DESCRIBE)),
                                    ("mm2-offsets.", (AclOperation.READ, AclOperation.DESCRIBE)))
                for op in ops]
    bindings.append(allow(user, ResourceType.BROKER, "kafka-cluster", AclOperation.IDEMPOTENT_WRITE))
    for future in judge.create_acls(bindings, request_timeout=TIMEOUT_S).values():
        future.result(timeout=TIMEOUT_S)
    return AUDITOR


def _scram(broker: BrokerProcess, certs: Path, password: str = f"{AUDITOR}-secret") -> dict[str, str]:
    """The jobs' options: log in to the SASL_SSL listener as the auditor, with SCRAM-SHA-512."""
    return {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                                      f'username="{AUDITOR}" password="{password}";',
            "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": str(certs / "ca.crt")}


def _spec(broker: BrokerProcess) -> MirrorSpec:
    """The same broker as source and target: src.<topic> is the copy of <topic>, as an mm2
    mirror with source alias `src` names it."""
    at = broker.listeners["SASL_SSL"]
    return MirrorSpec(at, at, mode="mm2", source_alias="src", name="secured")


def test_copy_audit_and_lag_log_in_with_the_kafka_options(spark: SparkSession, secured: BrokerProcess,
                                                          certs: Path, auditor: str) -> None:
    plain, at = secured.listeners["PLAINTEXT"], secured.listeners["SASL_SSL"]
    create_topic(plain, "sa-a", 2)
    create_topic(plain, "sa-l", 2)
    # Lag measures copies stamped on arrival at the target.
    create_topic(plain, "src.sa-l", 2, {"message.timestamp.type": "LogAppendTime"})
    for topic in ("sa-a", "sa-l"):
        produce(plain, topic, [{"partition": i % 2, "key": b"k%d" % i, "value": b"v%d" % i,
                                "timestamp": 1_600_000_000_000 + i} for i in range(60)])
    options = _scram(secured, certs)

    # copy: the source's metadata and configs, the target topic created, the copies produced.
    copied = copy(spark, at, at, "sa-a", target_topic="src.sa-a", say=lambda _line: None, options=options)
    assert (copied.created, copied.copied) == (True, 60)
    assert [(r.partition, r.offset, r.key, r.value, r.timestamp_ms) for r in consume_all(plain, "src.sa-a", [0, 1])] \
        == [(r.partition, r.offset, r.key, r.value, r.timestamp_ms) for r in consume_all(plain, "sa-a", [0, 1])]
    assert copy(spark, at, at, "sa-l", target_topic="src.sa-l", say=lambda _line: None, options=options).copied == 60

    # audit: both sides' topics, logs and the mirror's positions, then the reads.
    report = audit(spark, _spec(secured), topics_regex="sa-a", options=options)
    assert report.clean, report.findings()
    assert [(p.topic, p.partition, p.copied) for p in report.partitions] == [("sa-a", 0, 30), ("sa-a", 1, 30)]

    # lag: every copy of sa-l has a latency.
    lagged = lag(spark, _spec(secured), topics_regex="sa-l", say=lambda _line: None, options=options)
    # (Source and target are one cluster here: the survey keeps their logs apart by role.)
    assert [(k, s.count) for k, s in lagged.overall.items()] == [("records", 60)], lagged.notes


def test_a_wrong_password_refuses_copy_audit_and_lag_in_one_line(spark: SparkSession, secured: BrokerProcess,
                                                                 certs: Path, auditor: str) -> None:
    at = secured.listeners["SASL_SSL"]
    create_topic(secured.listeners["PLAINTEXT"], "sa-w", 1)
    wrong = [f"--option={key}={value}" for key, value in _scram(secured, certs, "not-the-password").items()]
    runs = {"copy": causeway_pipeline("copy", "--from", at, "--to", at, "--topic", "sa-w",
                                      "--target-topic", "src.sa-w", *wrong, timeout_s=120),
            "audit": causeway_pipeline("audit", "--source-bootstrap", at, "--target-bootstrap", at,
                                       "--source-alias", "src", *wrong, timeout_s=120)}
    for job, run in runs.items():
        assert run.returncode == 1, (job, run.stdout, run.stderr)
        assert "SASL_AUTHENTICATION_FAILED" in run.stderr and at in run.stderr, (job, run.stderr)
        assert "Traceback" not in run.stderr, (job, run.stderr)
        assert "not-the-password" not in run.stdout + run.stderr, job
    with pytest.raises(PipelineError, match="SASL_AUTHENTICATION_FAILED") as refused:
        lag(spark, _spec(secured), options=_scram(secured, certs, "not-the-password"), say=lambda _line: None)
    assert "not-the-password" not in str(refused.value)
