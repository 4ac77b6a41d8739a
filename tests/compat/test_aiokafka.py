"""aiokafka (asyncio) against a real broker process; run in its own event loop."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from deploy.broker_process import BrokerProcess

pytestmark = pytest.mark.compat


@pytest.fixture(scope="module")
def broker(module_broker: BrokerProcess) -> BrokerProcess:
    """The module's one broker (tests/conftest.py), not one per test: topics keep them apart."""
    return module_broker


async def _round_trip(bootstrap: str, topic: str, compression: str | None,
                      ) -> list[tuple[int, bytes | None, bytes | None]]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type=compression,
                                enable_idempotence=True)
    await producer.start()
    try:
        for i in range(200):
            await producer.send(topic, key=b"k%d" % i, value=b"v%d" % i, partition=0)
        await producer.flush()
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, 0)])
        await consumer.seek_to_beginning()
        out: list[tuple[int, bytes | None, bytes | None]] = []
        for _ in range(30):  # bounded: at most 30 polls of one second
            if len(out) >= 200:
                break
            batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 30)
            for messages in batch.values():
                out += [(m.offset, m.key, m.value) for m in messages]
        return out
    finally:
        await consumer.stop()


@pytest.mark.parametrize("compression", [None, "gzip", "lz4", "zstd"])
def test_produce_and_consume(broker: BrokerProcess, compression: str | None) -> None:
    # A plain (not trio) test: aiokafka needs an asyncio loop of its own.
    out = asyncio.run(_round_trip(broker.bootstrap, f"aio-{compression}", compression))  # a topic per case
    assert out == [(i, b"k%d" % i, b"v%d" % i) for i in range(200)]
