"""Kafka's own Java tools, its console clients and MirrorMaker 2, and the clients (librdkafka through
confluent-kafka and kcat, kafka-python, aiokafka), against a 3-broker ZooKeeper Causeway cluster
with secured client listeners, as an operator sets one up: certificates from `causeway certs
create`, the first SCRAM user written to `/config/users` (as `kafka-configs --zookeeper` did),
further users added with `kafka-configs --command-config` over the secured listener. The brokers
reach each other over their PLAINTEXT listener; clients use SASL_SSL (SCRAM-SHA-512 and -256),
SSL (server-only TLS) or MTLS (an SSL listener that requires a client certificate).

Each client also runs with a wrong password or certificate, with its own timeouts bounded, and
must be refused with Kafka's authentication error (or the TLS reason) rather than hang or succeed.
One MM2 run copies from the secured cluster with the right credentials and, as a second source
alias, with a wrong password.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import ssl
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import KafkaTimeoutError

from bench.peers import ToolRun, run_tool
from bench.peers.events import start_tool
from deploy.broker_process import BrokerProcess
from security.scram import ScramCredential
from tests.compat.partitions import TIMEOUT_S, create_topic, log_end, read_all
from tests.compat.test_mm2 import MM2_JVM_FLAGS, produce
from tests.support.cluster import ZkCluster
from tests.support.consume import group_values
from tests.support.polling import wait_until
from tests.support.refusal import ask_metadata
from tests.support.zookeeper import ZooKeeperServer, zookeeper_server

pytestmark = pytest.mark.compat
REPO = Path(__file__).resolve().parents[2]
SCRAM = "SCRAM-SHA-512"  # what the tools use; aiokafka logs in with SCRAM-SHA-256
# Kafka's client error for a refused login, in what each Java tool prints.
AUTH_FAILED = "SaslAuthenticationException"
# Wrong-password runs: short client timeouts, so a tool that retried instead of failing would show
# as a timeout message rather than the authentication error.
BOUNDED = {"request.timeout.ms": "10000", "default.api.timeout.ms": "15000", "max.block.ms": "15000"}


class SecuredCluster(ZkCluster):
    """Three brokers, each with its own certificate from `certs`: PLAINTEXT between brokers,
    SASL_SSL (SCRAM-SHA-512) for clients."""

    def __init__(self, zookeeper: ZooKeeperServer, root: Path, certs: Path) -> None:
        self.certs = certs
        super().__init__(zookeeper, root, (
            "listeners=PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0,SSL://127.0.0.1:0,MTLS://127.0.0.1:0",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,SSL:SSL,MTLS:SSL",
            "inter.broker.listener.name=PLAINTEXT",
            "sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512",
            *(f"listener.name.sasl_ssl.{mechanism}.sasl.jaas.config="
              "org.apache.kafka.common.security.scram.ScramLoginModule required;"
              for mechanism in ("scram-sha-256", "scram-sha-512")),
            "ssl.keystore.type=PEM", "ssl.truststore.type=PEM", f"ssl.truststore.location={certs / 'ca.crt'}",
            "listener.name.mtls.ssl.client.auth=required", "group.initial.rebalance.delay.ms=0"))

    def broker(self, broker_id: int) -> BrokerProcess:
        plain = super().broker(broker_id)
        return replace(plain, overrides=(*plain.overrides, f"ssl.keystore.location={self.certs / f'b{broker_id}.pem'}"))

    def secured(self, listener: str = "SASL_SSL") -> str:
        return ",".join(b.listeners[listener] for b in self.brokers.values())

    def plaintext(self) -> str:
        return ",".join(b.listeners["PLAINTEXT"] for b in self.brokers.values())

    def add_user(self, user: str, password: str, mechanism: str = SCRAM) -> None:
        """What `kafka-configs --zookeeper ... --add-config` wrote: how the first user comes to be
        (the tests of `kafka-configs --bootstrap-server` add theirs through the tool)."""
        credential = ScramCredential.from_password(mechanism, password)
        self.zk.create(f"/config/users/{user}", json.dumps(
            {"version": 1, "config": {mechanism: credential.to_text()}}).encode(), makepath=True)


def certs_create(out: Path, *args: str) -> Path:
    done = subprocess.run([sys.executable, "-m", "deploy.cli", "certs", "create", "--dir", str(out), *args],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    brokers = [arg for i in (1, 2, 3) for arg in ("--broker", f"b{i}=localhost,127.0.0.1")]
    return certs_create(tmp_path_factory.mktemp("certs"), *brokers, "--client", "alice")


@pytest.fixture(scope="module")
def rogue(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another CA, and a client certificate it signed: trusted by nobody here."""
    return certs_create(tmp_path_factory.mktemp("rogue"), "--client", "mallory")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, certs: Path, kafka_jars: None) -> Iterator[SecuredCluster]:
    root = tmp_path_factory.mktemp("secured-zk")
    with zookeeper_server(root / "zookeeper") as zookeeper:
        running = SecuredCluster(zookeeper, root, certs)
        try:
            running.start()
            running.add_user("admin", "admin-secret")
            yield running
        finally:
            running.close()


def client_properties(path: Path, certs: Path, user: str, password: str, **extra: str) -> Path:
    """A Java client's properties for the SASL_SSL listener, as Kafka's docs write them."""
    settings = {
        "security.protocol": "SASL_SSL", "sasl.mechanism": SCRAM,
        "sasl.jaas.config": f'org.apache.kafka.common.security.scram.ScramLoginModule required '
                            f'username="{user}" password="{password}";',
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs / "ca.crt"), **extra}
    path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    return path


def admin_tool(cluster: SecuredCluster, name: str, config: Path, *args: str) -> ToolRun:
    return run_tool(name, "--bootstrap-server", cluster.secured(), "--command-config", str(config), *args)


def refused_by_name(run: ToolRun) -> bool:
    """The tool said the login was refused (and not that it timed out waiting)."""
    output = run.stdout + run.stderr
    return AUTH_FAILED in output and "TimeoutException" not in output


def librdkafka(cluster: SecuredCluster, certs: Path, user: str, password: str) -> dict[str, object]:
    return {"bootstrap.servers": cluster.secured(), "security.protocol": "SASL_SSL", "sasl.mechanism": SCRAM,
            "sasl.username": user, "sasl.password": password, "ssl.ca.location": str(certs / "ca.crt")}


def test_kafka_configs_adds_a_scram_user_over_sasl_ssl_who_then_logs_in(
        cluster: SecuredCluster, certs: Path, tmp_path: Path) -> None:
    admin = client_properties(tmp_path / "admin.properties", certs, "admin", "admin-secret")
    added = admin_tool(cluster, "kafka-configs", admin, "--entity-type", "users", "--entity-name", "carol",
                       "--alter", "--add-config", f"{SCRAM}=[password=carol-secret]").check()
    assert "Completed updating config for user carol." in added.stdout, added.stdout
    described = admin_tool(cluster, "kafka-configs", admin, "--entity-type", "users", "--describe",
                           "--entity-name", "carol").check()
    assert f"{SCRAM}=iterations=4096" in described.stdout, described.stdout

    # carol logs in (librdkafka, SASL_SSL SCRAM-SHA-512) at every broker: replicated topic, group.
    carol = librdkafka(cluster, certs, "carol", "carol-secret")
    carol_admin = AdminClient(carol)  # held: a client destroyed mid-request fails its futures
    carol_admin.create_topics([NewTopic("carol-topic", 3, 3)])["carol-topic"].result(timeout=TIMEOUT_S)
    producer = Producer({**carol, "acks": "all"})
    for i in range(60):
        producer.produce("carol-topic", f"c{i}".encode())
    assert producer.flush(TIMEOUT_S) == 0
    assert group_values(carol, "carol-topic", "carol-readers", 60, polls=300) == {f"c{i}".encode()
                                                                                  for i in range(60)}

    guess = ask_metadata({**librdkafka(cluster, certs, "carol", "guess"), "socket.timeout.ms": 5000},
                         until=(KafkaError._AUTHENTICATION,))
    assert not guess.served
    assert any(e.code() == KafkaError._AUTHENTICATION for e in guess.errors), guess.errors

    wrong = client_properties(tmp_path / "wrong.properties", certs, "admin", "guess", **BOUNDED)
    refused = admin_tool(cluster, "kafka-configs", wrong, "--entity-type", "users", "--entity-name", "dave",
                         "--alter", "--add-config", f"{SCRAM}=[password=dave-secret]")
    assert refused.returncode == 1 and refused_by_name(refused), refused
    assert not cluster.zk.exists("/config/users/dave")


def test_kafka_topics_creates_describes_and_lists_over_sasl_ssl(
        cluster: SecuredCluster, certs: Path, tmp_path: Path) -> None:
    admin = client_properties(tmp_path / "admin.properties", certs, "admin", "admin-secret")
    created = admin_tool(cluster, "kafka-topics", admin, "--create", "--topic", "secured-orders",
                         "--partitions", "3", "--replication-factor", "3").check()
    assert created.lines == ["Created topic secured-orders."], created.stdout
    described = admin_tool(cluster, "kafka-topics", admin, "--describe", "--topic", "secured-orders").check()
    partitions = [line for line in described.lines if "\tPartition: " in line]
    assert len(partitions) == 3 and all("Replicas: " in line for line in partitions), described.stdout
    for line in partitions:
        fields = {k.strip(): v.strip() for k, _, v in (part.partition(":") for part in line.strip().split("\t"))}
        assert sorted(fields["Replicas"].split(",")) == ["1", "2", "3"], line
    listed = admin_tool(cluster, "kafka-topics", admin, "--list").check()
    assert "secured-orders" in listed.lines, listed.stdout

    wrong = client_properties(tmp_path / "wrong.properties", certs, "admin", "guess", **BOUNDED)
    refused = admin_tool(cluster, "kafka-topics", wrong, "--create", "--topic", "never", "--partitions", "1")
    assert refused.returncode == 1 and refused_by_name(refused), refused
    assert "never" not in admin_tool(cluster, "kafka-topics", admin, "--list").check().lines


def test_java_console_producer_and_consumer_over_sasl_ssl(
        cluster: SecuredCluster, certs: Path, tmp_path: Path) -> None:
    topic, lines = "console-secured", [f"line-{i}" for i in range(50)]
    create_topic(cluster.plaintext(), topic, 1)
    admin = client_properties(tmp_path / "admin.properties", certs, "admin", "admin-secret")
    # --command-config: Kafka 4.x's name for --producer.config/--consumer.config (deprecated, and
    # saying so on the consumer's stdout).
    run_tool("kafka-console-producer", "--bootstrap-server", cluster.secured(), "--topic", topic,
             "--command-config", str(admin), "--producer-property", "acks=all",
             stdin="".join(f"{line}\n" for line in lines)).check()
    consumed = run_tool("kafka-console-consumer", "--bootstrap-server", cluster.secured(), "--topic", topic,
                        "--command-config", str(admin), "--from-beginning", "--max-messages", str(len(lines)),
                        "--timeout-ms", "30000").check()
    assert consumed.lines == lines, consumed.stdout

    wrong = client_properties(tmp_path / "wrong.properties", certs, "admin", "guess", **BOUNDED)
    produced = run_tool("kafka-console-producer", "--bootstrap-server", cluster.secured(), "--topic", topic,
                        "--command-config", str(wrong), stdin="intruder\n")
    assert refused_by_name(produced), produced
    refused = run_tool("kafka-console-consumer", "--bootstrap-server", cluster.secured(), "--topic", topic,
                       "--command-config", str(wrong), "--from-beginning", "--timeout-ms", "15000")
    # Kafka's console tools log the refusal and end with 0, as they do for any error of the client.
    assert refused_by_name(refused) and not refused.lines, refused
    assert refused.stderr.splitlines()[-1] == "Processed a total of 0 messages", refused
    assert log_end(cluster.plaintext(), topic, 0) == len(lines)  # nothing of the intruder's arrived


def test_mirror_maker_2_reads_the_secured_cluster_and_copies_nothing_with_a_wrong_password(
        cluster: SecuredCluster, certs: Path, tmp_path: Path) -> None:
    # The mirror's own user, added as an operator would; MM2 runs two flows from the same cluster:
    # `east` with its password and `guess` with a wrong one, into a plaintext Causeway `west`.
    admin = client_properties(tmp_path / "admin.properties", certs, "admin", "admin-secret")
    admin_tool(cluster, "kafka-configs", admin, "--entity-type", "users", "--entity-name", "mirror",
               "--alter", "--add-config", f"{SCRAM}=[password=mirror-secret]").check()
    topic, partitions, count = "ledger", 2, 200
    create_topic(cluster.plaintext(), topic, partitions)
    source = BrokerProcess(tmp_path / "unused")  # the helper only needs its bootstrap
    source.bootstrap = cluster.plaintext()
    produce(source, topic, count, partitions, "e")

    west = BrokerProcess(tmp_path / "west", overrides=("group.initial.rebalance.delay.ms=0",)).start()
    try:
        config = mm2_properties(tmp_path / "mm2.properties", cluster, certs, west, topic)
        # --clusters west: only the herders that write to west (MM2 would also start heartbeats into
        # every other alias, and stop at once when one of them cannot log in).
        mm2 = start_tool("connect-mirror-maker", str(config), "--clusters", "west",
                         stderr_path=tmp_path / "mm2.log", jvm_flags=MM2_JVM_FLAGS)
        try:
            wait_until(lambda: all(log_end(west.bootstrap, f"east.{topic}", p) == count // partitions
                                   for p in range(partitions)), what=f"{count} records in east.{topic}",
                       timeout_s=TIMEOUT_S)
            wait_until(lambda: any("guess->west" in line and "failed authentication" in line
                                   for line in errors(mm2.stderr_path)),
                       what="MM2's guess flow refused", timeout_s=TIMEOUT_S)
        finally:
            code = mm2.stop()
        assert code == 0, mm2.stderr_tail()
        for p in range(partitions):  # keys, values, headers, timestamps, in order
            assert read_all(west.bootstrap, f"east.{topic}", p) == read_all(cluster.plaintext(), topic, p)
        assert all(log_end(west.bootstrap, f"guess.{topic}", p) == -1 for p in range(partitions))
        # The east flow ran clean over SASL_SSL: every error MM2 logged is the guess flow's.
        assert all("guess->west" in line for line in errors(mm2.stderr_path)), mm2.stderr_tail()
        assert "mirror-secret" not in mm2.stderr_path.read_text(errors="replace")
    finally:
        assert west.stop() == 0, west.log_tail()


def errors(log: Path) -> list[str]:
    """The ERROR lines of a Kafka log (log4j's layout: `[time] LEVEL message`)."""
    lines = log.read_text(errors="replace").splitlines()
    return [line for line in lines if line.startswith("[") and "] ERROR " in line]


def mm2_properties(path: Path, cluster: SecuredCluster, certs: Path, west: BrokerProcess, topic: str) -> Path:
    """Dedicated-mode MM2 with Kafka's per-cluster client keys (`<alias>.security.protocol`, ...)."""
    def secured(alias: str, password: str) -> dict[str, str]:
        return {f"{alias}.bootstrap.servers": cluster.secured(), f"{alias}.security.protocol": "SASL_SSL",
                f"{alias}.sasl.mechanism": SCRAM,
                f"{alias}.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                             f'username="mirror" password="{password}";',
                f"{alias}.ssl.truststore.type": "PEM", f"{alias}.ssl.truststore.location": str(certs / "ca.crt"),
                f"{alias}.request.timeout.ms": "10000", f"{alias}.default.api.timeout.ms": "15000"}

    settings = {
        "clusters": "east, guess, west", "west.bootstrap.servers": west.bootstrap,
        **secured("east", "mirror-secret"), **secured("guess", "guess"),
        "east->west.enabled": "true", "guess->west.enabled": "true", "east->west.topics": topic,
        "guess->west.topics": topic,
        "refresh.topics.interval.seconds": "1", "replication.factor": "1",
        **{f"{internal}.replication.factor": "1" for internal in (
            "config.storage", "offset.storage", "status.storage", "offset-syncs.topic", "heartbeats.topic",
            "checkpoints.topic")},
    }
    path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    return path


# --- aiokafka over SASL_SSL with SCRAM-SHA-256 ----------------------------------------------------------------


def test_aiokafka_over_sasl_ssl_with_scram_sha_256(cluster: SecuredCluster, certs: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    cluster.add_user("erin", "erin-secret", "SCRAM-SHA-256")
    topic, values = "aiokafka-scram-256", [f"a{i}".encode() for i in range(30)]
    context = ssl.create_default_context(cafile=str(certs / "ca.crt"))

    def settings(password: str) -> dict[str, object]:
        return {"bootstrap_servers": cluster.secured(), "security_protocol": "SASL_SSL", "ssl_context": context,
                "sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": "erin", "sasl_plain_password": password,
                "request_timeout_ms": 15000}

    async def round_trip() -> list[bytes]:
        producer = AIOKafkaProducer(**settings("erin-secret"), acks="all")
        await producer.start()
        try:
            for value in values:
                await producer.send_and_wait(topic, value, partition=0)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, **settings("erin-secret"), group_id="aiokafka-readers",
                                    auto_offset_reset="earliest")
        await consumer.start()
        try:
            seen: list[bytes] = []
            async with asyncio.timeout(TIMEOUT_S):
                async for record in consumer:
                    seen.append(record.value or b"")
                    if len(seen) == len(values):
                        return seen
            return seen
        finally:
            await consumer.stop()

    async def refused() -> None:
        producer = AIOKafkaProducer(**settings("guess"))
        try:
            await producer.start()
        finally:
            await producer.stop()

    assert asyncio.run(round_trip()) == values  # one partition: in order
    with caplog.at_level(logging.ERROR, logger="aiokafka"), pytest.raises(KafkaConnectionError):
        asyncio.run(refused())
    assert "SaslAuthenticationFailed: Authentication failed" in caplog.text


# --- librdkafka (confluent-kafka, kcat) over server-only TLS ------------------------------------------------


def test_librdkafka_and_kcat_over_server_only_tls(cluster: SecuredCluster, certs: Path, rogue: Path) -> None:
    def config(ca: Path) -> dict[str, object]:
        return {"bootstrap.servers": cluster.secured("SSL"), "security.protocol": "SSL", "ssl.ca.location": str(ca)}

    topic = "librdkafka-tls"
    admin = AdminClient(config(certs / "ca.crt"))  # held: a client destroyed mid-request fails its futures
    admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(timeout=TIMEOUT_S)
    producer = Producer({**config(certs / "ca.crt"), "acks": "all"})
    for i in range(90):
        producer.produce(topic, f"t{i}".encode())
    assert producer.flush(TIMEOUT_S) == 0
    assert group_values(config(certs / "ca.crt"), topic, "tls-readers", 90, polls=300) == {
        f"t{i}".encode() for i in range(90)}
    kcat = shutil.which("kcat")
    assert kcat, "kcat is installed by `make system-deps`"
    listed = kcat_list(kcat, cluster.secured("SSL"), certs / "ca.crt")
    assert listed.returncode == 0 and "3 brokers:" in listed.stdout, listed.stderr

    # A client that does not trust the brokers' CA refuses them, and says why.
    untrusting = ask_metadata({**config(rogue / "ca.crt"), "socket.timeout.ms": 5000}, timeout_s=3,
                              until=(KafkaError._SSL,))
    assert not untrusting.served
    assert any(e.code() == KafkaError._SSL and "certificate verify failed" in e.str()
               for e in untrusting.errors), untrusting.errors
    refused = kcat_list(kcat, cluster.secured("SSL"), rogue / "ca.crt", timeout_s=3)
    assert refused.returncode != 0 and "certificate verify failed" in refused.stderr, refused.stderr


def test_kcat_with_an_untrusted_client_certificate_is_refused_by_the_mtls_listener(
        cluster: SecuredCluster, certs: Path, rogue: Path) -> None:
    kcat = shutil.which("kcat")
    assert kcat, "kcat is installed by `make system-deps`"
    served = kcat_list(kcat, cluster.secured("MTLS"), certs / "ca.crt", certs / "alice")
    assert served.returncode == 0 and "3 brokers:" in served.stdout, served.stderr
    refused = kcat_list(kcat, cluster.secured("MTLS"), certs / "ca.crt", rogue / "mallory", timeout_s=3)
    # The broker's TLS alert names the reason (it logs it too: the kafka-python test checks that).
    assert refused.returncode != 0 and "alert unknown ca" in refused.stderr, refused.stderr


def kcat_list(kcat: str, bootstrap: str, ca: Path, client: Path | None = None,
              timeout_s: int = 30) -> subprocess.CompletedProcess[str]:
    """`kcat -L` over SSL, trusting `ca`, with the client certificate `client`.crt/.key if given;
    bounded by its own metadata timeout (a refused handshake is retried until then)."""
    args = [kcat, "-b", bootstrap, "-L", "-m", str(timeout_s), "-X", "security.protocol=ssl",
            "-X", f"ssl.ca.location={ca}"]
    if client is not None:
        args += ["-X", f"ssl.certificate.location={client}.crt", "-X", f"ssl.key.location={client}.key"]
    return subprocess.run(args, capture_output=True, text=True, timeout=60)


# --- kafka-python over TLS: server-only (the SSL listener) and mutual (the MTLS listener) ----------------------


def kafka_python(cluster: SecuredCluster, listener: str, ca: Path, client: Path | None) -> dict[str, object]:
    """kafka-python's SSL settings: the CA it trusts, and the client certificate (`client`.crt/.key)."""
    config: dict[str, object] = {"bootstrap_servers": cluster.secured(listener).split(","),
                                 "security_protocol": "SSL", "ssl_cafile": str(ca), "bootstrap_timeout_ms": 10000}
    if client is not None:
        config |= {"ssl_certfile": f"{client}.crt", "ssl_keyfile": f"{client}.key"}
    return config


@pytest.mark.parametrize("listener", ["SSL", "MTLS"])
def test_kafka_python_produces_and_consumes_over_tls(cluster: SecuredCluster, certs: Path, listener: str) -> None:
    topic, values = f"kafka-python-{listener.lower()}", [f"v{i}".encode() for i in range(40)]
    config = kafka_python(cluster, listener, certs / "ca.crt", certs / "alice" if listener == "MTLS" else None)
    producer = KafkaProducer(**config, acks="all")
    try:
        sent = [producer.send(topic, value, partition=0) for value in values]
        assert [future.get(TIMEOUT_S).offset for future in sent] == list(range(len(values)))
    finally:
        producer.close()
    consumer = KafkaConsumer(topic, **config, group_id=f"kafka-python-{listener}", auto_offset_reset="earliest",
                             consumer_timeout_ms=int(TIMEOUT_S * 1000))
    try:
        seen = [message.value for _, message in zip(values, consumer, strict=False)]
        consumer.commit()
    finally:
        consumer.close()
    assert seen == values  # one partition: in order


# Each refusal says why, on both ends: the client refuses an untrusted broker; a listener that
# requires a client certificate refuses a missing or untrusted one, logs OpenSSL's reason and
# sends the client the TLS alert that names it.
@pytest.mark.parametrize(("listener", "trust", "client", "client_saw", "broker_saw"), [
    ("SSL", "rogue", None, "CERTIFICATE_VERIFY_FAILED", None),
    ("MTLS", "certs", None, "TLSV13_ALERT_CERTIFICATE_REQUIRED", "PEER_DID_NOT_RETURN_A_CERTIFICATE"),
    ("MTLS", "certs", "rogue", "TLSV1_ALERT_UNKNOWN_CA", "CERTIFICATE_VERIFY_FAILED"),
], ids=["untrusted-broker", "no-client-certificate", "untrusted-client-certificate"])
def test_kafka_python_with_the_wrong_certificates_is_refused(
        cluster: SecuredCluster, certs: Path, rogue: Path, listener: str, trust: str, client: str | None,
        client_saw: str, broker_saw: str | None, caplog: pytest.LogCaptureFixture) -> None:
    ca = (rogue if trust == "rogue" else certs) / "ca.crt"
    config = kafka_python(cluster, listener, ca, rogue / "mallory" if client else None)
    with caplog.at_level(logging.WARNING, logger="kafka"), pytest.raises(KafkaTimeoutError):
        KafkaProducer(**{**config, "bootstrap_timeout_ms": 3000})
    assert client_saw in caplog.text
    if broker_saw is not None:
        assert any(f"on listener MTLS failed: {broker_saw}" in broker.log_tail(400)
                   for broker in cluster.brokers.values())
    # ... and the listener serves the right certificates.
    right = kafka_python(cluster, listener, certs / "ca.crt", certs / "alice" if listener == "MTLS" else None)
    producer = KafkaProducer(**right, acks="all")
    try:
        producer.send(f"after-refusal-{listener.lower()}", b"served").get(TIMEOUT_S)
    finally:
        producer.close()
