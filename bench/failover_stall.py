"""The mm2 mirror's write stall when the target partition's leader is SIGKILLed.

    .venv/bin/python -m bench.failover_stall                          # 3 kills, 6 s ZooKeeper sessions
    .venv/bin/python -m bench.failover_stall --runs 1 --session-timeout-ms 18000   # Kafka's default

A source broker (standalone) holds topic `orders` (one partition) and gets a record every 20 ms
from a producer; the target is a three-broker ZooKeeper cluster (replication factor 3,
min.insync.replicas 2); Causeway's mirror runs in mm2 mode between them, in this process. Once
records flow, the broker leading `east.orders-0` on the target is SIGKILLed. Two times from the
kill: when ZooKeeper names a new leader (the controller notices the dead broker when its session
expires, then elects: the floor for any client), and when the mirror next writes that partition
(its written-records counter moves). The difference is what the client adds. Each run is a fresh
target cluster. Nothing here asserts a speed; it prints the figures.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio
from kazoo.client import KazooClient  # type: ignore[import-untyped]

from broker.client import TopicPartition, admin, open_client, produce
from broker.protocol.records import Record, build_batch
from deploy.broker_process import BrokerProcess
from deploy.zookeeper.config import Tuning
from deploy.zookeeper.ensemble import open_ensemble
from mirror.config import mirror_config_from_data
from mirror.driver import run_mirror
from mirror.runtime import Mirror

SOURCE_TP = TopicPartition("orders", 0)
REMOTE_TOPIC = "east.orders"
PRODUCE_EVERY_S = 0.02
GIVE_UP_S = 300.0


async def one_run(root: Path, session_timeout_ms: int) -> tuple[float, float]:
    """(seconds from the kill to the new leader in ZooKeeper, to the mirror's next write)."""
    tuning = Tuning(tick_time_ms=500, force_sync=False, prealloc_kb=1024)
    async with open_ensemble(root / "zookeeper", tuning=tuning) as ensemble:
        source = BrokerProcess(root / "east", topics=("orders:1",))
        targets = {i: BrokerProcess(root / f"west-{i}", overrides=(
            f"zookeeper.connect={ensemble.connect}", f"node.id={i}",
            f"zookeeper.session.timeout.ms={session_timeout_ms}", "min.insync.replicas=2",
            "default.replication.factor=3",
            "offsets.topic.num.partitions=1", "leader.imbalance.check.interval.seconds=3600")) for i in (1, 2, 3)}
        async def start(process: BrokerProcess) -> None:
            await trio.to_thread.run_sync(process.start)

        async with trio.open_nursery() as starting:
            for process in (source, *targets.values()):
                starting.start_soon(start, process)
        zk = KazooClient(hosts=ensemble.connect)
        zk.start(timeout=15)
        try:
            return await _measure(source, targets, zk)
        finally:
            zk.stop()
            zk.close()
            for process in (source, *targets.values()):
                await trio.to_thread.run_sync(process.stop)


def _leader(zk: KazooClient) -> tuple[int, int]:
    data, _ = zk.get(f"/brokers/topics/{REMOTE_TOPIC}/partitions/0/state")
    state = json.loads(data)
    return int(state["leader"]), int(state["leader_epoch"])


async def _measure(source: BrokerProcess, targets: dict[int, BrokerProcess], zk: KazooClient) -> tuple[float, float]:
    bootstrap = ",".join(p.bootstrap for p in targets.values())
    config = mirror_config_from_data({
        "source": {"alias": "east", "bootstrap": source.bootstrap},
        "target": {"alias": "west", "bootstrap": bootstrap},
        "refresh.topics.interval.seconds": 1,
        "emit.checkpoints.interval.seconds": 0,
    })
    async with trio.open_nursery() as nursery:
        stop_producing = trio.Event()

        async def producer() -> None:
            async with open_client(source.bootstrap) as client:
                n = 0
                while not stop_producing.is_set():
                    await produce(client, "orders", 0, build_batch([Record(str(n).encode(), b"v" * 100)]))
                    n += 1
                    await trio.sleep(PRODUCE_EVERY_S)

        nursery.start_soon(producer)
        mirror: Mirror = await nursery.start(lambda task_status: run_mirror(config, task_status=task_status))
        try:
            async def flowing() -> bool:
                return SOURCE_TP in mirror.partitions and mirror.partitions[SOURCE_TP].records >= 100

            try:
                await _until(flowing, "records mirrored")
            except RuntimeError:
                print(json.dumps(mirror.status(), indent=1, default=str)[:4000])
                raise
            async with open_client(bootstrap) as client:

                async def in_sync() -> bool:  # the remote topic's replicas, before the kill
                    found = await admin.describe_topics(client, [REMOTE_TOPIC])
                    return len(found[REMOTE_TOPIC].partitions[0].isr) == 3

                await _until(in_sync, "a full ISR")
            leader, epoch = _leader(zk)
            pm = mirror.partitions[SOURCE_TP]
            await trio.sleep(0.5)  # records flowing right up to the kill
            written = pm.records
            killed_at = time.monotonic()
            await trio.to_thread.run_sync(targets[leader].kill)
            elected = wrote = None
            with trio.fail_after(GIVE_UP_S):
                while elected is None or wrote is None:
                    now = time.monotonic()
                    if wrote is None and pm.records > written:
                        wrote = now - killed_at
                    if elected is None:
                        new_leader, new_epoch = await trio.to_thread.run_sync(_leader, zk)
                        if new_epoch > epoch and new_leader not in (leader, -1):
                            elected = now - killed_at
                    await trio.sleep(0.01)
            return elected, wrote
        finally:
            stop_producing.set()
            mirror.stop()


async def _until(condition: Callable[[], Awaitable[bool]], what: str, timeout_s: float = 120.0) -> None:
    """Poll `condition` every 50 ms; RuntimeError naming `what` after `timeout_s`."""
    with trio.move_on_after(timeout_s):
        for _ in itertools.count():
            if await condition():
                return
            await trio.sleep(0.05)
    raise RuntimeError(f"no {what} within {timeout_s:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    args = parser.parse_args()
    elections: list[float] = []
    stalls: list[float] = []
    for run in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="causeway-failover-stall-") as directory:
            elected, wrote = trio.run(one_run, Path(directory), args.session_timeout_ms)
        elections.append(elected)
        stalls.append(wrote)
        print(f"run {run + 1}: new leader in ZooKeeper after {elected:.2f} s; mirror wrote again after {wrote:.2f} s "
              f"(client's share {wrote - elected:.2f} s)", flush=True)
    print(f"median of {args.runs}: new leader {statistics.median(elections):.2f} s, next mirror write "
          f"{statistics.median(stalls):.2f} s (zookeeper.session.timeout.ms={args.session_timeout_ms})")


if __name__ == "__main__":
    main()
