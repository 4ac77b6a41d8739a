"""Writing the way a careful user's client writes: librdkafka's idempotent acks=all producer.

    acked = produce_acked(cluster.bootstrap(), "orders", records(0, 200))
    assert acked == records(0, 200)    # every record acknowledged, in order

The producer retries as librdkafka does (through leader changes, NOT_ENOUGH_REPLICAS...) for
up to a minute a record; any delivery error fails the test, so what comes back was acknowledged.
"""

from __future__ import annotations

import os

from confluent_kafka import KafkaError, Producer

__all__ = ["Deliveries", "produce_acked", "produce_spread", "records"]


class Deliveries:
    """librdkafka's delivery reports (`on_delivery`): the acknowledged values in the order their
    acknowledgements came, and the errors."""

    def __init__(self) -> None:
        self.acked: list[bytes] = []
        self.errors: list[KafkaError] = []

    def __call__(self, err: KafkaError | None, msg: object) -> None:
        if err is None:
            self.acked.append(msg.value())  # type: ignore[attr-defined]
        else:
            self.errors.append(err)


def produce_acked(bootstrap: str, topic: str, values: list[bytes], *, partition: int = 0) -> list[bytes]:
    """Send ``values`` to ``topic``'s ``partition`` (idempotent, acks=all, librdkafka's retries);
    the acknowledged ones, in the order their acknowledgements came. Fails on any delivery error
    or on a record still unacknowledged after 90 s."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "message.timeout.ms": 60000})
    report = Deliveries()
    for value in values:
        producer.produce(topic, value, partition=partition, on_delivery=report)
        producer.poll(0)
    assert producer.flush(90) == 0, "records left unacknowledged"
    assert not report.errors, report.errors[:3]
    return report.acked


def produce_spread(bootstrap: str, topic: str, count: int) -> dict[int, list[bytes]]:
    """`count` records `record-<i>` over `topic`'s partitions 0, 1 and 2 in turn (idempotent, acks
    from librdkafka's defaults); what went to each partition, in order."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    sent: dict[int, list[bytes]] = {}
    for i in range(count):
        producer.produce(topic, value=b"record-%d" % i, partition=i % 3)
        sent.setdefault(i % 3, []).append(b"record-%d" % i)
    assert producer.flush(30) == 0
    return sent


def records(start: int, stop: int) -> list[bytes]:
    """KiB records numbered ``start`` to ``stop - 1`` (4 bytes of number, random bytes after):
    each one distinct, none compressible, so a few hundred fill a small disk."""
    return [i.to_bytes(4, "big") + os.urandom(1020) for i in range(start, stop)]
