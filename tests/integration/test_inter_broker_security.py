"""Brokers of a ZooKeeper-mode cluster reach each other over a secured listener, as Kafka's do:
mutual TLS (each broker's keystore is its client certificate) and SASL_SSL with SCRAM-SHA-512 (the
broker's own user created in ZooKeeper before the brokers start). Followers replicate, the
controller's requests arrive, a killed leader is replaced by an in-sync follower; a broker whose
inter-broker login is wrong never joins the ISR and says why; settings that cannot work exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from deploy.broker_process import BrokerProcess
from security.certs import Identity, create_certificates
from security.scram import ScramCredential
from tests.support.cluster import ZkCluster
from tests.support.consume import read_partition
from tests.support.polling import wait_until
from tests.support.zookeeper import zookeeper_server

REPO = Path(__file__).resolve().parents[2]
RECORDS = 200
BROKER_PASSWORD = "broker-secret-512"
# A killed leader is replaced once its ZooKeeper session expires: 6 s, as the other ZooKeeper
# tests' brokers, rather than Kafka's 18 s default, which proves nothing more here.
SESSION = "zookeeper.session.timeout.ms=6000"
WRONG_PASSWORD = "not-the-broker-password"


def _scram_jaas(password: str) -> str:
    return ('org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" '
            f'password="{password}";')


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("certs")
    create_certificates(out, [Identity("broker", "broker", ("localhost", "127.0.0.1")), Identity("alice", "client")])
    return out


def _tls(certs: Path) -> tuple[str, ...]:
    return ("ssl.keystore.type=PEM", f"ssl.keystore.location={certs / 'broker.pem'}",
            "ssl.truststore.type=PEM", f"ssl.truststore.location={certs / 'ca.crt'}")


@pytest.fixture(scope="module")
def mtls_cluster(tmp_path_factory: pytest.TempPathFactory, certs: Path) -> Iterator[ZkCluster]:
    root = tmp_path_factory.mktemp("mtls")
    overrides = ("listeners=SSL://127.0.0.1:0", "security.inter.broker.protocol=SSL", *_tls(certs),
                 "ssl.client.auth=required", "offsets.topic.replication.factor=1", SESSION)
    with zookeeper_server(root / "zookeeper") as zookeeper:
        cluster = ZkCluster(zookeeper, root, overrides)
        try:
            yield cluster.start()
        finally:
            cluster.close()


@pytest.fixture(scope="module")
def scram_cluster(tmp_path_factory: pytest.TempPathFactory, certs: Path) -> Iterator[ZkCluster]:
    root = tmp_path_factory.mktemp("scram")
    with zookeeper_server(root / "zookeeper") as zookeeper:
        cluster = ZkCluster(zookeeper, root, _scram_overrides(certs, BROKER_PASSWORD))
        try:
            # As a Kafka operator does before the first start: the brokers' own user, then a client's.
            for user, password in (("broker", BROKER_PASSWORD), ("alice", "alice-secret")):
                credential = ScramCredential.from_password("SCRAM-SHA-512", password)
                cluster.zk.create(f"/config/users/{user}", json.dumps(
                    {"version": 1, "config": {"SCRAM-SHA-512": credential.to_text()}}).encode(), makepath=True)
            yield cluster.start()
        finally:
            cluster.close()


def _scram_overrides(certs: Path, password: str) -> tuple[str, ...]:
    return ("listeners=SASL_SSL://127.0.0.1:0", "inter.broker.listener.name=SASL_SSL",
            "sasl.enabled.mechanisms=SCRAM-SHA-512", "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512",
            f"listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config={_scram_jaas(password)}", *_tls(certs),
            "offsets.topic.replication.factor=1", SESSION)


def _mtls_client(certs: Path) -> dict[str, object]:
    return {"security.protocol": "SSL", "ssl.ca.location": str(certs / "ca.crt"),
            "ssl.certificate.location": str(certs / "alice.crt"), "ssl.key.location": str(certs / "alice.key")}


def _scram_client(certs: Path) -> dict[str, object]:
    return {"security.protocol": "SASL_SSL", "ssl.ca.location": str(certs / "ca.crt"),
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": "alice-secret"}


def _replicates_and_survives_its_leader(cluster: ZkCluster, client: dict[str, object], topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap(), **client})
    admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})])[topic].result(timeout=60)
    producer = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all", **client})
    errors: list[object] = []
    for i in range(RECORDS):
        producer.produce(topic, f"r{i}".encode(), on_delivery=lambda err, _msg: errors.append(err) if err else None)
    assert producer.flush(60) == 0 and not errors, errors
    # acks=all: every follower in the ISR fetched each record over the secured listener.
    wait_until(lambda: len(cluster.state(topic)["isr"]) == 3, what=f"{topic}'s three replicas in sync")
    leader = int(cluster.state(topic)["leader"])
    cluster.brokers[leader].kill()
    wait_until(lambda: int(cluster.state(topic)["leader"]) not in (leader, -1),
               what=f"a new leader of {topic}")
    new_leader = int(cluster.state(topic)["leader"])
    expected = [f"r{i}".encode() for i in range(RECORDS)]
    seen: list[bytes | None] = []

    def served() -> bool:
        # A new leader's high watermark starts where it last heard it as a follower, maybe below
        # what the old leader acknowledged (the kill can come before the followers' next fetch
        # tells them), as in Kafka; it reaches the log end once the other in-sync follower
        # fetches. Every acknowledged record is then served.
        seen[:] = [m.value() for m in read_partition(cluster.brokers[new_leader].bootstrap, topic,
                                                     security=client, timeout_s=10)]
        return seen == expected

    try:
        wait_until(served, what=f"the new leader {new_leader} serving every acknowledged record", timeout_s=60)
    finally:
        cluster.brokers[leader].restart()
    # Caught up again, it rejoins the ISR: the leader's AlterPartition reached the controller (over
    # the secured listener, unless the leader is the controller).
    wait_until(lambda: len(cluster.state(topic)["isr"]) == 3, what=f"broker {leader} back in {topic}'s ISR")


def test_a_mutual_tls_cluster_replicates_and_survives_its_leader(mtls_cluster: ZkCluster, certs: Path) -> None:
    _replicates_and_survives_its_leader(mtls_cluster, _mtls_client(certs), "over-mtls")


def test_a_sasl_ssl_scram_cluster_replicates_and_survives_its_leader(scram_cluster: ZkCluster, certs: Path) -> None:
    _replicates_and_survives_its_leader(scram_cluster, _scram_client(certs), "over-scram")


def test_a_broker_with_a_wrong_inter_broker_password_never_joins_the_isr_and_says_why(
        scram_cluster: ZkCluster, certs: Path) -> None:
    topic = "wrong-login"
    client = _scram_client(certs)
    admin = AdminClient({"bootstrap.servers": scram_cluster.bootstrap(), **client})
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[[1, 2]])])[topic].result(timeout=60)
    producer = Producer({"bootstrap.servers": scram_cluster.bootstrap(), "acks": "all", **client})
    producer.produce(topic, b"one")
    assert producer.flush(60) == 0
    wrong = BrokerProcess(scram_cluster.root / "broker-4", overrides=(
        f"zookeeper.connect={scram_cluster.zookeeper.connect}", "node.id=4",
        *_scram_overrides(certs, WRONG_PASSWORD), "controlled.shutdown.enable=false"))
    wrong.start()
    try:
        # Broker 4 becomes a replica to add (Kafka's /admin/reassign_partitions): in the ISR only once caught up.
        scram_cluster.zk.create("/admin/reassign_partitions", json.dumps(
            {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [1, 2, 4]}]}).encode())
        wait_until(lambda: "SASL_AUTHENTICATION_FAILED" in wrong.log_path.read_text(),
                   what="broker 4 saying why it cannot fetch")
        refusals = [line for line in wrong.log_path.read_text().splitlines() if "SASL_AUTHENTICATION_FAILED" in line]
        assert any("replica fetcher from broker" in line for line in refusals), refusals
        assert 4 not in scram_cluster.state(topic)["isr"]
        assert scram_cluster.zk.exists("/admin/reassign_partitions") is not None  # still waiting for broker 4
    finally:
        wrong.kill()
    for log in (wrong.log_path, *(b.log_path for b in scram_cluster.brokers.values())):
        text = log.read_text()
        assert WRONG_PASSWORD not in text and BROKER_PASSWORD not in text


@pytest.mark.parametrize(("overrides", "message"), [
    (("listeners=SSL://127.0.0.1:0", "security.inter.broker.protocol=SSL", "inter.broker.listener.name=SSL"),
     "security.inter.broker.protocol: only one of inter.broker.listener.name and security.inter.broker.protocol"),
    (("listeners=SASL_SSL://127.0.0.1:0", "security.inter.broker.protocol=SASL_SSL",
      "sasl.enabled.mechanisms=SCRAM-SHA-512", "sasl.mechanism.inter.broker.protocol=GSSAPI",
      f"listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config={_scram_jaas(BROKER_PASSWORD)}"),
     "sasl.mechanism.inter.broker.protocol: GSSAPI"),
])
def test_inter_broker_settings_that_cannot_work_exit_2_naming_the_key(
        tmp_path: Path, overrides: tuple[str, ...], message: str) -> None:
    done = subprocess.run([sys.executable, "-m", "deploy.cli", "broker", "--data-dir", str(tmp_path / "data"),
                           "--zookeeper", "127.0.0.1:1", *(arg for o in overrides for arg in ("--override", o))],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
