"""Producer and consumer workloads with librdkafka (confluent-kafka), batching on."""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


@dataclass(frozen=True)
class Throughput:
    records: int
    record_size: int
    seconds: float

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.records * self.record_size / self.seconds / 1e6

    @property
    def rates(self) -> str:
        """Both rates as the benchmarks print them: "N rec/s, M MB/s"."""
        return f"{self.records_per_s:,.0f} rec/s, {self.mb_per_s:,.1f} MB/s"


def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(timeout=30)


def produce_when_queued(producer: Producer, topic: str, *args: Any, **kwargs: Any) -> None:
    """`producer.produce(...)`, waiting for deliveries while its local queue is full."""
    while True:
        try:
            producer.produce(topic, *args, **kwargs)
            return
        except BufferError:
            producer.poll(0.01)


def produce(bootstrap: str, topic: str, count: int, size: int, *, acks: str = "1") -> Throughput:
    """Send ``count`` records of ``size`` bytes as fast as librdkafka batches them."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
            "compression.type": "none",
        }
    )
    payload = b"v" * size
    failures = 0

    def on_delivery(err: object, _msg: object) -> None:
        nonlocal failures
        if err is not None:
            failures += 1

    start = time.perf_counter()
    for _ in range(count):
        produce_when_queued(producer, topic, payload, on_delivery=on_delivery)
        producer.poll(0)
    remaining = producer.flush(120)
    elapsed = time.perf_counter() - start
    if remaining or failures:
        raise RuntimeError(f"{remaining} records undelivered, {failures} failed")
    return Throughput(count, size, elapsed)


def consume(bootstrap: str, topic: str, count: int, size: int) -> Throughput:
    """Read ``count`` records back from offset 0 of partition 0."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52_428_800,
            "max.partition.fetch.bytes": 10_485_760,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen = 0
    start = time.perf_counter()
    deadline = start + 300
    while seen < count and time.perf_counter() < deadline:
        for msg in consumer.consume(num_messages=10_000, timeout=1.0):
            if msg.error() is None:
                seen += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    if seen < count:
        raise RuntimeError(f"consumed {seen} of {count} records")
    return Throughput(count, size, elapsed)


def produce_latency(bootstrap: str, topic: str, rate: int, seconds: float, size: int = 100) -> tuple[float, float]:
    """p50 and p99 milliseconds from produce() to delivery report, acks=all, at ``rate``/s."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    latencies: list[float] = []
    payload = b"v" * size

    def on_delivery(err: object, _msg: object, sent: float) -> None:
        if err is None:
            latencies.append((time.perf_counter() - sent) * 1000)

    total = int(rate * seconds)
    start = time.perf_counter()
    for i in range(total):
        target = start + i / rate
        while (now := time.perf_counter()) < target:
            producer.poll(min(target - now, 0.001))
        sent = time.perf_counter()
        producer.produce(topic, payload, on_delivery=functools.partial(on_delivery, sent=sent))
        producer.poll(0)
    producer.flush(60)
    latencies.sort()
    if not latencies:
        raise RuntimeError("no record was delivered")
    return latencies[len(latencies) // 2], latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
