"""Reading what a broker holds the way a user's client would: librdkafka (confluent-kafka).

    values = [m.value() for m in read_partition(broker.bootstrap, "t")]
    committed(broker.bootstrap, "readers", "t", 3)   # {0: 5, 1: -1001, 2: 7}: what a member reads
    group_offsets(broker.bootstrap, "readers", "t")  # {0: 5, 2: 7}: what an admin lists

The consumer is assigned the partition (no group membership, nothing committed) and stops at
the end librdkafka reports (its partition EOF), so a test sees exactly what was there.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from tests.support.polling import wait_until

__all__ = ["committed", "first_offsets", "group_offsets", "group_values", "poll_to_end", "read_partition", "read_topic",
           "read_up_to", "read_values"]


def read_partition(bootstrap: str, topic: str, partition: int = 0, *, start: int = 0,
                   timeout_s: float = 30.0, security: Mapping[str, object] | None = None) -> list[Message]:
    """Every message of `topic`'s `partition` from offset `start` to its end, in offset order.
    Bounded by `timeout_s`: what was read by then comes back, for the caller's assertion to show.
    A consumer error other than the end of the partition fails the test. `security`: librdkafka's
    keys for a secured listener (security.protocol, ssl.*, sasl.*)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4()}",
                         "enable.auto.commit": False, "enable.partition.eof": True, **(security or {})})
    consumer.assign([TopicPartition(topic, partition, start)])
    try:
        messages, error = poll_to_end(consumer, timeout_s)
    finally:
        consumer.close()
    assert error is None or error.code() == KafkaError._PARTITION_EOF, error
    return messages


def read_up_to(consumer: Consumer, last: Mapping[int, int], timeout_s: float) -> list[tuple[int, int]]:
    """(partition, offset) of each record an assigned `consumer` reads, until it read offset
    `last[p]` of each partition p, at most `timeout_s`; any consumer error fails the test (an
    offset reset under auto.offset.reset=error, say). Closes the consumer."""
    read: list[tuple[int, int]] = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and any(o not in read for o in last.items()):
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            read.append((message.partition(), message.offset()))
    finally:
        consumer.close()
    return read


def poll_to_end(consumer: Consumer, timeout_s: float) -> tuple[list[Message], KafkaError | None]:
    """What an assigned `consumer` (with enable.partition.eof) reads until its first error, and that
    error: the end of the partition (_PARTITION_EOF) or what the broker refused. The error is None
    when `timeout_s` passed first. The caller closes the consumer."""
    messages: list[Message] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is None:
            continue
        error = msg.error()
        if error is not None:
            return messages, error
        messages.append(msg)
    return messages, None


def read_values(bootstrap: str, topic: str, count: int, *, timeout_s: float = 60.0,
                config: Mapping[str, object] | None = None) -> list[bytes]:
    """The values of `topic`'s partition 0 from offset 0 as librdkafka reads them, until `count`
    have come (or `timeout_s` has passed), then one more bounded poll that must bring nothing
    more, so that a record too many shows in the caller's assertion. Any consumer error fails the
    test. `config`: more librdkafka keys (isolation.level, security)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4()}",
                         "enable.auto.commit": False, **(config or {})})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(values) < count and time.monotonic() < deadline:
            values += _values(consumer.consume(1000, 1.0))
        values += _values(consumer.consume(1000, 1.0))  # nothing more than the expected records
    finally:
        consumer.close()
    return values


def _values(messages: list[Message]) -> list[bytes]:
    for msg in messages:
        assert msg.error() is None, msg.error()
    return [msg.value() for msg in messages]


def committed(bootstrap: str, group: str, topic: str, partitions: int, timeout_s: float = 60.0) -> dict[int, int]:
    """The group's committed offset for each of `topic`'s first `partitions` partitions, as a
    member's consumer fetches them (OffsetFetch): -1001 (librdkafka's OFFSET_INVALID) where none."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=timeout_s)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in found}


def group_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets on `topic` as an admin lists them (ListConsumerGroupOffsets
    for the whole group): only the partitions that have one."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    found = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(30)
    return {tp.partition: tp.offset for tp in found.topic_partitions if tp.topic == topic and tp.offset >= 0}


def first_offsets(member: Consumer, topic: str, partitions: set[int], timeout_s: float = 60.0) -> dict[int, int]:
    """The first offset `member` (a group's consumer, not yet subscribed) reads in each of `topic`'s
    `partitions`: where its group resumes. Bounded by `timeout_s`; closes the consumer."""
    member.subscribe([topic])
    first: dict[int, int] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while not partitions <= first.keys() and time.monotonic() < deadline:
            msg = member.poll(0.1)
            if msg is not None and msg.error() is None:
                first.setdefault(msg.partition(), msg.offset())
    finally:
        member.close()
    return first


def group_values(config: dict[str, object], topic: str, group: str, count: int, *, polls: int) -> set[bytes]:
    """The distinct values a member of `group` reads from `topic` (subscribed, from the earliest
    offset), until it has `count` of them or has polled `polls` times (a second each at most).
    `config` says how to reach the cluster (bootstrap, security protocol, credentials)."""
    consumer = Consumer({**config, "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    seen: set[bytes] = set()
    try:
        for _ in range(polls):
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                seen.add(message.value())
            if len(seen) == count:
                break
    finally:
        consumer.close()
    return seen


def read_topic(bootstrap: str, topic: str, count: int, deadline_s: float = 90) -> dict[int, list[bytes]]:
    """Every partition of `topic` from the beginning, until `count` records (or the deadline), by
    partition; waits for the topic to exist first (a mirror creates it when it finds it)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "west-check", "enable.auto.commit": False})
    got: dict[int, list[bytes]] = {}
    deadline = time.monotonic() + deadline_s
    try:
        # The mirror creates the topic when it discovers it; ask until it is there.
        def created() -> bool:
            metadata = consumer.list_topics(topic, timeout=10).topics[topic]
            return metadata.error is None and bool(metadata.partitions)

        wait_until(created, what=f"{topic} at {bootstrap}", timeout_s=deadline_s, interval_s=0.2)
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        while sum(map(len, got.values())) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.setdefault(msg.partition(), []).append(msg.value())
    finally:
        consumer.close()
    return got
