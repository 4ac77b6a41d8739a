"""A whole broker, in this process, under produce load that rolls segments every few KB with
flush.messages=1 and every housekeeping job due each 50 ms: no fsync runs on the trio thread
(issue 11). The fsyncs happen, in worker threads, and every acknowledged record is there."""

from __future__ import annotations

import os
from pathlib import Path

import trio
from confluent_kafka import Producer

from broker.config import BrokerConfig
from broker.server.broker import RunningBroker, run_broker
from broker.storage.checkpoints import read_offsets
from tests.support.loop_thread import ThreadCalls
from tests.support.polling import wait_for

RECORDS = 400


def produce(bootstrap: str) -> list[int]:
    """Offsets of the records acknowledged (acks=1), in order; runs in a worker thread."""
    acked: list[int] = []
    errors: list[object] = []

    def on_delivery(err: object, msg: object) -> None:
        if err is None:
            acked.append(msg.offset())  # type: ignore[attr-defined]
        else:
            errors.append(err)

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 1, "batch.size": 2000})
    for i in range(RECORDS):
        producer.produce("stall", key=b"k", value=b"%04d" % i + b"x" * 200, partition=0, on_delivery=on_delivery)
        if i % 50 == 49:
            producer.flush(30)
    assert producer.flush(30) == 0 and errors == []
    return acked


async def test_no_fsync_on_the_loop_under_produce_load(tmp_path: Path) -> None:
    config = BrokerConfig.from_properties({
        "log.dirs": str(tmp_path / "data"), "listeners": "PLAINTEXT://127.0.0.1:0",
        "log.segment.bytes": "4096", "log.flush.interval.messages": "1", "log.flush.interval.ms": "50",
        "log.flush.scheduler.interval.ms": "50", "log.flush.offset.checkpoint.interval.ms": "50",
        "log.retention.check.interval.ms": "50", "log.retention.bytes": "20000",
    })
    calls = ThreadCalls()

    async with trio.open_nursery() as nursery:
        running: RunningBroker = await nursery.start(
            lambda task_status: run_broker(config, initial_topics={"stall": 1}, task_status=task_status))
        partition = running.services.replicas.get("stall", 0)
        os_fsync, os.fsync = os.fsync, calls.wrap(os.fsync)  # from here on: the produce phase
        try:
            acked = await trio.to_thread.run_sync(produce, running.bootstrap())
            # Housekeeping runs under the count too: retention deletes, checkpoints are written.
            checkpoint = tmp_path / "data" / "recovery-point-offset-checkpoint"
            await wait_for(lambda: partition.log.log_start_offset > 0
                           and read_offsets(checkpoint).get(("stall", 0)) == RECORDS,
                           what="retention and an offset checkpoint after the load", timeout_s=30)
        finally:
            os.fsync = os_fsync
        nursery.cancel_scope.cancel()
    assert calls.on_loop == []
    assert calls.in_workers > 0
    assert acked == list(range(RECORDS))
    # flush.messages=1: each acknowledged record was fsynced before its answer.
    assert partition.log.recovery_point == RECORDS
    assert len(partition.log.segments) > 1  # rolls ran
