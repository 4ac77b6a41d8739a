"""Reading what a broker holds the way a user's client would: librdkafka (confluent-kafka).

    values = [m.value() for m in read_partition(broker.bootstrap, "t")]

The consumer is assigned the partition (no group membership, nothing committed) and stops at
the end librdkafka reports (its partition EOF), so a test sees exactly what was there.
"""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

__all__ = ["read_partition"]


def read_partition(bootstrap: str, topic: str, partition: int = 0, *, start: int = 0,
                   timeout_s: float = 30.0) -> list[Message]:
    """Every message of `topic`'s `partition` from offset `start` to its end, in offset order.
    Bounded by `timeout_s`: what was read by then comes back, for the caller's assertion to show.
    A consumer error other than the end of the partition fails the test."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4()}",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, partition, start)])
    messages: list[Message] = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                break
            messages.append(msg)
    finally:
        consumer.close()
    return messages
