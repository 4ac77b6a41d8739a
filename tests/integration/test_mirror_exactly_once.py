"""mm2 mode with `exactly.once.support: required`: a mirror SIGKILLed again and again while it
copies neither loses nor repeats a record for a read_committed reader at the target (a
confluent-kafka consumer), whose view of each partition is the source's, in order."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

import confluent_kafka
import trio

from deploy.broker_process import BrokerProcess
from tests.integration.mirror_process import finish_steady_run, produce_steadily, start_mirror
from tests.integration.test_mirror import read_partition, wait_for_end_offsets

RECORDS = 6000
KILLS = 3


def read_committed(bootstrap: str, topic: str, partitions: int, count: int) -> list[list[tuple[bytes, bytes]]]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "eos-check",
                                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(partitions)])
    seen: list[list[tuple[bytes, bytes]]] = [[] for _ in range(partitions)]
    try:
        for _ in range(240):
            for msg in consumer.consume(500, 0.5):
                if msg.error() is None:
                    seen[msg.partition()].append((msg.key(), msg.value()))
            if sum(map(len, seen)) >= count:
                break
        # One more round: a repeat arriving late would show here.
        for msg in consumer.consume(500, 1.0):
            if msg.error() is None:
                seen[msg.partition()].append((msg.key(), msg.value()))
    finally:
        consumer.close()
    return seen


async def test_sigkilled_exactly_once_mirror_neither_loses_nor_repeats(
        east: BrokerProcess, west: BrokerProcess, tmp_path: Path) -> None:
    config = tmp_path / "mirror.yaml"
    config.write_text(json.dumps({
        "source": {"alias": "east", "bootstrap": east.bootstrap},
        "target": {"alias": "west", "bootstrap": west.bootstrap},
        "refresh.topics.interval.seconds": 0.2, "offset.flush.interval.ms": 300,
        "exactly.once.support": "required"}))
    done = threading.Event()
    producer = threading.Thread(target=produce_steadily, args=(east.bootstrap, done, RECORDS))
    producer.start()
    status = tmp_path / "status.json"
    try:
        mirror = start_mirror(config, tmp_path / "mirror.log", status)
        for kill in range(KILLS):
            # Each run gets further: the target's log (aborted records included) grows past it.
            floor = 300 * (kill + 1)
            await wait_for_end_offsets(west.bootstrap, "east.orders", {0: floor, 1: floor, 2: floor})
            os.kill(mirror.pid, signal.SIGKILL)  # mid-stream, a transaction open
            mirror.wait()
            mirror = start_mirror(config, tmp_path / "mirror.log", status)
        await finish_steady_run(mirror, status, done, RECORDS)
    finally:
        producer.join(120)
    seen = await trio.to_thread.run_sync(read_committed, west.bootstrap, "east.orders", 3, RECORDS)
    for p in range(3):
        source = [(r.key, r.value) for r in await read_partition(east.bootstrap, "orders", p)]
        assert len(source) == RECORDS // 3
        assert seen[p] == source, f"partition {p}: {len(seen[p])} records read_committed, {len(set(seen[p]))} distinct"
