"""Consumer-group figures: rebalance time for 10 members over 100 partitions, commit throughput."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, TopicPartition

MEMBERS = 10
PARTITIONS = 100


def _covered(members: list[Consumer]) -> bool:
    return sorted(tp.partition for m in members for tp in m.assignment()) == list(range(PARTITIONS))


def _poll_until_covered(members: list[Consumer], limit_s: float = 120) -> float:
    start = time.perf_counter()
    while time.perf_counter() - start < limit_s:
        for m in members:
            m.poll(0.01)
        if _covered(members):
            return time.perf_counter() - start
    raise RuntimeError("the group never covered every partition")


def rebalance(bootstrap: str, topic: str) -> tuple[float, float]:
    """Seconds until 10 new members share the topic, and until 9 do after one leaves."""
    members = [Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-rebalance",
                         "session.timeout.ms": 10_000, "heartbeat.interval.ms": 500}) for _ in range(MEMBERS)]
    for m in members:
        m.subscribe([topic])
    first = _poll_until_covered(members)
    leaving = members.pop()
    leaving.close()
    # Drain the last generation's assignment first: a member keeps its partitions until told.
    after = _poll_until_covered(members)
    for m in members:
        m.close()
    return first, after


def commits(bootstrap: str, topic: str, count: int) -> float:
    """Synchronous commits per second of one offset per partition of a 100-partition topic."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-commit", "enable.auto.commit": False})
    try:
        start = time.perf_counter()
        for i in range(count):
            consumer.commit(offsets=[TopicPartition(topic, p, i) for p in range(PARTITIONS)], asynchronous=False)
        return count / (time.perf_counter() - start)
    finally:
        consumer.close()
