"""librdkafka (confluent-kafka) on the other side of every pipeline test: it writes what Spark
reads, and reads what Spark writes, so the pipeline is judged by a real client."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

__all__ = ["Rec", "consume_all", "create_topic", "produce", "spark_records"]

Headers = tuple[tuple[str, bytes | None], ...] | None


@dataclass(frozen=True)
class Rec:
    """One record as both sides see it; headers None when the record has none (as Spark)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    timestamp_type: int
    headers: Headers = None


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name].result(30)


def produce(bootstrap: str, topic: str, records: Iterable[dict[str, object]], *, compression: str = "none",
            batch_size: int = 16384, idempotent: bool = True) -> None:
    """Each dict holds produce() keyword arguments (key, value, partition, headers, timestamp).
    Not `idempotent`: one request in flight, so the order still holds."""
    errors: list[object] = []
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": compression, "linger.ms": 5,
                         "batch.size": batch_size, "enable.idempotence": idempotent, "error_cb": errors.append,
                         **({} if idempotent else {"max.in.flight.requests.per.connection": 1})})
    for record in records:
        producer.produce(topic, **record, on_delivery=lambda err, _m: errors.append(err) if err else None)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert errors == []


def consume_all(bootstrap: str, topic: str, partitions: Sequence[int], start: int = 0) -> list[Rec]:
    """Every record of the partitions from `start` to their end (a bounded loop: it stops at
    each partition's EOF)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "pipeline-judge", "enable.auto.commit": False,
                         "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, p, start) for p in partitions])
    out: list[Rec] = []
    at_end: set[int] = set()
    try:
        for _ in range(100_000):
            if len(at_end) == len(partitions):
                break
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error() is not None:
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                at_end.add(msg.partition())
                continue
            ts_type, ts = msg.timestamp()
            headers = msg.headers()
            out.append(Rec(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(), ts,
                           ts_type - 1, tuple(headers) if headers else None))  # librdkafka counts from 1
    finally:
        consumer.close()
    return sorted(out, key=lambda r: (r.topic, r.partition, r.offset))


def spark_records(df: object) -> list[Rec]:
    """A causeway DataFrame collected as `Rec`s (timestamps as epoch ms, free of the session's
    time zone)."""
    rows = df.selectExpr("*", "unix_millis(timestamp) AS ts_ms").collect()  # type: ignore[attr-defined]
    out = []
    for r in rows:
        headers = getattr(r, "headers", None)
        out.append(Rec(r.topic, r.partition, r.offset, r.key, r.value, r.ts_ms, r.timestampType,
                       tuple((h.key, h.value) for h in headers) if headers is not None else None))
    return sorted(out, key=lambda r: (r.topic, r.partition, r.offset))
