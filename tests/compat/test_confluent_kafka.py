"""confluent-kafka (librdkafka) against a real broker process: produce, consume, admin."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

from deploy.broker_process import BrokerProcess

pytestmark = pytest.mark.compat
TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def broker(module_broker: BrokerProcess) -> BrokerProcess:
    """The module's one broker (tests/conftest.py), not one per test: topics keep them apart."""
    return module_broker


def produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]], **conf: object) -> list[tuple[int, int]]:
    """Produce and flush; the (partition, offset) of each delivered record, in order."""
    delivered: list[tuple[int, int]] = []
    errors: list[object] = []

    def on_delivery(err: object, msg: object) -> None:
        if err is not None:
            errors.append(err)
        else:
            delivered.append((msg.partition(), msg.offset()))  # type: ignore[attr-defined]

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    for i, (key, value) in enumerate(records):
        producer.produce(topic, value=value, key=key, partition=0, headers=[("i", str(i).encode())],
                         timestamp=1_700_000_000_000 + i, on_delivery=on_delivery)
    assert producer.flush(TIMEOUT_S) == 0
    assert errors == []
    return delivered


def consume_all(bootstrap: str, topic: str, partition: int, count: int, **conf: object) -> list[object]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4()}",
                         "enable.auto.commit": False, **conf})
    consumer.assign([TopicPartition(topic, partition, 0)])
    out: list[object] = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(out) < count and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            out.append(msg)
    finally:
        consumer.close()
    return out


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_produce_and_consume_every_codec_and_acks(broker: BrokerProcess, compression: str, acks: str) -> None:
    topic = f"t-{compression}-{acks}"
    records = [(f"k{i}".encode(), f"value-{i}-".encode() * 20) for i in range(500)]
    delivered = produce(broker.bootstrap, topic, records, **{"compression.type": compression, "acks": acks})
    assert len(delivered) == len(records)
    if acks != "0":  # acks=0 gets no offsets back
        assert [offset for _, offset in delivered] == list(range(len(records)))
    messages = consume_all(broker.bootstrap, topic, 0, len(records))
    assert [(m.key(), m.value()) for m in messages] == records  # type: ignore[attr-defined]
    assert [m.offset() for m in messages] == list(range(len(records)))  # type: ignore[attr-defined]
    assert [m.headers() for m in messages][:2] == [[("i", b"0")], [("i", b"1")]]  # type: ignore[attr-defined]
    assert messages[7].timestamp()[1] == 1_700_000_000_007  # type: ignore[attr-defined]


def test_consume_from_an_offset(broker: BrokerProcess) -> None:
    records = [(b"k", str(i).encode()) for i in range(300)]
    produce(broker.bootstrap, "from-offset", records)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "o", "enable.auto.commit": False})
    consumer.assign([TopicPartition("from-offset", 0, 250)])
    got: list[int] = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(got) < 50 and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None:
            got.append(msg.offset())
    consumer.close()
    # Batches are returned whole; the client skips records below the asked offset.
    assert got == list(range(250, 300))


def test_idempotent_producer_gets_consecutive_offsets(broker: BrokerProcess) -> None:
    records = [(b"k", str(i).encode()) for i in range(2000)]
    delivered = produce(broker.bootstrap, "idem", records, **{"enable.idempotence": True, "acks": "all"})
    assert [offset for _, offset in delivered] == list(range(2000))
    assert [m.value() for m in consume_all(broker.bootstrap, "idem", 0, 2000)] == [v for _, v in records]  # type: ignore[attr-defined]


def test_metadata_lists_the_broker_and_auto_created_topic(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    produce(broker.bootstrap, "auto", [(b"a", b"b")])
    meta = admin.list_topics(timeout=TIMEOUT_S)
    assert "auto" in meta.topics
    assert [b.port for b in meta.brokers.values()] == [broker.port]
    assert meta.topics["auto"].partitions[0].leader == 0


def test_admin_create_describe_alter_and_delete(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics([NewTopic("orders", 3, 1, config={"retention.ms": "3600000"})])
    futures["orders"].result(TIMEOUT_S)
    with pytest.raises(KafkaException) as exc_info:
        admin.create_topics([NewTopic("orders", 3, 1)])["orders"].result(TIMEOUT_S)
    assert exc_info.value.args[0].name() == "TOPIC_ALREADY_EXISTS"

    resource = ConfigResource(ConfigResource.Type.TOPIC, "orders")
    configs = admin.describe_configs([resource])[resource].result(TIMEOUT_S)
    assert configs["retention.ms"].value == "3600000"
    assert configs["cleanup.policy"].value == "delete"

    resource.set_config("retention.ms", "7200000")
    admin.alter_configs([resource])[resource].result(TIMEOUT_S)
    configs = admin.describe_configs([ConfigResource("topic", "orders")])
    assert list(configs.values())[0].result(TIMEOUT_S)["retention.ms"].value == "7200000"

    admin.create_partitions([NewPartitions("orders", 5)])["orders"].result(TIMEOUT_S)
    assert len(admin.list_topics("orders", timeout=TIMEOUT_S).topics["orders"].partitions) == 5

    admin.delete_topics(["orders"])["orders"].result(TIMEOUT_S)
    assert "orders" not in admin.list_topics(timeout=TIMEOUT_S).topics


def test_watermarks_and_offsets_for_times(broker: BrokerProcess) -> None:
    produce(broker.bootstrap, "times", [(b"k", str(i).encode()) for i in range(10)])
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "w"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition("times", 0), TIMEOUT_S) == (0, 10)
        found = consumer.offsets_for_times([TopicPartition("times", 0, 1_700_000_000_004)], TIMEOUT_S)
        assert found[0].offset == 4
        later = consumer.offsets_for_times([TopicPartition("times", 0, 1_800_000_000_000)], TIMEOUT_S)
        assert later[0].offset == -1  # nothing at or after that time: OFFSET_END
    finally:
        consumer.close()


def test_data_survives_a_restart(broker: BrokerProcess) -> None:
    records = [(b"k", str(i).encode()) for i in range(100)]
    produce(broker.bootstrap, "durable", records, acks="all")
    broker.restart()
    assert [m.value() for m in consume_all(broker.bootstrap, "durable", 0, 100)] == [v for _, v in records]  # type: ignore[attr-defined]
