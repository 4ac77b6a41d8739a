"""bench.pipeline's one-thread ceiling (fetch alone, decode alone) reads the whole topic window by
window, and the topic outlives the broker's retention check although its records carry CreateTimes
from 2023: the 10-million-record run found it empty after the first check (5 minutes in)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CKTopicPartition

from bench import pipeline as bench_pipeline
from deploy.broker_process import BrokerProcess
from pipeline.planning import OffsetRange
from tests.support.polling import wait_until

RECORDS = 2_000
PARTITIONS = 2


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    # Retention checked every 100 ms instead of every 5 minutes; retention.ms stays 7 days.
    process = BrokerProcess(tmp_path / "broker", overrides=("log.retention.check.interval.ms=100",),
                            log_level="warning").start()
    yield process
    process.stop()


def _low_high(bootstrap: str, topic: str) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ceiling-test"})
    try:
        low, high = consumer.get_watermark_offsets(CKTopicPartition(topic, 0), timeout=10)
        return int(low), int(high)
    finally:
        consumer.close()


def test_windows_cover_a_range_once() -> None:
    rng = OffsetRange("t", 1, 5, 17)
    parts = bench_pipeline.windows(rng, 5)
    assert [(p.start, p.end) for p in parts] == [(5, 10), (10, 15), (15, 17)]
    assert all((p.topic, p.partition) == ("t", 1) for p in parts)
    assert bench_pipeline.windows(OffsetRange("t", 0, 3, 3), 5) == []


def test_ceiling_reads_every_record_after_a_retention_check(broker: BrokerProcess) -> None:
    bench_pipeline.produce(broker.bootstrap, RECORDS, PARTITIONS, 100)
    # A witness topic with the same kind of old CreateTimes and the broker's default retention:
    # once its records are gone, a retention check has run over the bench's topic too.
    witness = "ceiling-witness"
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        producer.produce(witness, value=b"old", timestamp=1_600_000_000_000 + i)
    assert producer.flush(30) == 0
    wait_until(lambda: _low_high(broker.bootstrap, witness) == (10, 10),
               what="retention to delete the witness topic's records", timeout_s=30)

    # Windows of 300 offsets over 1,000 per partition: boundaries fall inside batches.
    fetched, decoded = bench_pipeline.decode_only(broker.bootstrap, RECORDS, window=300)
    assert fetched > 0 and decoded > 0


def test_ceiling_refuses_a_topic_that_lost_records(broker: BrokerProcess) -> None:
    bench_pipeline.produce(broker.bootstrap, RECORDS, PARTITIONS, 100)
    with pytest.raises(RuntimeError, match="retention"):
        bench_pipeline.decode_only(broker.bootstrap, RECORDS + 1)
