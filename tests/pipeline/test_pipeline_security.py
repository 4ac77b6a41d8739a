"""The data source and sink over SASL_SSL, with Spark's `kafka.security.protocol`, `kafka.sasl.*`
and `kafka.ssl.*` options, judged by librdkafka on the broker's plaintext listener; a wrong
password fails the job with Kafka's authentication error, and an option the client cannot use
is refused before Spark runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from deploy.broker_process import BrokerProcess
from pipeline.options import PipelineError, parse_read_options
from security.certs import Identity, create_certificates
from tests.pipeline.brokers import pipeline_broker_process
from tests.pipeline.clients import consume_all, create_topic, produce, spark_records

pytestmark = pytest.mark.compat
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="admin" password="admin-secret" user_spark="spark-secret";')


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("certs")
    create_certificates(out, [Identity("broker", "broker", ("localhost", "127.0.0.1"))])
    return out


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, certs: Path) -> Iterator[BrokerProcess]:
    process = pipeline_broker_process(
        tmp_path_factory.mktemp("secured") / "broker",
        "listeners=PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0", "sasl.enabled.mechanisms=PLAIN",
        f"listener.name.sasl_ssl.plain.sasl.jaas.config={JAAS}",
        "ssl.keystore.type=PEM", f"ssl.keystore.location={certs / 'broker.pem'}")
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
