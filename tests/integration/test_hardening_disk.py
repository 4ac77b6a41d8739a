"""Issue 10, item 6: a real broker whose data dir fills up (a small tmpfs mount).

Producers get KAFKA_STORAGE_ERROR (not a timeout, not a closed connection), consumers still read
everything acknowledged, the log names the full dir once, and produce works again once space is
freed; after a restart nothing acknowledged is missing and no half-written batch was left.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from broker.protocol.errors import ErrorCode
from broker.protocol.messages import OffsetCommitRequest, OffsetCommitResponse
from deploy.broker_process import BrokerProcess
from deploy.kafka_socket import call, connect
from tests.support.produce import Deliveries
from tests.support.small_disk import fill_to_the_last_byte
from tests.support.small_disk import small_disk as mounted_small_disk

FILLER_BYTES = 2 * 1024 * 1024
VALUE_BYTES = 16 * 1024


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with mounted_small_disk(tmp_path / "disk", size="8m") as mount:
        yield mount


def produce(broker: BrokerProcess, values: list[bytes]) -> tuple[list[bytes], list[KafkaError]]:
    """Send `values` one request each (no retries: the first answer is the one we see); returns
    the acknowledged values and the errors."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "retries": 0,
                         "enable.idempotence": False, "linger.ms": 0, "message.timeout.ms": 30000})
    report = Deliveries()
    for value in values:
        producer.produce("fill", value, partition=0, on_delivery=report)
        producer.flush(30)  # one at a time: each answer is known before the next is sent
    assert producer.flush(30) == 0
    return report.acked, report.errors


def consume_all(broker: BrokerProcess, expected: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "reader",
                         "enable.auto.commit": False, "fetch.max.bytes": 1 << 20})
    consumer.assign([TopicPartition("fill", 0, 0)])
    out: list[bytes] = []
    try:
        for _ in range(200):  # bounded: at most 200 polls
            if len(out) >= expected:
                break
            for msg in consumer.consume(500, 0.5):
                if msg.error() is None:
                    out.append(msg.value())
    finally:
        consumer.close()
    return out


def commit_offset(broker: BrokerProcess, group: str, offset: int) -> int:
    """A simple (generation -1) OffsetCommit v2 on a raw connection; returns its error code and
    checks the connection stays open (a second request is answered too)."""
    request = OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=-1, member_id="", retention_time_ms=-1,
        topics=[OffsetCommitRequest.OffsetCommitRequestTopic(
            name="fill", partitions=[OffsetCommitRequest.OffsetCommitRequestPartition(
                partition_index=0, committed_offset=offset, committed_metadata="")])],
    )
    codes = []
    with connect(broker.bootstrap, timeout_s=30) as sock:
        for correlation_id in (1, 2):
            response: OffsetCommitResponse = call(sock, request, 2, correlation_id)
            codes.append(response.topics[0].partitions[0].error_code)
    assert codes[0] == codes[1]
    return codes[0]


def test_a_full_disk_answers_storage_errors_keeps_serving_reads_and_recovers(small_disk: Path) -> None:
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * FILLER_BYTES)
    # The data dir is the mount itself, so the broker's log (beside it) is not on the full disk.
    # Checkpoints every 100 ms: they fail on the full disk too, and must not disturb anything.
    broker = BrokerProcess(small_disk, topics=("fill:1",),
                           overrides=("log.flush.offset.checkpoint.interval.ms=100",)).start()
    try:
        # 8 MiB with 2 MiB taken: 600 values of 16 KiB cannot all fit.
        values = [i.to_bytes(4, "big") + os.urandom(VALUE_BYTES - 4) for i in range(600)]
        acked, errors = produce(broker, values)
        assert acked, "nothing fitted on the disk"
        assert errors, "the disk never filled"
        assert {e.code() for e in errors} == {KafkaError.KAFKA_STORAGE_ERROR}
        assert broker.proc is not None and broker.proc.poll() is None
        # Everything acknowledged before (and between) the failures is there, in order.
        assert consume_all(broker, len(acked)) == acked
        # The group coordinator cannot write __consumer_offsets either: it answers with Kafka's
        # code for a storage error on commit (NOT_COORDINATOR), on a connection that stays open.
        fill_to_the_last_byte(small_disk / "crumbs")
        assert commit_offset(broker, "committer", 5) == ErrorCode.NOT_COORDINATOR
        (small_disk / "crumbs").unlink()

        log_text = broker.log_path.read_text()
        assert log_text.count("is full") == 1, log_text[-3000:]
        assert f"log dir {small_disk} is full" in log_text
        assert "Traceback" not in log_text

        filler.unlink()
        more, more_errors = produce(broker, [b"after-" + bytes(10) for _ in range(3)])
        assert (len(more), more_errors) == (3, [])
        assert "accepts writes again" in broker.log_path.read_text()
        assert commit_offset(broker, "committer", 5) == ErrorCode.NONE

        # A restart finds a consistent log: every acknowledged record, nothing cut off.
        broker.restart()
        assert consume_all(broker, len(acked) + 3) == acked + more
        tail = broker.log_path.read_text()
        assert "torn" not in tail and "CRC mismatch" not in tail and "truncated" not in tail
        reader = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "committer"})
        try:
            assert reader.committed([TopicPartition("fill", 0)], timeout=30)[0].offset == 5
        finally:
            reader.close()
    finally:
        if broker.proc is not None:
            broker.kill()
