"""End-to-end latency at a fixed rate: a librdkafka producer and consumer, in one process.

Kafka's EndToEndLatency sends one record and waits for it before the next, so its rate is set by
the latency it measures, and it prints whole milliseconds. This pair paces the producer to a fixed
rate instead (linger 0, one record per request as far as the rate allows) while the consumer reads
the partition in a thread of its own; each record carries its send time (CLOCK_MONOTONIC, ns), so
the latency is produce call to consumer delivery, to the microsecond.
"""

from __future__ import annotations

import struct
import threading
import time
from dataclasses import dataclass

from confluent_kafka import Consumer, Producer, TopicPartition

__all__ = ["Latency", "end_to_end_at_rate"]

_STAMP = struct.Struct(">q")
DRAIN_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Latency:
    records: int
    p50_ms: float
    p99_ms: float
    p999_ms: float


def _percentile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def end_to_end_at_rate(bootstrap: str, topic: str, *, rate: int, records: int, size: int = 100,
                       acks: str = "1") -> Latency:
    """Produce `records` records of `size` bytes at `rate`/s to partition 0 of a fresh `topic`; the
    latency percentiles of their arrival at a consumer already waiting at the partition's end."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-e2e", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 500, "fetch.min.bytes": 1})
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 0, "compression.type": "none"})
    padding = b"v" * max(0, size - _STAMP.size)
    latencies: list[float] = []
    warm = threading.Event()
    done = threading.Event()
    failure: list[BaseException] = []

    def consume() -> None:
        try:
            consumer.assign([TopicPartition(topic, 0, 0)])
            deadline = None
            while len(latencies) < records:
                if done.is_set():  # the producer finished: bounded wait for the stragglers
                    deadline = deadline or time.monotonic() + DRAIN_TIMEOUT_S
                    if time.monotonic() > deadline:
                        return
                # poll, not consume(num_messages=N): that one waits for N records or its timeout.
                msg = consumer.poll(0.1)
                arrived = time.monotonic_ns()
                if msg is None or msg.error() is not None:
                    continue
                value = msg.value() or b""
                if value == b"warm-up":
                    warm.set()
                    continue
                (sent,) = _STAMP.unpack_from(value)
                latencies.append((arrived - sent) / 1e6)
        except BaseException as exc:  # reported by the producer side
            failure.append(exc)
            warm.set()

    reader = threading.Thread(target=consume, name="e2e-consumer")
    reader.start()
    try:
        # One record through before timing: connections, metadata and the consumer's first fetch.
        producer.produce(topic, b"warm-up", partition=0)
        producer.flush(DRAIN_TIMEOUT_S)
        if not warm.wait(DRAIN_TIMEOUT_S) or failure:
            raise RuntimeError(f"the consumer never saw the warm-up record: {failure or 'timed out'}")
        start = time.monotonic()
        for i in range(records):
            target = start + i / rate
            while (now := time.monotonic()) < target:
                producer.poll(min(target - now, 0.001))
            producer.produce(topic, _STAMP.pack(time.monotonic_ns()) + padding, partition=0)
            producer.poll(0)
        if producer.flush(DRAIN_TIMEOUT_S):
            raise RuntimeError("records left undelivered by the producer")
    finally:
        done.set()
        reader.join()
        consumer.close()
    if failure:
        raise RuntimeError(f"consumer failed: {failure[0]!r}")
    if len(latencies) < records:
        raise RuntimeError(f"{len(latencies)} of {records} records arrived")
    ordered = sorted(latencies)
    return Latency(len(ordered), _percentile(ordered, 0.5), _percentile(ordered, 0.99), _percentile(ordered, 0.999))
