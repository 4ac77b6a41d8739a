"""broker.client.transactions against a real broker: a committed transaction is what a
read_committed confluent-kafka reader sees, an aborted one is not, and a second instance of the
same transactional id fences the first (its commit is refused, and what it left open is
aborted)."""

from __future__ import annotations

import confluent_kafka
import pytest
import trio

from broker.client import KafkaError, TopicPartition, admin, open_client, produce_batches
from broker.client.transactions import TransactionalProducer, init_transactional_producer
from broker.protocol.errors import ErrorCode
from broker.protocol.records import Record, build_batch
from deploy.broker_process import BrokerProcess

TIMEOUT_S = 20.0


@pytest.fixture(scope="module")
def broker(module_broker: BrokerProcess) -> BrokerProcess:
    return module_broker


async def _write(producer: TransactionalProducer, tp: TopicPartition, values: list[bytes], sequence: int) -> None:
    await producer.add_partitions([tp])
    batch = build_batch([Record(None, v) for v in values], producer_id=producer.producer_id,
                        producer_epoch=producer.producer_epoch, base_sequence=sequence, is_transactional=True)
    results = await produce_batches(producer.client, {tp: batch}, transactional_id=producer.transactional_id)
    results[tp].raise_for_error()


def _read_committed(bootstrap: str, topic: str, count: int) -> list[bytes]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}",
                                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    seen: list[bytes] = []
    try:
        for _ in range(60):
            for msg in consumer.consume(100, 0.5):
                if msg.error() is None:
                    seen.append(msg.value())
            if len(seen) >= count:
                break
        # One more round: a record that should not be there would show here.
        seen.extend(m.value() for m in consumer.consume(100, 1.0) if m.error() is None)
    finally:
        consumer.close()
    return seen


def test_commit_abort_and_fencing(broker: BrokerProcess) -> None:
    tp = TopicPartition("txn-client", 0)

    async def main() -> None:
        async with open_client(broker.bootstrap, request_timeout_s=TIMEOUT_S) as client:
            await admin.create_topics(client, {tp.topic: 1})
            first = await init_transactional_producer(client, "txn-client-writer")
            await _write(first, tp, [b"a1", b"a2"], 0)
            await first.end(commit=True)
            await _write(first, tp, [b"aborted"], 2)
            await first.end(commit=False)
            await _write(first, tp, [b"left-open"], 3)
            # A restarted instance takes the id: the older one is fenced and its open
            # transaction aborted.
            second = await init_transactional_producer(client, "txn-client-writer")
            assert (second.producer_id, second.producer_epoch) > (first.producer_id, first.producer_epoch)
            with pytest.raises(KafkaError) as fenced:
                await first.end(commit=True)
            assert fenced.value.code in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH)
            await _write(second, tp, [b"b1"], 0)
            await second.end(commit=True)

    trio.run(main)
    # The committed records only: the aborted and left-open ones are hidden (the markers take
    # offsets too, so offsets do not count records).
    assert _read_committed(broker.bootstrap, tp.topic, 3) == [b"a1", b"a2", b"b1"]
