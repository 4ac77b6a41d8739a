"""One partition of a Kafka or Causeway cluster as the mirror compat tests compare them, through
librdkafka: every record with its key, value, headers and timestamp, the log end, and the raw key
and value of an internal topic's records (heartbeats, checkpoints, offset syncs, Connect's).

    create_topic(source.bootstrap, "orders", 3, {"retention.ms": "3600000"})
    assert read_all(target.bootstrap, "east.orders", 0) == read_all(source.bootstrap, "orders", 0)
"""

from __future__ import annotations

import time
from typing import cast

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

__all__ = ["TIMEOUT_S", "Record", "create_topic", "log_end", "raw", "read_all"]

TIMEOUT_S = 60.0

#: key, value, headers, timestamp: what a mirror must copy unchanged.
Record = tuple[bytes | None, bytes | None, list[tuple[str, bytes]], int]


def create_topic(bootstrap: str, topic: str, partitions: int, config: dict[str, str] | None = None) -> None:
    """Create `topic` with replication factor 1; fails the test if the cluster refuses it."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1, config=config or {})]).values():
        future.result(timeout=TIMEOUT_S)


def log_end(bootstrap: str, topic: str, partition: int) -> int:
    """The partition's log end offset (its high watermark); -1 while the topic does not exist."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "compat-test-ends"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=TIMEOUT_S)[1])
    except KafkaException:  # the topic does not exist yet
        return -1
    finally:
        consumer.close()


def read_all(bootstrap: str, topic: str, partition: int) -> list[Record]:
    """Every record of one partition, from its start to its log end, with offsets in order."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "compat-test-reader",
                         "enable.auto.commit": False})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=TIMEOUT_S)
        consumer.assign([TopicPartition(topic, partition, low)])
        found: list[Record] = []
        offsets: list[int] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(found) < high - low and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            offsets.append(int(msg.offset() or 0))
            headers = cast(list[tuple[str, bytes]], msg.headers() or [])  # a list of pairs from a consumer
            found.append((msg.key(), msg.value(), headers, msg.timestamp()[1]))
        assert offsets == sorted(offsets), f"{topic}-{partition} read out of order"
        return found
    finally:
        consumer.close()


def raw(bootstrap: str, topic: str, partition: int = 0) -> list[tuple[bytes, bytes | None]]:
    """Key and value of every record of a partition (an internal topic's); none while the topic
    does not exist or is empty."""
    if log_end(bootstrap, topic, partition) <= 0:
        return []
    return [(key or b"", value) for key, value, _, _ in read_all(bootstrap, topic, partition)]
