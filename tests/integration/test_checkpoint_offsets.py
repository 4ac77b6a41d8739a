"""Offsets of 19 digits in a log dir's checkpoints (issue 19, item 5), against a real broker
process and librdkafka.

Kafka's offsets go to 2**63 - 1. A partition whose log starts at 10**18 (Kafka's layout: its
first segment is `01000000000000000000.log`, as a follower or a mirror of a source at such
offsets has it) puts 19-digit offsets in the three offset checkpoints of its log dir and in its
leader-epoch-checkpoint. The readers refused more than 18 digits, so the next start counted every
checkpoint of the dir as damaged: every log recovered from scratch, high watermarks started at 0,
and log starts fell back to the first segments, so records that DeleteRecords had removed from
another topic were served again.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from deploy.broker_process import BrokerProcess
from tests.support.consume import read_partition

TIMEOUT_S = 30.0
HIGH = 10**18


def produce(bootstrap: str, topic: str, values: list[bytes]) -> list[int]:
    """Offsets librdkafka reports for `values` sent to partition 0, in order (acks=all)."""
    offsets: dict[bytes, int] = {}

    def on_delivery(err: object, msg: object) -> None:
        assert err is None, err
        offsets[msg.value()] = msg.offset()  # type: ignore[attr-defined]

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for value in values:
        producer.produce(topic, value=value, partition=0, on_delivery=on_delivery)
    assert producer.flush(TIMEOUT_S) == 0
    return [offsets[v] for v in values]


def delete_records(bootstrap: str, topic: str, before: int) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_records([TopicPartition(topic, 0, before)])
    (result,) = futures.values()
    return int(result.result(TIMEOUT_S).low_watermark)


def watermarks(bootstrap: str, topic: str) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"wm-{uuid.uuid4()}"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT_S)
        return int(low), int(high)
    finally:
        consumer.close()


def move_log_to(partition_dir: Path, base_offset: int) -> None:
    """Leave the partition as a log that starts at `base_offset`: one empty segment there."""
    for child in partition_dir.iterdir():
        child.unlink()
    (partition_dir / f"{base_offset:020d}.log").touch()


def stopped_with_deleted_records(data: Path, other: str, records: int, deleted: int) -> BrokerProcess:
    """A stopped broker whose topic `kept` holds `records` records, the first `deleted` of them
    deleted (so its log start is in the checkpoints), beside a one-partition topic `other`."""
    broker = BrokerProcess(data, topics=("kept:1", f"{other}:1")).start()
    try:
        assert produce(broker.bootstrap, "kept", [b"kept-%03d" % i for i in range(records)]) == list(range(records))
        assert delete_records(broker.bootstrap, "kept", deleted) == deleted
    finally:
        assert broker.stop() == 0, broker.log_tail()
    return broker


def test_nineteen_digit_offsets_keep_every_checkpoint_of_the_dir(tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker = stopped_with_deleted_records(data, "high", 100, 60)
    move_log_to(data / "high-0", HIGH)
    broker.start()
    try:
        offsets = produce(broker.bootstrap, "high", [b"high-%d" % i for i in range(10)])
        assert offsets == list(range(HIGH, HIGH + 10))
        assert delete_records(broker.bootstrap, "high", HIGH + 3) == HIGH + 3
    finally:
        assert broker.stop() == 0, broker.log_tail()
    # What the clean stop wrote (read as text: the reader is what is under test): 19-digit
    # offsets beside the other topic's.
    assert f"high 0 {HIGH + 3}\n" in (data / "log-start-offset-checkpoint").read_text()
    assert "kept 0 60\n" in (data / "log-start-offset-checkpoint").read_text()
    assert f"high 0 {HIGH + 10}\n" in (data / "replication-offset-checkpoint").read_text()
    assert f"0 {HIGH + 3}\n" in (data / "high-0" / "leader-epoch-checkpoint").read_text()

    broker.start()
    try:
        # The other topic's deleted records stay deleted: its log start came from the checkpoint.
        assert watermarks(broker.bootstrap, "kept") == (60, 100)
        kept = read_partition(broker.bootstrap, "kept", start=-2)  # OFFSET_BEGINNING
        assert [m.offset() for m in kept] == list(range(60, 100))
        assert kept[0].value() == b"kept-060"
        # ... and so do the high topic's, at 19 digits.
        assert watermarks(broker.bootstrap, "high") == (HIGH + 3, HIGH + 10)
        assert [m.value() for m in read_partition(broker.bootstrap, "high", start=-2)] == [
            b"high-%d" % i for i in range(3, 10)]
        assert "ignoring damaged" not in broker.log_path.read_text()  # no checkpoint was forgotten
    finally:
        assert broker.stop() == 0, broker.log_tail()


def test_a_produce_past_the_largest_offset_is_refused_and_the_checkpoints_stay_readable(tmp_path: Path) -> None:
    # A log ending 3 offsets below 2**63 - 1 (a copy of a source that high): 3 records fit,
    # 5 would take the log end, and the checkpoints holding it, past an int64.
    data = tmp_path / "data"
    top = 2**63 - 1
    broker = stopped_with_deleted_records(data, "top", 10, 4)
    move_log_to(data / "top-0", top - 3)
    broker.start()
    try:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50, "retries": 0})
        errors: list[object] = []
        for i in range(5):
            producer.produce("top", value=b"top-%d" % i, partition=0,
                             on_delivery=lambda err, _msg: errors.append(err))
        assert producer.flush(TIMEOUT_S) == 0
        assert len(errors) == 5 and all(e is not None and e.code() == KafkaError.OFFSET_OUT_OF_RANGE  # type: ignore[attr-defined]
                                        for e in errors), errors
        assert produce(broker.bootstrap, "top", [b"top-%d" % i for i in range(3)]) == [top - 3, top - 2, top - 1]
    finally:
        assert broker.stop() == 0, broker.log_tail()
    assert f"top 0 {top}\n" in (data / "replication-offset-checkpoint").read_text()

    broker.start()
    try:
        assert watermarks(broker.bootstrap, "kept") == (4, 10)
        assert watermarks(broker.bootstrap, "top") == (top - 3, top)
        assert "ignoring damaged" not in broker.log_path.read_text()
    finally:
        assert broker.stop() == 0, broker.log_tail()
