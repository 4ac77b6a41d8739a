"""A link-mode mirror whose source is Apache Kafka 4.x (a KRaft node from bench/peers) and whose
target is Causeway: the copy keeps Kafka's offsets and batches (idempotent and transactional),
group offsets committed at Kafka (with their leader epoch) are carried over, a consumer moved
to Causeway resumes where it committed, failover promotes the copy, and failback to the Kafka old
primary is refused with what can be done instead (docs/operations/mirror-link.md, "Mirroring
from Apache Kafka")."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from confluent_kafka import OFFSET_STORED, Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from bench.peers import KafkaBroker
from broker.client import TopicPartition, open_client
from deploy.broker_process import BrokerProcess
from deploy.child_process import ChildProcess
from tests.compat.partitions import TIMEOUT_S, create_topic, log_end
from tests.compat.test_mirror_kafka_peers import commit
from tests.integration.partition_reads import read_whole_batches
from tests.integration.test_mirror_link import without_epochs
from tests.support.consume import read_up_to
from tests.support.kafka_source import kafka_and_causeway, mirror_from_kafka
from tests.support.polling import wait_until

pytestmark = pytest.mark.compat
REPO = Path(__file__).resolve().parents[2]
TOPIC, PARTITIONS, GROUP, MIRROR = "orders", 3, "billing", "kafka-to-causeway"


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory, kafka_jars: None) -> Iterator[tuple[KafkaBroker, BrokerProcess]]:
    with kafka_and_causeway(tmp_path_factory.mktemp("kafka-source")) as clusters:
        yield clusters


def produce(bootstrap: str, count: int, tag: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5})
    for i in range(count):
        producer.produce(TOPIC, key=f"{tag}{i}".encode(), value=f"{tag}-value-{i}".encode(), partition=i % PARTITIONS,
                         headers=[("seq", str(i).encode())])
    assert producer.flush(TIMEOUT_S) == 0


def produce_transaction(bootstrap: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "kafka-source-txn"})
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    for i in range(6):
        producer.produce(TOPIC, key=f"t{i}".encode(), value=b"in a transaction", partition=i % PARTITIONS)
    producer.commit_transaction(TIMEOUT_S)


def committed(bootstrap: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    try:
        found = consumer.committed([KafkaTopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=TIMEOUT_S)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in found if tp.offset >= 0}


def resume_group(bootstrap: str, last: dict[int, int]) -> list[tuple[int, int]]:
    """(partition, offset) of each record the group reads at `bootstrap` from its committed offsets
    (librdkafka fetches them, as a restarted consumer does), read_committed, up to `last`."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False,
                         "auto.offset.reset": "latest", "isolation.level": "read_committed"})
    consumer.assign([KafkaTopicPartition(TOPIC, p, OFFSET_STORED) for p in last])
    return read_up_to(consumer, last, TIMEOUT_S)


async def batches(bootstrap: str, partition: int) -> list[bytes]:
    async with open_client(bootstrap) as client:
        return without_epochs(await read_whole_batches(client, TopicPartition(TOPIC, partition), 0))


def cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "deploy.cli", *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=180)


def test_link_mode_from_an_apache_kafka_source(clusters: tuple[KafkaBroker, BrokerProcess], tmp_path: Path) -> None:
    kafka, causeway = clusters
    create_topic(kafka.bootstrap, TOPIC, PARTITIONS)
    produce(kafka.bootstrap, 300, "a")
    produce_transaction(kafka.bootstrap)
    produce(kafka.bootstrap, 30, "b")
    at_kafka = {0: 40, 1: 7, 2: 0}
    # With the partition's leader epoch at Kafka (0: a fresh single-node topic), as a Java consumer commits.
    wait_until(lambda: commit(kafka.bootstrap, GROUP, {(TOPIC, p): o for p, o in at_kafka.items()}, leader_epoch=0),
               what="the group's commit at Kafka", timeout_s=TIMEOUT_S)
    ends = {p: log_end(kafka.bootstrap, TOPIC, p) for p in range(PARTITIONS)}
    assert all(end > 110 for end in ends.values())  # records, the transaction's and its markers

    config = tmp_path / "mirror.yaml"
    config.write_text(json.dumps(mirror_from_kafka(kafka, "causeway", causeway.bootstrap, name=MIRROR, **{
        "refresh.topics.interval.seconds": 0.5, "sync.group.offsets.interval.seconds": 0.5})))
    log = tmp_path / "mirror.log"
    mirror = ChildProcess.start("causeway mirror", [sys.executable, "-m", "deploy.cli", "mirror", "--config",
                                                    str(config)], log_path=log, stdout="discard", cwd=REPO)
    try:
        wait_until(lambda: {p: log_end(causeway.bootstrap, TOPIC, p) for p in range(PARTITIONS)} == ends,
                   what="the copy at Causeway ending where Kafka's log does", timeout_s=TIMEOUT_S)
        wait_until(lambda: committed(causeway.bootstrap) == at_kafka,
                   what="the group's offsets carried to Causeway", timeout_s=TIMEOUT_S)
    finally:
        assert mirror.stop(TIMEOUT_S) == 0, log.read_text(errors="replace")[-3000:]
    assert "Traceback" not in log.read_text(errors="replace")

    # Kafka's batches, byte for byte but for the leader epoch each cluster stamps: the offsets,
    # producer ids and sequences, the transaction and its commit markers.
    for p in range(PARTITIONS):
        assert trio.run(batches, causeway.bootstrap, p) == trio.run(batches, kafka.bootstrap, p), f"partition {p}"

    # The consumer that committed at Kafka, moved: no re-read, no skip, no metadata loop (the
    # carried commit has no leader epoch from Kafka to validate against Causeway's).
    read = resume_group(causeway.bootstrap, {p: end - 1 for p, end in ends.items()})
    for p in range(PARTITIONS):
        offsets = [o for q, o in read if q == p]
        assert offsets and offsets[0] == at_kafka[p], (p, offsets[:3])
        assert offsets == sorted(set(offsets)) and offsets[-1] == ends[p] - 1

    # Failover: the copy becomes Causeway's own topic, writable.
    done = cli("mirror", "failover", "--bootstrap", causeway.bootstrap, "--source-bootstrap", kafka.bootstrap,
               "--timeout", "10")
    assert done.returncode == 0, done.stdout + done.stderr
    produce(causeway.bootstrap, 3, "dr")
    # The promotion marker takes one offset (broker/storage/link_copy.py), the new record the next.
    assert {p: log_end(causeway.bootstrap, TOPIC, p) for p in range(PARTITIONS)} == {p: e + 2 for p, e in ends.items()}

    # Failback to Kafka: it cannot hold mirror topics or cut a tail; refused, nothing changed.
    back = cli("mirror", "truncate-and-restore", "--bootstrap", kafka.bootstrap,
               "--new-primary-bootstrap", causeway.bootstrap, "--reverse-mirror", "causeway-to-kafka")
    assert back.returncode == 1, back.stdout + back.stderr
    assert "Traceback" not in back.stderr
    assert "needs a Causeway old primary" in back.stderr and "mode: mm2" in back.stderr, back.stderr
    assert {p: log_end(kafka.bootstrap, TOPIC, p) for p in range(PARTITIONS)} == ends
