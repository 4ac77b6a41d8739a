"""mm2 mode with `exactly.once.support: required`: a mirror SIGKILLed again and again while it
copies neither loses nor repeats a record for a read_committed reader at the target (a
confluent-kafka consumer), whose view of each partition is the source's, in order; and a
partition parked on a batch the target refuses does not hold back the other partitions' commits."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

import confluent_kafka
import trio

from broker.client import TopicPartition, admin, open_client
from deploy.broker_process import BrokerProcess
from tests.integration.mirror_process import finish_steady_run, produce_steadily, start_mirror
from tests.integration.test_mirror import config_for, read_partition, running, wait_for_end_offsets
from tests.support.polling import wait_for

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


async def test_a_parked_partition_does_not_hold_back_the_others_commits(east: BrokerProcess, tmp_path: Path) -> None:
    # The target takes batches up to 4 KB (message.max.bytes); the source took a 10 KB one in
    # orders-0, which the target refuses with MESSAGE_TOO_LARGE, so orders-0 parks.
    west = BrokerProcess(tmp_path / "small-west", overrides=("message.max.bytes=4096",)).start()
    try:
        producer = confluent_kafka.Producer({"bootstrap.servers": east.bootstrap, "linger.ms": 0})
        producer.produce("orders", value=b"x" * 10_000, partition=0)
        assert producer.flush(30) == 0
        status_file = tmp_path / "status.json"

        def parked() -> bool:
            problems = json.loads(status_file.read_text())["problems"] if status_file.exists() else {}
            return "parked orders-0" in problems

        async with running(config_for(east, west, **{"exactly.once.support": "required"}), status_file) as mirror:
            await wait_for(parked, what="orders-0 parked, in the status file")
            # Produced only now, while orders-0 is parked: a commit that waited for the parked
            # partition (it held its place in the transaction while backing off) never came.
            for i in range(20):
                producer.produce("orders", value=b"small-%d" % i, partition=1)
            assert producer.flush(30) == 0
            await wait_for(lambda: mirror.flushed.get(TopicPartition("orders", 1)) == 19,
                           what="orders-1 committed with its position while orders-0 is parked")
            seen = await trio.to_thread.run_sync(read_committed, west.bootstrap, "east.orders", 3, 20)
            assert [v for _, v in seen[1]] == [b"small-%d" % i for i in range(20)]
            assert seen[0] == [] and parked()
            # The target takes it now: the parked partition goes back into a transaction and commits.
            async with open_client(west.bootstrap) as client:
                await admin.alter_configs(client, "east.orders", {"max.message.bytes": "100000"})
            await wait_for(lambda: mirror.flushed.get(TopicPartition("orders", 0)) == 0,
                           what="orders-0 written and committed once the target takes its batch")
        seen = await trio.to_thread.run_sync(read_committed, west.bootstrap, "east.orders", 3, 21)
        assert [v for _, v in seen[0]] == [b"x" * 10_000] and len(seen[1]) == 20
    finally:
        west.stop()
