"""SASL/SCRAM on a ZooKeeper-mode cluster, as a Kafka operator sets it up: Kafka's own
`kafka-configs` writes the credentials (AlterUserScramCredentials) into `/config/users/<user>` in
Kafka's format and describes them back; confluent-kafka (SCRAM-SHA-512) and aiokafka
(SCRAM-SHA-256) authenticate against the other broker with them; wrong and deleted credentials
are refused. A standalone broker keeps the same credentials in its data dir."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from confluent_kafka import KafkaError, Producer

from bench.peers import run_tool
from broker.server.user_configs import USERS_FILE
from deploy.broker_process import BrokerProcess
from security.scram import ScramCredential
from tests.support.cluster import ZkCluster, own_zookeeper_cluster
from tests.support.consume import group_values
from tests.support.refusal import ask_metadata

pytestmark = pytest.mark.compat
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
OVERRIDES = (
    "listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "inter.broker.listener.name=PLAINTEXT",
    "sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512",
    f"listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config={SCRAM_JAAS}",
    f"listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config={SCRAM_JAAS}",
    "offsets.topic.replication.factor=1",
)


class TwoBrokers(ZkCluster):
    def __init__(self, zookeeper: object, root: Path, overrides: tuple[str, ...]) -> None:
        super().__init__(zookeeper, root, overrides, ids=(1, 2))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoBrokers]:
    with own_zookeeper_cluster(TwoBrokers, tmp_path_factory.mktemp("scram"), OVERRIDES) as running:
        yield running


def configs(cluster: TwoBrokers, *args: str) -> str:
    # Kafka's tool talks to broker 1's plaintext listener; logins below go to broker 2.
    run = run_tool("kafka-configs", "--bootstrap-server", cluster.brokers[1].listeners["PLAINTEXT"],
                   "--entity-type", "users", *args)
    run.check()
    return run.stdout


def _sasl(broker: BrokerProcess, mechanism: str, password: str) -> dict[str, object]:
    return {"bootstrap.servers": broker.listeners["SASL_PLAINTEXT"], "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": "alice", "sasl.password": password}


def _refused(config: dict[str, object]) -> bool:
    attempt = ask_metadata({**config, "socket.timeout.ms": 5000}, until=(KafkaError._AUTHENTICATION,))
    return attempt.refused_by(KafkaError._AUTHENTICATION)


def test_kafka_configs_writes_credentials_in_kafkas_format_and_describes_them(
        cluster: TwoBrokers, kafka_jars: None) -> None:
    configs(cluster, "--alter", "--entity-name", "alice", "--add-config",
            "SCRAM-SHA-512=[password=alice-512],SCRAM-SHA-256=[iterations=8192,password=alice-256]")
    stored = json.loads(cluster.zk.get("/config/users/alice")[0])["config"]
    assert ScramCredential.from_text(stored["SCRAM-SHA-512"]).iterations == 4096
    assert ScramCredential.from_text(stored["SCRAM-SHA-256"]).iterations == 8192
    assert "alice-512" not in json.dumps(stored)
    described = configs(cluster, "--describe", "--entity-name", "alice")
    assert "SCRAM-SHA-256=iterations=8192" in described and "SCRAM-SHA-512=iterations=4096" in described


def test_librdkafka_authenticates_with_scram_sha_512_on_the_other_broker(
        cluster: TwoBrokers, kafka_jars: None) -> None:
    config = _sasl(cluster.brokers[2], "SCRAM-SHA-512", "alice-512")
    producer = Producer({**config, "acks": "all"})
    for i in range(50):
        producer.produce("scram-512", f"s{i}".encode())
    assert producer.flush(60) == 0
    seen = group_values(config, "scram-512", "scram", 50, polls=120)
    assert seen == {f"s{i}".encode() for i in range(50)}
    assert _refused(_sasl(cluster.brokers[2], "SCRAM-SHA-512", "alice-256"))  # another mechanism's password


def test_aiokafka_authenticates_with_scram_sha_256(cluster: TwoBrokers, kafka_jars: None) -> None:
    common = {"bootstrap_servers": cluster.brokers[2].listeners["SASL_PLAINTEXT"],
              "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-256",
              "sasl_plain_username": "alice", "sasl_plain_password": "alice-256"}

    async def round_trip() -> list[bytes]:
        producer = AIOKafkaProducer(**common, acks="all")
        await producer.start()
        try:
            for i in range(20):
                await producer.send_and_wait("scram-256", f"a{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer("scram-256", **common, auto_offset_reset="earliest")
        await consumer.start()
        try:
            batches = await consumer.getmany(timeout_ms=20000, max_records=20)
            return [record.value for records in batches.values() for record in records if record.value]
        finally:
            await consumer.stop()

    assert sorted(asyncio.run(round_trip())) == sorted(f"a{i}".encode() for i in range(20))


def test_a_deleted_credential_refuses_the_next_login(cluster: TwoBrokers, kafka_jars: None) -> None:
    configs(cluster, "--alter", "--entity-name", "bob", "--add-config", "SCRAM-SHA-512=[password=bob-secret]")
    bob = {**_sasl(cluster.brokers[2], "SCRAM-SHA-512", "bob-secret"), "sasl.username": "bob"}
    assert not _refused(bob)
    configs(cluster, "--alter", "--entity-name", "bob", "--delete-config", "SCRAM-SHA-512")
    assert _refused(bob)
    assert _refused({**bob, "sasl.username": "nobody"})


def test_a_standalone_broker_keeps_scram_users_in_its_data_dir(tmp_path: Path, kafka_jars: None) -> None:
    process = BrokerProcess(tmp_path / "data", overrides=(
        "listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms=SCRAM-SHA-512",
        f"listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config={SCRAM_JAAS}"))
    process.start()
    try:
        run_tool("kafka-configs", "--bootstrap-server", process.listeners["PLAINTEXT"], "--entity-type", "users",
                 "--entity-name", "alice", "--alter", "--add-config", "SCRAM-SHA-512=[password=alice-secret]").check()
        assert not _refused(_sasl(process, "SCRAM-SHA-512", "alice-secret"))
        process.restart()
        assert not _refused(_sasl(process, "SCRAM-SHA-512", "alice-secret"))
        assert _refused(_sasl(process, "SCRAM-SHA-512", "wrong"))
    finally:
        assert process.stop() == 0, process.log_tail()
    users_file = tmp_path / "data" / USERS_FILE
    assert users_file.stat().st_mode & 0o777 == 0o600
    assert "alice-secret" not in users_file.read_text()
