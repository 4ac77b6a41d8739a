"""Poison batches against a real broker process (issue 10, item 9).

Each batch Kafka would refuse goes out in a raw ProduceRequest, between good batches: the
answer carries Kafka's error code, the log end does not move, and afterwards a real consumer
(librdkafka) reads every good record exactly once, in order. And the other way round: whatever
real clients produce, with every codec, still goes in.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator
from pathlib import Path

import crc32c
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from broker.protocol.errors import ErrorCode
from broker.protocol.messages import ProduceRequest, ProduceResponse
from broker.protocol.records import BATCH_HEADER_SIZE, Compression, Record, build_batch
from deploy.broker_process import BrokerProcess
from deploy.kafka_socket import call, connect
from tests.support.consume import read_values

TOPIC = "poison"
PRODUCE_VERSION = 9
HOUR = 3_600_000
READ_TIMEOUT_S = 300  # reading back what was stored: bounded, an empty poll takes at most a second
_HEADER = struct.Struct(">qiibIhiqqqhii")
_FIELDS = ("base_offset", "batch_length", "partition_leader_epoch", "magic", "crc", "attributes",
           "last_offset_delta", "base_timestamp", "max_timestamp", "producer_id", "producer_epoch",
           "base_sequence", "records_count")


@pytest.fixture(scope="module")
def broker(module_broker: BrokerProcess) -> BrokerProcess:
    """The module's one broker (tests/conftest.py) for the clients' cases, not one per case: each
    case writes a topic of its own."""
    return module_broker


@pytest.fixture
def strict_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker that, like a Kafka operator might, bounds CreateTime timestamps to an hour."""
    process = BrokerProcess(tmp_path / "broker", topics=(f"{TOPIC}:1", "clients:1"), overrides=(
        f"log.message.timestamp.before.max.ms={HOUR}", f"log.message.timestamp.after.max.ms={HOUR}")).start()
    try:
        yield process
    finally:
        if process.proc is not None:
            assert process.stop() == 0, process.log_tail()


def restamp(batch: bytes, payload: bytes | None = None, **changes: int) -> bytes:
    """`batch` with header fields changed and/or its records replaced; length and CRC fixed, so
    that what the broker refuses is the content, not a transmission error."""
    values = dict(zip(_FIELDS, _HEADER.unpack_from(batch, 0), strict=True))
    body = batch[BATCH_HEADER_SIZE:] if payload is None else payload
    values.update(changes)
    values["batch_length"] = BATCH_HEADER_SIZE - 12 + len(body)
    out = bytearray(_HEADER.pack(*(values[f] for f in _FIELDS))) + body
    struct.pack_into(">I", out, 17, crc32c.crc32c(memoryview(out)[21:]))
    return bytes(out)


class RawProducer:
    """ProduceRequests over one socket, one at a time; answers (error code, message, offset)."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.sock = connect(broker.bootstrap, timeout_s=30)
        self.correlation = 0

    def send(self, batch: bytes, *, topic: str = TOPIC,
             transactional_id: str | None = None) -> tuple[int, str | None, int]:
        request = ProduceRequest(transactional_id=transactional_id, acks=1, timeout_ms=10_000, topic_data=[
            ProduceRequest.TopicProduceData(name=topic, partition_data=[
                ProduceRequest.PartitionProduceData(index=0, records=batch)])])
        self.correlation += 1
        response: ProduceResponse = call(self.sock, request, PRODUCE_VERSION, self.correlation)
        part = response.responses[0].partition_responses[0]
        return part.error_code, part.error_message, part.base_offset

    def close(self) -> None:
        self.sock.close()


def poisons(now: int) -> list[tuple[str, bytes, ErrorCode]]:
    """(what, batch, the code Kafka's rules give it). Every batch has a valid CRC."""
    good = build_batch([Record(b"k", b"poison-%d" % i, timestamp=now) for i in range(5)])
    plain_body = good[BATCH_HEADER_SIZE:]
    zstd = build_batch([Record(b"k", b"z" * 100, timestamp=now) for _ in range(20)], compression=Compression.ZSTD)
    return [
        ("a count above the records", restamp(good, records_count=6, last_offset_delta=5), ErrorCode.INVALID_RECORD),
        ("a count below the records", restamp(good, records_count=3, last_offset_delta=2), ErrorCode.INVALID_RECORD),
        ("a count that disagrees with the offset range", restamp(good, last_offset_delta=9), ErrorCode.INVALID_RECORD),
        ("compression codec 5", restamp(good, attributes=5), ErrorCode.UNSUPPORTED_COMPRESSION_TYPE),
        ("compression codec 7", restamp(good, attributes=7), ErrorCode.UNSUPPORTED_COMPRESSION_TYPE),
        ("the gzip flag on plain bytes", restamp(good, attributes=int(Compression.GZIP)), ErrorCode.INVALID_RECORD),
        ("a truncated zstd payload", restamp(zstd, zstd[BATCH_HEADER_SIZE:-30]), ErrorCode.INVALID_RECORD),
        ("garbage records", restamp(good, bytes(range(7, 250)) * 2), ErrorCode.INVALID_RECORD),
        ("records cut short", restamp(good, plain_body[:-4]), ErrorCode.INVALID_RECORD),
        ("the control bit", restamp(good, attributes=0x20), ErrorCode.INVALID_RECORD),
        ("the transactional bit from a plain producer",
         restamp(good, attributes=0x10, producer_id=1, producer_epoch=0, base_sequence=0),
         ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
        ("a producer id without a sequence", restamp(good, producer_id=1, producer_epoch=0, base_sequence=-1),
         ErrorCode.INVALID_RECORD),
        ("timestamps a day old", build_batch([Record(b"k", b"old", timestamp=now - 24 * HOUR)]),
         ErrorCode.INVALID_TIMESTAMP),
        ("timestamps a day ahead", build_batch([Record(b"k", b"new", timestamp=now + 24 * HOUR)]),
         ErrorCode.INVALID_TIMESTAMP),
        ("the CRC of damaged bytes", good[:-1] + bytes([good[-1] ^ 1]), ErrorCode.CORRUPT_MESSAGE),
    ]


def log_end(consumer: Consumer) -> int:
    return int(consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=30)[1])


def test_poison_batches_are_refused_with_kafkas_codes_and_store_nothing(strict_broker: BrokerProcess) -> None:
    now = int(time.time() * 1000)
    raw = RawProducer(strict_broker)
    watcher = Consumer({"bootstrap.servers": strict_broker.bootstrap, "group.id": "poison-watch"})
    expected: list[bytes] = []
    try:
        def good(tag: str) -> None:
            values = [b"good-%s-%d" % (tag.encode(), i) for i in range(3)]
            code, message, base = raw.send(build_batch([Record(b"k", v, timestamp=now) for v in values]))
            assert code == ErrorCode.NONE, message
            assert base == len(expected)
            expected.extend(values)

        good("first")
        for what, batch, code in poisons(now):
            before = log_end(watcher)
            got, message, _ = raw.send(batch)
            assert got == code, f"{what}: got {got} ({message}), expected {code.name}"
            assert message, f"{what}: no error message"
            assert log_end(watcher) == before, f"{what}: the log moved"
            good(what.replace(" ", "-"))
        # A produce that names a transaction may carry a plain batch: stored, as Kafka stores it.
        code, message, base = raw.send(build_batch([Record(None, b"t", timestamp=now)]), transactional_id="tx")
        assert (code, base) == (ErrorCode.NONE, len(expected)), message
        expected.append(b"t")
    finally:
        raw.close()
        watcher.close()
    assert read_values(strict_broker.bootstrap, TOPIC, len(expected), timeout_s=READ_TIMEOUT_S) == expected
    assert strict_broker.proc is not None and strict_broker.proc.poll() is None


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_every_batch_librdkafka_makes_still_goes_in(broker: BrokerProcess, codec: str) -> None:
    """Varied sizes (one- to three-byte record lengths, runs of equal records and mixed ones),
    keys, headers, timestamps: librdkafka's batches of every codec pass validation."""
    topic = f"clients-{codec}"
    producer = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec, "linger.ms": 20,
                         "enable.idempotence": True, "batch.num.messages": 500})
    failures: list[str] = []
    expected: list[bytes] = []
    for i in range(1500):
        value = (b"%05d" % i) + b"v" * ((i * 37) % 11_000 if i % 3 == 0 else 100)
        headers = [("h", b"x" * (i % 5))] if i % 4 == 0 else None
        producer.produce(topic, value, key=b"k%d" % (i % 9) if i % 2 else None, partition=0, headers=headers,
                         on_delivery=lambda err, _msg: failures.append(str(err)) if err else None)
        expected.append(value)
        if i % 200 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    assert failures == []
    assert read_values(broker.bootstrap, topic, len(expected), timeout_s=READ_TIMEOUT_S) == expected


def test_topic_timestamp_keys_are_described_and_enforced(broker: BrokerProcess) -> None:
    """Kafka's topic keys (KIP-937 and the deprecated difference key) are shown by
    DescribeConfigs and bound the timestamps of that topic only."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([
        NewTopic(TOPIC, 1, 1, config={"message.timestamp.after.max.ms": "60000"}),
        NewTopic("legacy-window", 1, 1, config={"message.timestamp.difference.max.ms": "60000"}),
        NewTopic("kafka-defaults", 1, 1),
    ]).values():
        future.result(timeout=30)
    described = admin.describe_configs([ConfigResource("topic", TOPIC)])
    configs = next(iter(described.values())).result(timeout=30)
    assert configs["message.timestamp.after.max.ms"].value == "60000"
    assert configs["message.timestamp.before.max.ms"].value == str(2**63 - 1)
    legacy = next(iter(admin.describe_configs([ConfigResource("topic", "legacy-window")]).values())).result(timeout=30)
    assert legacy["message.timestamp.difference.max.ms"].value == "60000"
    broker_configs = next(iter(admin.describe_configs([ConfigResource("broker", "0")]).values())).result(timeout=30)
    assert broker_configs["log.message.timestamp.after.max.ms"].value == "3600000"  # Kafka 4.0's default
    assert broker_configs["log.message.timestamp.before.max.ms"].value == str(2**63 - 1)

    now = int(time.time() * 1000)
    ahead = build_batch([Record(None, b"ahead", timestamp=now + HOUR)])
    behind = build_batch([Record(None, b"behind", timestamp=now - HOUR)])
    raw = RawProducer(broker)
    try:
        def send(topic: str, batch: bytes) -> int:
            return raw.send(batch, topic=topic)[0]

        assert send(TOPIC, ahead) == ErrorCode.INVALID_TIMESTAMP
        assert send(TOPIC, behind) == ErrorCode.NONE  # only the after side is bounded
        assert send("legacy-window", ahead) == ErrorCode.INVALID_TIMESTAMP
        assert send("legacy-window", behind) == ErrorCode.INVALID_TIMESTAMP
        assert send("kafka-defaults", behind) == ErrorCode.NONE
        # Kafka 4.0's default bounds the future side by an hour.
        assert send("kafka-defaults", build_batch([Record(None, b"v", timestamp=now + 2 * HOUR)])) == \
            ErrorCode.INVALID_TIMESTAMP
    finally:
        raw.close()


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_every_batch_kafka_python_makes_still_goes_in(broker: BrokerProcess, codec: str) -> None:
    """kafka-python frames its batches its own way (xerial snappy, its own lz4 frames): they
    pass too."""
    from kafka import KafkaProducer

    topic = f"kafka-python-{codec}"
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=codec, linger_ms=20,
                             batch_size=256 << 10, max_request_size=4 << 20)
    expected = [(b"%05d" % i) + b"w" * ((i * 53) % 9_000 if i % 4 == 0 else 60) for i in range(600)]
    try:
        futures = [producer.send(topic, value, key=b"k" if i % 2 else None, partition=0,
                                 headers=[("h", b"y")] if i % 3 == 0 else None)
                   for i, value in enumerate(expected)]
        producer.flush(timeout=60)
        for future in futures:
            future.get(timeout=30)  # raises on a refused batch
    finally:
        producer.close(timeout=10)
    assert read_values(broker.bootstrap, topic, len(expected), timeout_s=READ_TIMEOUT_S) == expected
