"""Broker processes for the pipeline tests.

The tests write records with fixed timestamps, years before today (so dates, hours and
percentiles are known in advance). Time-based retention would delete them: Kafka's
log.retention.ms (7 days) judges a segment by its records' timestamps, and the retention check
runs every 5 minutes, so a test session longer than that would lose its topics mid-run. These
brokers keep records by time forever (log.retention.ms=-1, as Kafka takes it).
"""

from __future__ import annotations

from pathlib import Path

import trio

from broker.client import TopicPartition, admin, open_client
from deploy.broker_process import BrokerProcess

__all__ = ["KEEP_FOREVER", "delete_before", "pipeline_broker_process"]

KEEP_FOREVER = "log.retention.ms=-1"


def pipeline_broker_process(data_dir: Path, *overrides: str) -> BrokerProcess:
    """A started broker that never deletes records for their age."""
    return BrokerProcess(data_dir, overrides=(KEEP_FOREVER, *overrides)).start()


def delete_before(bootstrap: str, topic: str, partition: int, offset: int) -> None:
    """DeleteRecords: the partition's log start moves to `offset` (as kafka-delete-records)."""
    async def go() -> None:
        async with open_client(bootstrap) as client:
            with trio.fail_after(30):
                await admin.delete_records(client, {TopicPartition(topic, partition): offset})

    trio.run(go)
