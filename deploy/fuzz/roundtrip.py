"""The last word after a fuzz run: a real client (librdkafka, through confluent-kafka) creates a
topic, produces with acks=all and reads every record back. Bounded in time throughout."""

from __future__ import annotations

import time

__all__ = ["round_trip"]

RECORDS = 10


def round_trip(bootstrap: str, topic: str, *, timeout_s: float = 60.0) -> str | None:
    """None when the round trip works, else what went wrong."""
    try:
        from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
        from confluent_kafka.admin import AdminClient, NewTopic
    except ImportError:
        return "confluent-kafka is not installed (pip install confluent-kafka)"
    deadline = time.monotonic() + timeout_s
    quiet: dict[str, str | int | float | bool] = {"bootstrap.servers": bootstrap, "log_level": 3}
    admin = AdminClient(quiet)
    future = admin.create_topics([NewTopic(topic, 1, 1)], request_timeout=timeout_s)[topic]
    try:
        future.result(timeout=timeout_s)
    except KafkaException as exc:
        if "TOPIC_ALREADY_EXISTS" not in str(exc):
            return f"creating {topic}: {exc}"
    except TimeoutError:
        return f"creating {topic}: no answer in {timeout_s:.0f}s"
    nonce = f"{time.time_ns()}"
    values = {f"{nonce}-{i}".encode() for i in range(RECORDS)}
    offsets: list[int] = []
    errors: list[str] = []

    def delivered(err: object, msg: object) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            offsets.append(msg.offset())  # type: ignore[attr-defined]

    producer = Producer({**quiet, "acks": "all", "message.timeout.ms": int(timeout_s * 1000)})
    for value in sorted(values):
        producer.produce(topic, value, partition=0, on_delivery=delivered)
    left = producer.flush(max(1.0, deadline - time.monotonic()))
    if left or errors:
        return f"producing to {topic}: {left} records undelivered, errors {errors[:3]}"
    consumer = Consumer({**quiet, "group.id": f"{topic}-reader", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, min(offsets))])
        seen: set[bytes] = set()
        while values - seen and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                return f"consuming {topic}: {msg.error()}"
            seen.add(msg.value() or b"")
        if values - seen:
            return f"consuming {topic}: {len(values - seen)} of {RECORDS} records not read back in {timeout_s:.0f}s"
    finally:
        consumer.close()
    return None
