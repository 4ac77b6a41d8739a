"""`causeway mirror` between two real Apache Kafka clusters (two KRaft peers from bench/peers).

Nothing here runs on Causeway's broker: the source and the target are Apache Kafka 4.x, so every
record, heartbeat, checkpoint, offset sync, created topic and committed group offset the mirror
writes is accepted, stored and served back by Kafka itself. Two JVMs start in several seconds
each, so one pair serves the whole module.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from bench.peers import KafkaBroker
from deploy.child_process import ChildProcess
from mirror.formats import Checkpoint, Heartbeat, OffsetSync
from tests.compat.partitions import TIMEOUT_S, create_topic, log_end, raw, read_all
from tests.support.polling import wait_until

pytestmark = pytest.mark.compat
REPO = Path(__file__).resolve().parents[2]
SOURCE_ALIAS, TARGET_ALIAS = "alpha", "beta"

@pytest.fixture(scope="module")
def kafkas(tmp_path_factory: pytest.TempPathFactory,
           kafka_jars: None) -> Iterator[tuple[KafkaBroker, KafkaBroker]]:
    """Two single-node Kafka clusters: `alpha` (source) and `beta` (target)."""
    base = tmp_path_factory.mktemp("kafka-peers")
    started: list[KafkaBroker] = []
    try:
        for name in (SOURCE_ALIAS, TARGET_ALIAS):
            started.append(KafkaBroker(base / name).start())
        yield started[0], started[1]
    finally:
        for broker in started:
            code = broker.stop()
            assert code in (0, 143), f"Kafka did not stop cleanly (exit {code}):\n{broker.log_tail()}"


def produce(bootstrap: str, topic: str, count: int, partitions: int, tag: str) -> None:
    """`count` records with keys, headers and distinct timestamps of the last minute (older ones
    would fall to the topics' time retention at Kafka's first retention check)."""
    stamp = int(time.time() * 1000) - 60_000
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": "lz4",
                         "enable.idempotence": True})
    for i in range(count):
        producer.produce(topic, key=f"{tag}-k{i}".encode(), value=f"{tag}-v{i}".encode() * (1 + i % 7),
                         partition=i % partitions, headers=[("n", str(i).encode())],
                         timestamp=stamp + i)
    assert producer.flush(TIMEOUT_S) == 0


def commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int], *, leader_epoch: int | None = None) -> bool:
    """Commit (with `leader_epoch`, as a Java consumer does, when given), or False while Kafka is
    still creating __consumer_offsets (its first use)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        epoch = {} if leader_epoch is None else {"leader_epoch": leader_epoch}  # None is refused
        consumer.commit(offsets=[TopicPartition(t, p, o, **epoch) for (t, p), o in offsets.items()], asynchronous=False)
    except KafkaException as exc:
        if exc.args[0].code() not in (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
                                      KafkaError.COORDINATOR_LOAD_IN_PROGRESS):
            raise
        return False
    finally:
        consumer.close()
    return True


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=TIMEOUT_S)
    except KafkaException:
        return {}
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in found if tp.offset >= 0}


def start_mirror(tmp_path: Path, source: str, target: str, topic: str, group: str) -> ChildProcess:
    config = tmp_path / "mirror.yaml"
    config.write_text(json.dumps({
        "source": {"alias": SOURCE_ALIAS, "bootstrap": source},
        "target": {"alias": TARGET_ALIAS, "bootstrap": target},
        "topics": {"include": [topic]}, "groups": {"include": [group]},
        "refresh.topics.interval.seconds": 1, "refresh.groups.interval.seconds": 1,
        "emit.heartbeats.interval.seconds": 1, "emit.checkpoints.interval.seconds": 1,
        "sync.group.offsets.interval.seconds": 1}))
    argv = [sys.executable, "-m", "deploy.cli", "mirror", "--config", str(config)]
    return ChildProcess.start("causeway mirror", argv, log_path=tmp_path / "mirror.log", stdout="discard", cwd=REPO)


def test_causeway_mirror_between_two_apache_kafka_clusters(kafkas: tuple[KafkaBroker, KafkaBroker],
                                                           tmp_path: Path) -> None:
    alpha, beta = kafkas
    source, target = alpha.bootstrap, beta.bootstrap
    topic, group, partitions = "ledger", "ledger-app", 3
    remote = f"{SOURCE_ALIAS}.{topic}"
    create_topic(source, topic, partitions, {"retention.ms": "3600000"})
    produce(source, topic, 150, partitions, "a")
    wait_until(lambda: commit(source, group, {(topic, 0): 50, (topic, 1): 7, (topic, 2): 0}),
               what="the group's offsets committed at the source Kafka", timeout_s=TIMEOUT_S)

    mirror = start_mirror(tmp_path, source, target, topic, group)
    try:
        wait_until(lambda: all(log_end(target, remote, p) == 50 for p in range(partitions)),
                   what=f"150 records in {remote} on the target Kafka", timeout_s=TIMEOUT_S)
        # Identical and in order: keys, values, headers, timestamps, partition by partition.
        for p in range(partitions):
            assert read_all(target, remote, p) == read_all(source, topic, p), f"partition {p} differs"

        # The remote topic: the source's partition count and its non-default config, created on Kafka.
        target_admin = AdminClient({"bootstrap.servers": target})  # held: its futures need the handle
        assert len(target_admin.list_topics(timeout=TIMEOUT_S).topics[remote].partitions) == partitions
        resource = ConfigResource("topic", remote)
        assert target_admin.describe_configs([resource])[resource].result(timeout=TIMEOUT_S)[
            "retention.ms"].value == "3600000"

        # Heartbeats on the target Kafka, in MM2's `heartbeats` topic, from alpha to beta, advancing.
        def beats() -> list[Heartbeat]:
            return [Heartbeat.decode(key, value or b"") for key, value in raw(target, "heartbeats")]
        wait_until(lambda: len(beats()) >= 2, what="two heartbeats on the target Kafka", timeout_s=TIMEOUT_S)
        assert {(b.source_alias, b.target_alias) for b in beats()} == {(SOURCE_ALIAS, TARGET_ALIAS)}
        stamps = [b.timestamp_ms for b in beats()]
        assert stamps == sorted(stamps) and abs(stamps[-1] / 1000 - time.time()) < TIMEOUT_S

        # Offset syncs on the source Kafka, in MM2's compacted topic named after the target alias.
        syncs_topic = f"mm2-offset-syncs.{TARGET_ALIAS}.internal"
        source_admin = AdminClient({"bootstrap.servers": source})
        syncs_resource = ConfigResource("topic", syncs_topic)
        assert source_admin.describe_configs([syncs_resource])[syncs_resource].result(timeout=TIMEOUT_S)[
            "cleanup.policy"].value == "compact"

        def syncs() -> list[OffsetSync]:
            return [s for s in (OffsetSync.decode(k, v or b"") for k, v in raw(source, syncs_topic))
                    if s.topic == topic]
        wait_until(lambda: {s.partition for s in syncs()} == set(range(partitions)),
                   what="offset syncs for every partition", timeout_s=TIMEOUT_S)

        # Checkpoints on the target Kafka: the group's committed offsets, translated by MM2's rule
        # (exact at an offset sync, else one past the newest sync below), then committed to the same
        # group on the target Kafka, which has no members there.
        checkpoints_topic = f"{SOURCE_ALIAS}.checkpoints.internal"

        def checkpoints() -> dict[int, Checkpoint]:
            return {c.partition: c for c in (Checkpoint.decode(k, v or b"") for k, v in raw(target, checkpoints_topic))}
        wait_until(lambda: {p: c.upstream_offset for p, c in checkpoints().items()} == {0: 50, 1: 7, 2: 0},
                   what="checkpoints of the group on the target Kafka", timeout_s=TIMEOUT_S)
        found = checkpoints()
        assert {(c.group, c.topic) for c in found.values()} == {(group, remote)}
        every_sync = syncs()
        for p, checkpoint in found.items():
            below = [s for s in every_sync if s.partition == p and s.upstream_offset <= checkpoint.upstream_offset]
            assert below, f"no offset sync at or below {checkpoint}"
            newest = max(below, key=lambda s: s.upstream_offset)
            step = 0 if newest.upstream_offset == checkpoint.upstream_offset else 1
            assert checkpoint.downstream_offset == newest.downstream_offset + step, (checkpoint, newest)
            # Mirrored from offset 0, so the remote offsets equal the source's: never past them.
            assert checkpoint.downstream_offset <= checkpoint.upstream_offset
        assert found[2].downstream_offset == 0
        translated = {p: c.downstream_offset for p, c in found.items()}
        wait_until(lambda: committed(target, group, remote, partitions) == translated,
                   what="the group's translated offsets committed on the target Kafka", timeout_s=TIMEOUT_S)
    finally:
        stop_mirror(mirror, tmp_path)


def stop_mirror(mirror: ChildProcess, tmp_path: Path) -> None:
    code = mirror.stop(TIMEOUT_S)
    log = (tmp_path / "mirror.log").read_text(errors="replace")
    assert code == 0, log[-3000:]
    assert "Traceback" not in log, log[-3000:]


def parked(tmp_path: Path) -> str | None:
    """The mirror's first "parked" line: a batch the target refused, so waiting longer is pointless."""
    for line in (tmp_path / "mirror.log").read_text(errors="replace").splitlines():
        if "parked at source offset" in line:
            return line
    return None


def test_later_batches_reach_a_kafka_target(kafkas: tuple[KafkaBroker, KafkaBroker], tmp_path: Path) -> None:
    """Records produced while the mirror runs arrive behind the first ones, in order. At the source
    they sit in batches whose base offset is past 0, as every batch but a partition's first does."""
    alpha, beta = kafkas
    source, target = alpha.bootstrap, beta.bootstrap
    topic, group, partitions = "journal", "journal-app", 2
    remote = f"{SOURCE_ALIAS}.{topic}"
    create_topic(source, topic, partitions, {})
    produce(source, topic, 40, partitions, "a")
    mirror = start_mirror(tmp_path, source, target, topic, group)
    try:
        wait_until(lambda: all(log_end(target, remote, p) == 20 for p in range(partitions)),
                   what=f"the first batches in {remote} on the target Kafka", timeout_s=TIMEOUT_S)
        produce(source, topic, 20, partitions, "b")

        def arrived() -> bool:
            refused = parked(tmp_path)
            assert refused is None, refused
            return all(log_end(target, remote, p) == 30 for p in range(partitions))
        wait_until(arrived, what="records produced while the mirror runs", timeout_s=TIMEOUT_S)
        for p in range(partitions):
            assert read_all(target, remote, p) == read_all(source, topic, p), f"partition {p} differs"
    finally:
        stop_mirror(mirror, tmp_path)
