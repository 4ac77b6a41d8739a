"""KIP-1279's leader-epoch invariant with an Apache Kafka 4.x source (a KRaft node from
bench/peers) and a Causeway target: a link-mode mirror keeps each mirror topic partition's
leader epoch at or above Kafka's (docs/operations/mirror-link.md, "Leader epochs"), whether Kafka
reached it before the mirror started or while it runs with nothing written since. A consumer
that holds a position with Kafka's epoch then reads on at Causeway: Causeway's metadata is not
older than what it saw, OffsetForLeaderEpoch finds the epoch, nothing is reset.

Kafka's epochs move by restarting its one node: KRaft fences it at shutdown (its partitions go
leaderless, a new epoch) and unfences it at start (leader again, another epoch)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from bench.peers import KafkaBroker
from broker.client import TopicPartition, admin, open_client
from broker.protocol.messages import OffsetForLeaderEpochRequest
from deploy.broker_process import BrokerProcess
from deploy.child_process import ChildProcess
from tests.compat.partitions import TIMEOUT_S, create_topic, log_end
from tests.compat.test_mirror_link_from_kafka import REPO
from tests.support.consume import read_up_to
from tests.support.kafka_source import kafka_and_causeway, mirror_from_kafka
from tests.support.polling import wait_until

pytestmark = pytest.mark.compat
TOPIC, PARTITIONS, MIRROR = "payments", 2, "kafka-to-causeway"


@pytest.fixture
def clusters(tmp_path: Path, kafka_jars: None) -> Iterator[tuple[KafkaBroker, BrokerProcess]]:
    with kafka_and_causeway(tmp_path) as clusters:
        yield clusters


def produce(bootstrap: str, count: int, tag: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(count):
        producer.produce(TOPIC, key=f"{tag}{i}".encode(), value=f"{tag}-{i}".encode(), partition=i % PARTITIONS)
    assert producer.flush(TIMEOUT_S) == 0


def leader_epochs(bootstrap: str) -> dict[int, int]:
    async def read() -> dict[int, int]:
        async with open_client(bootstrap) as client:
            topics = await admin.describe_topics(client, [TOPIC])
        return {p: m.leader_epoch for p, m in topics[TOPIC].partitions.items()}
    return trio.run(read)


def epoch_ends(bootstrap: str, epochs: dict[int, int]) -> dict[int, tuple[int, int, int]]:
    """OffsetForLeaderEpoch at each partition's leader, as a consumer validating its position
    asks it (current epoch unknown: -1): (error, epoch, end offset) for each of `epochs`."""
    async def ask() -> dict[int, tuple[int, int, int]]:
        out = {}
        async with open_client(bootstrap) as client:
            for p, epoch in epochs.items():
                leader = await client.leader_for(TopicPartition(TOPIC, p))
                asked = OffsetForLeaderEpochRequest.OffsetForLeaderPartition(
                    partition=p, current_leader_epoch=-1, leader_epoch=epoch)
                request = OffsetForLeaderEpochRequest(replica_id=-1, topics=[
                    OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic=TOPIC, partitions=[asked])])
                answer = (await client.request(leader.node_id, request)).topics[0].partitions[0]
                out[p] = (answer.error_code, answer.leader_epoch, answer.end_offset)
        return out
    return trio.run(ask)


def ends(bootstrap: str) -> dict[int, int]:
    return {p: log_end(bootstrap, TOPIC, p) for p in range(PARTITIONS)}


def read_on(bootstrap: str, positions: dict[int, tuple[int, int]], ends_at: dict[int, int]) -> list[tuple[int, int]]:
    """(partition, offset) of each record a consumer reads at `bootstrap` from `positions`
    (offset, leader epoch), up to `ends_at`. librdkafka first validates each position's epoch
    (KIP-320 OffsetForLeaderEpoch); an epoch the cluster does not know resets the position, which
    auto.offset.reset=error turns into an error here rather than a silent re-read or skip."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "moved-from-kafka", "enable.auto.commit": False,
                         "auto.offset.reset": "error"})
    consumer.assign([KafkaTopicPartition(TOPIC, p, offset, leader_epoch=epoch)
                     for p, (offset, epoch) in positions.items()])
    return read_up_to(consumer, {p: end - 1 for p, end in ends_at.items()}, TIMEOUT_S)


def test_mirror_topics_keep_kafkas_leader_epochs(clusters: tuple[KafkaBroker, BrokerProcess], tmp_path: Path) -> None:
    kafka, causeway = clusters
    create_topic(kafka.bootstrap, TOPIC, PARTITIONS)
    produce(kafka.bootstrap, 40, "a")
    kafka.restart()  # epochs move on before the mirror ever sees the topic
    produce(kafka.bootstrap, 40, "b")
    before = leader_epochs(kafka.bootstrap)
    assert all(epoch > 0 for epoch in before.values()), before

    config = tmp_path / "mirror.yaml"
    config.write_text(json.dumps(mirror_from_kafka(kafka, "causeway", causeway.bootstrap, name=MIRROR, **{
        "refresh.topics.interval.seconds": 0.5, "sync.group.offsets.enabled": False})))
    log = tmp_path / "mirror.log"
    mirror = ChildProcess.start("causeway mirror", [sys.executable, "-m", "deploy.cli", "mirror", "--config",
                                                    str(config)], log_path=log, stdout="discard", cwd=REPO)
    try:
        at_kafka = ends(kafka.bootstrap)
        wait_until(lambda: ends(causeway.bootstrap) == at_kafka, what="the copy ending where Kafka's log does",
                   timeout_s=TIMEOUT_S)
        copied = leader_epochs(causeway.bootstrap)
        assert all(copied[p] >= before[p] for p in before), (copied, before)

        # Kafka moves on again with nothing written: the idle partitions' epochs follow.
        kafka.restart()
        later = leader_epochs(kafka.bootstrap)
        assert all(later[p] > before[p] for p in before), (later, before)
        wait_until(lambda: all(e >= later[p] for p, e in leader_epochs(causeway.bootstrap).items()),
                   what="Causeway's leader epochs at or above Kafka's new ones", timeout_s=TIMEOUT_S)
        # ... and so do the batches written after it.
        produce(kafka.bootstrap, 20, "c")
        at_kafka = ends(kafka.bootstrap)
        wait_until(lambda: ends(causeway.bootstrap) == at_kafka, what="the copy of what Kafka wrote since",
                   timeout_s=TIMEOUT_S)
    finally:
        assert mirror.stop(TIMEOUT_S) == 0, log.read_text(errors="replace")[-3000:]
    assert "Traceback" not in log.read_text(errors="replace")

    # Kafka's epochs are Causeway's, begun at the same offsets (each raised before the first
    # batch copied in it): OffsetForLeaderEpoch answers every epoch, old or current, as Kafka
    # does, so a consumer validating a position it read at Kafka finds it where Kafka would.
    for asked in range(max(later.values()) + 1):
        at_causeway = epoch_ends(causeway.bootstrap, dict.fromkeys(range(PARTITIONS), asked))
        assert at_causeway == epoch_ends(kafka.bootstrap, dict.fromkeys(range(PARTITIONS), asked)), asked
    answered = epoch_ends(causeway.bootstrap, later)
    assert answered == {p: (0, later[p], at_kafka[p]) for p in range(PARTITIONS)}

    # A consumer that read at Kafka holds its position with Kafka's epoch (a process whose
    # bootstrap name moved to Causeway with no restart, or one that seeks to a position it kept
    # with its epoch): it reads on at Causeway from there, nothing reset, re-read or skipped.
    positions = {0: (at_kafka[0] - 10, later[0]), 1: (30, before[1])}  # in Kafka's current epoch, in an older one
    read = read_on(causeway.bootstrap, positions, at_kafka)
    for p in range(PARTITIONS):
        offsets = [o for q, o in read if q == p]
        assert offsets == list(range(positions[p][0], at_kafka[p])), (p, offsets[:3], offsets[-3:])
