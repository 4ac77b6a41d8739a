"""Records produced without a timestamp survive retention (issue 19, item 1), against real broker
processes, librdkafka (confluent-kafka, kcat) and a ZooKeeper-mode cluster.

librdkafka sends a record produced with timestamp -1 in a v2 batch whose header says
FirstTimestamp -1 and MaxTimestamp 0: its running maximum starts at 0 (rdkafka_msgset_writer.c).
The broker stored that header as it came, so the segment's largest timestamp was 0 (1970) and the
next retention check deleted records seconds after they were acknowledged, on every replica.
Kafka's LogValidator recomputes the max timestamp from the records (-1 here), and a segment with
no record timestamp is as old as its file's last write (LogSegment.largestTimestamp).

Each test waits on the broker's own count of retention checks (the Prometheus counter
causeway_log_retention_checks_total), never on the clock: a check counted after the records were
acknowledged has run over them, since a check runs whole on the broker's event loop.
"""

from __future__ import annotations

import os
import re
import struct
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import crc32c
import pytest
from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from broker.protocol.records import batch_crc_ok, decode_batch, split_batches
from deploy.broker_process import BrokerProcess
from tests.compat.test_kcat import kcat
from tests.support.cluster import ZkCluster, own_zookeeper_cluster
from tests.support.consume import read_partition
from tests.support.polling import wait_until

pytestmark = pytest.mark.compat
TIMEOUT_S = 30.0
CHECKS = 3  # retention checks the records must outlive
RETENTION = ("log.retention.check.interval.ms=100", "causeway.metrics.listener=127.0.0.1:0")
_MAX_TIMESTAMP_POS = 35  # MaxTimestamp in the v2 batch header, inside the CRC (from byte 21)


def retention_checks(broker: BrokerProcess) -> int:
    """The broker's causeway_log_retention_checks_total, from its current start's endpoint."""
    url = re.findall(r"metrics served on (http://\S+)", broker.log_path.read_text())[-1]
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as answer:
        text = answer.read().decode()
    return int(float(re.search(r"^causeway_log_retention_checks_total (\S+)$", text, re.M).group(1)))  # type: ignore[union-attr]


def wait_for_retention_checks(brokers: list[BrokerProcess], count: int = CHECKS) -> None:
    """Return once each broker has run `count` more retention checks than now."""
    targets = [(b, retention_checks(b) + count) for b in brokers]
    for broker, target in targets:
        wait_until(lambda b=broker, t=target: retention_checks(b) >= t,  # type: ignore[misc]
                   what=f"{count} retention checks of {broker.data_dir.name}")


def produce_without_timestamp(bootstrap: str, topic: str, count: int, *, compression: str = "none",
                              acks: str = "1") -> list[int]:
    """`count` records with timestamp -1 (librdkafka sends FirstTimestamp -1, MaxTimestamp 0),
    batched; the offsets librdkafka reports, in order."""
    offsets: dict[bytes, int] = {}

    def on_delivery(err: KafkaError | None, msg: object) -> None:
        if err is not None:
            raise KafkaException(err)
        offsets[msg.value()] = msg.offset()  # type: ignore[attr-defined]

    # With acks=all, idempotent: under load a batch may wait out its request timeout for the ISR
    # and be sent again; the broker then drops the copy, so the offsets stay 0..count-1.
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.num.messages": 20,
                         "compression.type": compression, "acks": acks, "enable.idempotence": acks == "all"})
    values = [b"record-%03d-" % i + b"abc" * 40 for i in range(count)]
    for value in values:
        producer.produce(topic, value=value, partition=0, timestamp=-1, on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(TIMEOUT_S) == 0
    return [offsets[v] for v in values]


def stored_batches(partition_dir: Path) -> list[tuple[bytes, int]]:
    """(the bytes of each batch the segment files hold, its position in them), in offset order."""
    out: list[tuple[bytes, int]] = []
    for segment in sorted(partition_dir.glob("*.log")):
        data = segment.read_bytes()
        out += [(data, pos) for pos, _ in split_batches(data)]
    return out


def stored_records(partition_dir: Path) -> int:
    return sum(len(decode_batch(data, pos)[1]) for data, pos in stored_batches(partition_dir))


def create_topic(bootstrap: str, name: str, replicas: int = 1, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, replicas, config=configs)])[name].result(TIMEOUT_S)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "broker", overrides=RETENTION).start()
    try:
        yield process
    finally:
        assert process.stop() == 0, process.log_tail()


@pytest.mark.parametrize(("compression", "segment_bytes"), [("none", 4096), ("zstd", 300), ("lz4", 300)])
def test_records_without_timestamp_outlive_retention_checks(broker: BrokerProcess, compression: str,
                                                            segment_bytes: int) -> None:
    # Small segments: rolled segments and the active one both face the retention check.
    create_topic(broker.bootstrap, "no-ts", **{"segment.bytes": str(segment_bytes)})
    assert produce_without_timestamp(broker.bootstrap, "no-ts", 100, compression=compression) == list(range(100))
    wait_for_retention_checks([broker])

    messages = read_partition(broker.bootstrap, "no-ts", start=-2)  # OFFSET_BEGINNING
    assert [m.offset() for m in messages] == list(range(100))
    assert {m.timestamp()[1] for m in messages} == {-1}
    out = kcat("-b", broker.bootstrap, "-C", "-t", "no-ts", "-p", "0", "-o", "beginning", "-e", "-f", "%o\n")
    assert out.split() == [str(i) for i in range(100)]
    # Stored as Kafka stores them: MaxTimestamp recomputed from the records (-1), CRC recomputed.
    batches = stored_batches(broker.data_dir / "no-ts-0")
    assert len(batches) >= 5
    for data, pos in batches:
        header = split_batches(data[pos:])[0][1]
        assert (header.base_timestamp, header.max_timestamp, header.compression) == (
            -1, -1, {"none": 0, "zstd": 4, "lz4": 3}[compression])
        assert batch_crc_ok(data, pos, header)
    assert len(list((broker.data_dir / "no-ts-0").glob("*.log"))) >= 2


def test_records_without_timestamp_pass_a_topics_timestamp_bounds(broker: BrokerProcess) -> None:
    # Kafka checks record timestamps, skipping those without one: MaxTimestamp 0 is no record's.
    create_topic(broker.bootstrap, "bounded", **{"message.timestamp.before.max.ms": "86400000"})
    assert produce_without_timestamp(broker.bootstrap, "bounded", 20) == list(range(20))
    wait_for_retention_checks([broker])
    assert [m.offset() for m in read_partition(broker.bootstrap, "bounded", start=-2)] == list(range(20))


def test_a_log_append_time_topic_stamps_records_without_timestamp(broker: BrokerProcess) -> None:
    # The broker's clock is every record's timestamp there: the segment has a real one.
    create_topic(broker.bootstrap, "appended", **{"message.timestamp.type": "LogAppendTime"})
    before_ms = int(time.time() * 1000)
    assert produce_without_timestamp(broker.bootstrap, "appended", 20, compression="zstd") == list(range(20))
    wait_for_retention_checks([broker])
    messages = read_partition(broker.bootstrap, "appended", start=-2)
    assert [m.offset() for m in messages] == list(range(20))
    assert {m.timestamp()[0] for m in messages} == {TIMESTAMP_LOG_APPEND_TIME}
    assert min(m.timestamp()[1] for m in messages) >= before_ms  # the broker's clock (this machine's), not 0 or -1


def _as_written_before_the_fix(partition_dir: Path) -> None:
    """Put MaxTimestamp back to 0 in every stored batch (CRC fixed): the bytes librdkafka sent,
    which a broker without the fix stored as they came (and a follower or mirror copies)."""
    for segment in sorted(partition_dir.glob("*.log")):
        data = bytearray(segment.read_bytes())
        for pos, header in split_batches(data):
            struct.pack_into(">q", data, pos + _MAX_TIMESTAMP_POS, 0)
            struct.pack_into(">I", data, pos + 17, crc32c.crc32c(memoryview(data)[pos + 21 : pos + header.size]))
        segment.write_bytes(data)


def test_segments_written_before_the_fix_age_from_their_last_write(broker: BrokerProcess) -> None:
    for topic in ("legacy", "legacy-old"):
        create_topic(broker.bootstrap, topic, **{"segment.bytes": "4096"})
        produce_without_timestamp(broker.bootstrap, topic, 60)
    assert broker.stop() == 0, broker.log_tail()
    _as_written_before_the_fix(broker.data_dir / "legacy-0")
    _as_written_before_the_fix(broker.data_dir / "legacy-old-0")
    # legacy-old's files were last written 8 days ago: past the default retention.ms (7 days).
    eight_days_ago = time.time() - 8 * 24 * 3600
    for path in (broker.data_dir / "legacy-old-0").glob("*.log"):
        os.utime(path, (eight_days_ago, eight_days_ago))
    assert stored_records(broker.data_dir / "legacy-0") == 60

    broker.start()
    wait_for_retention_checks([broker])
    assert [m.offset() for m in read_partition(broker.bootstrap, "legacy", start=-2)] == list(range(60))
    # As Kafka: with no record timestamp, the file's age decides, so the old one did go.
    wait_until(lambda: stored_records(broker.data_dir / "legacy-old-0") == 0, what="legacy-old deleted")
    assert read_partition(broker.bootstrap, "legacy-old", start=-2) == []


def test_every_replica_of_a_cluster_keeps_records_without_timestamp(tmp_path: Path) -> None:
    with own_zookeeper_cluster(ZkCluster, tmp_path, overrides=RETENTION) as cluster:
        create_topic(cluster.bootstrap(), "replicated", replicas=3, **{"min.insync.replicas": "2"})
        offsets = produce_without_timestamp(cluster.bootstrap(), "replicated", 100, compression="zstd", acks="all")
        assert offsets == list(range(100))
        brokers = list(cluster.brokers.values())
        # Every follower has the records (acks=all waited for the ISR), then outlives the checks.
        wait_until(lambda: all(stored_records(b.data_dir / "replicated-0") == 100 for b in brokers),
                   what="every replica holding the records")
        wait_for_retention_checks(brokers)
        for b in brokers:
            assert stored_records(b.data_dir / "replicated-0") == 100, b.data_dir
        assert [m.offset() for m in read_partition(cluster.bootstrap(), "replicated", start=-2)] == list(range(100))
