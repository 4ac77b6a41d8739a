"""Replicated produce: a librdkafka producer against three ZooKeeper-mode brokers.

    python -m bench.replication            # 300,000 records of 100 B per row, 2 rounds
    python -m bench.replication --quick    # 50,000 records, 1 round

One ZooKeeper node (Debian's, through deploy.zookeeper) and three broker processes on this
machine; a topic of one partition per row: RF 1 with acks=1, RF 3 (min.insync.replicas=2) with
acks=1 and with acks=all. The best round of each row is printed as a Markdown table row, and
every row checks that each replica holds the same bytes as the leader once the producer is done
(replication that silently fell behind would make the acks=1 rows look fast).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from bench import ceiling
from bench.clients import produce
from deploy.broker_process import BrokerProcess
from deploy.zookeeper.config import NodePorts, Tuning, pick_free_port
from deploy.zookeeper.node import ZkNode

ROWS = ((1, "1"), (3, "1"), (3, "all"))


@contextmanager
def zookeeper(directory: Path) -> Iterator[str]:
    """One ZooKeeper node; yields its zookeeper.connect string."""
    node = ZkNode(node_id=1, node_dir=directory, ports=NodePorts(client=pick_free_port(), quorum=0, election=0),
                  tuning=Tuning(tick_time_ms=500, force_sync=False, prealloc_kb=1024))
    node.spawn()
    try:
        node.wait_serving(30)
        yield node.address
    finally:
        node.kill()


@contextmanager
def cluster(tmp: Path, connect: str, brokers: int = 3) -> Iterator[list[BrokerProcess]]:
    processes = [BrokerProcess(tmp / f"broker-{i}", log_level="warning", overrides=(
        f"zookeeper.connect={connect}", f"node.id={i}", "offsets.topic.num.partitions=3"))
        for i in range(1, brokers + 1)]
    with ThreadPoolExecutor(brokers) as pool:
        list(pool.map(lambda b: b.start(), processes))
    try:
        yield processes
    finally:
        for process in processes:
            process.stop()


def replica_bytes(tmp: Path, topic: str, brokers: int = 3) -> list[int]:
    """Bytes of the partition's segment files on each broker (0 where it has no replica)."""
    return [sum(f.stat().st_size for f in (tmp / f"broker-{i}").rglob(f"{topic}-0/*.log"))
            for i in range(1, brokers + 1)]


def wait_replicated(tmp: Path, topic: str, rf: int, timeout_s: float = 30.0) -> list[int]:
    """Once `rf` brokers hold the partition and the same bytes of it, the bytes per broker."""
    deadline = time.monotonic() + timeout_s
    while True:
        sizes = replica_bytes(tmp, topic)
        holding = [s for i, s in enumerate(sizes, 1) if any((tmp / f"broker-{i}").rglob(f"{topic}-0"))]
        if len(holding) == rf and len(set(holding)) == 1:
            return sizes
        if time.monotonic() >= deadline:
            raise RuntimeError(f"{topic}: replicas did not converge: bytes per broker {sizes}")
        time.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.replication")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args()
    count = 50_000 if args.quick else 300_000
    rounds = args.rounds or (1 if args.quick else 2)
    print(f"machine: {ceiling.machine_summary()}", flush=True)
    best: dict[tuple[int, str], float] = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        with zookeeper(tmp / "zk") as connect, cluster(tmp, connect) as brokers:
            bootstrap = ",".join(b.bootstrap for b in brokers)
            admin = AdminClient({"bootstrap.servers": bootstrap})
            for round_no in range(rounds):
                for rf, acks in ROWS:
                    topic = f"bench-rf{rf}-acks-{acks}-{round_no}"
                    configs = {"min.insync.replicas": "2"} if rf > 1 else {}
                    for future in admin.create_topics([NewTopic(topic, 1, rf, config=configs)]).values():
                        future.result(30)
                    wait_replicated(tmp, topic, rf)  # every replica's log exists (empty)
                    result = produce(bootstrap, topic, count, 100, acks=acks)
                    sizes = wait_replicated(tmp, topic, rf)
                    best[(rf, acks)] = max(best.get((rf, acks), 0.0), result.records_per_s)
                    print(f"round {round_no}: RF {rf}, acks={acks}: {result.records_per_s:,.0f} rec/s "
                          f"(bytes per broker {sizes})", flush=True)
    print("\n| librdkafka producer, 100 B, one partition | records/s | MB/s |")
    print("| --- | ---: | ---: |")
    for rf, acks in ROWS:
        rate = best[(rf, acks)]
        print(f"| RF {rf}, acks={acks} | {rate:,.0f} | {rate * 100 / 1e6:.1f} |")


if __name__ == "__main__":
    main()
