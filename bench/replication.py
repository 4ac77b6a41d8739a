"""Replicated produce: a librdkafka producer against three ZooKeeper-mode brokers.

    python -m bench.replication            # 300,000 records of 100 B per row, 2 rounds
    python -m bench.replication --quick    # 50,000 records, 1 round

One ZooKeeper node (Debian's, through deploy.zookeeper) and three broker processes on this
machine; a topic of one partition per row: RF 1 with acks=1, RF 3 (min.insync.replicas=2) with
acks=1 and with acks=all. The best round of each row is printed as a Markdown table row, and
every row checks that each replica holds the same bytes as the leader once the producer is done
(replication that silently fell behind would make the acks=1 rows look fast).

Then the failover time, once per round: an idempotent acks=all producer writes to an RF 3 topic
(min.insync.replicas=2) about a thousand records a second, the partition's leader is SIGKILLed,
and the time from the kill to the producer's next acknowledged write is measured (the killed
broker is started again afterwards). With SIGKILL the controller learns of the death when the
broker's ZooKeeper session expires, so this is bounded below by `zookeeper.session.timeout.ms`
(Kafka's default 18000; `--session-timeout-ms`).

    python -m bench.replication --profile  # the RF 3 acks=all row only, every broker under cProfile

prints where the leader and one follower spend their time (top functions by own time).
"""

from __future__ import annotations

import argparse
import os
import pstats
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import partial
from pathlib import Path

from confluent_kafka import Producer
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
def cluster(tmp: Path, connect: str, brokers: int = 3, session_timeout_ms: int = 18000,
            profile_dir: Path | None = None, overrides: tuple[str, ...] = ()) -> Iterator[list[BrokerProcess]]:
    """Three brokers; with `profile_dir`, each under cProfile, written there at their clean stop;
    `overrides` are more broker configs."""
    processes = [BrokerProcess(tmp / f"broker-{i}", log_level="warning", python_args=(
        ("-m", "cProfile", "-o", str(profile_dir / f"broker-{i}.prof")) if profile_dir else ()), overrides=(
        f"zookeeper.connect={connect}", f"node.id={i}", "offsets.topic.num.partitions=3",
        f"zookeeper.session.timeout.ms={session_timeout_ms}", *overrides))
        for i in range(1, brokers + 1)]
    with ThreadPoolExecutor(brokers) as pool:
        list(pool.map(lambda b: b.start(), processes))
    try:
        yield processes
    finally:
        for process in processes:
            process.stop()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (/proc/PID/stat), all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_split(brokers: list[BrokerProcess], leader: int, before: dict[str, float]) -> dict[str, float]:
    """CPU seconds since `before` (taken by the same call with before={}): the client (this
    process: librdkafka's threads and the Python loop), the leader, the followers together."""
    now = {"client": time.process_time(), "leader": 0.0, "followers": 0.0}
    for i, broker in enumerate(brokers, 1):
        if broker.proc is not None:
            now["leader" if i == leader else "followers"] += cpu_seconds(broker.proc.pid)
    return {k: v - before.get(k, 0.0) for k, v in now.items()}


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


class AckTimes:
    """A producer in a thread writing ~1000 records/s (acks=all, idempotent) and noting, for each
    record, when it was produced and when its acknowledgement arrived; failures are counted, never
    retried by hand (librdkafka retries)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.acked: list[tuple[float, float]] = []  # (produced, acknowledged), monotonic seconds
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(bootstrap, topic), daemon=True)
        self._thread.start()

    def _report(self, produced: float, err: object, _msg: object) -> None:
        if err is None:
            self.acked.append((produced, time.monotonic()))
        else:
            self.failed.append(str(err))

    def _run(self, bootstrap: str, topic: str) -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                             "linger.ms": 1, "message.timeout.ms": 120000})
        while not self._stop.is_set():
            try:
                producer.produce(topic, b"x" * 100, partition=0, on_delivery=partial(self._report, time.monotonic()))
            except BufferError:
                producer.poll(0.01)
                continue
            producer.poll(0)
            time.sleep(0.001)
        producer.flush(120)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(150)


def failover(admin: AdminClient, brokers: list[BrokerProcess], bootstrap: str, topic: str,
             timeout_s: float = 120.0) -> tuple[float, int, int]:
    """(seconds from the leader's SIGKILL to the next acknowledged write, the killed broker's id,
    the new leader's id); the killed broker is started again before returning."""
    for future in admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})]).values():
        future.result(30)
    leader = admin.list_topics(topic, timeout=15).topics[topic].partitions[0].leader
    writer = AckTimes(bootstrap, topic)
    try:
        deadline = time.monotonic() + timeout_s
        while len(writer.acked) < 2000:  # steady: two seconds of acknowledged writes
            if time.monotonic() >= deadline:
                raise RuntimeError(f"{topic}: the producer did not get going ({writer.failed[-3:]})")
            time.sleep(0.05)
        victim = brokers[leader - 1]
        port = victim.port
        seen = len(writer.acked)
        killed_at = time.monotonic()
        victim.kill()
        # The old leader is gone (killed and reaped): only another leader can acknowledge records
        # produced from now on. (Acknowledgements it sent before dying may still be delivered
        # after `killed_at`; they do not count.)
        dead_at = time.monotonic()
        while (resumed := next((done for sent, done in writer.acked[seen:] if sent >= dead_at), None)) is None:
            if time.monotonic() >= killed_at + timeout_s:
                raise RuntimeError(f"{topic}: no acknowledged write within {timeout_s} s of the leader's SIGKILL")
            time.sleep(0.01)
    finally:
        writer.stop()
    if writer.failed:
        raise RuntimeError(f"{topic}: {len(writer.failed)} records failed, e.g. {writer.failed[:3]}")
    new_leader = admin.list_topics(topic, timeout=15).topics[topic].partitions[0].leader
    victim.start(port=port)
    return resumed - killed_at, leader, new_leader


def profile(count: int) -> None:
    """Run the RF 3 acks=all row with every broker under cProfile; print the leader's and a
    follower's top functions by own time."""
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        with zookeeper(tmp / "zk") as connect, cluster(tmp, connect, profile_dir=tmp) as brokers:
            bootstrap = ",".join(b.bootstrap for b in brokers)
            admin = AdminClient({"bootstrap.servers": bootstrap})
            topic = "bench-profile"
            for future in admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})]).values():
                future.result(30)
            wait_replicated(tmp, topic, 3)
            leader = admin.list_topics(topic, timeout=15).topics[topic].partitions[0].leader
            result = produce(bootstrap, topic, count, 100, acks="all")
            wait_replicated(tmp, topic, 3)
            print(f"under cProfile: RF 3, acks=all: {result.records_per_s:,.0f} rec/s, leader {leader}", flush=True)
        follower = next(i for i in range(1, len(brokers) + 1) if i != leader)
        for role, broker_id in (("leader", leader), ("follower", follower)):
            print(f"\n{role} (broker {broker_id}), top 25 by own time:")
            pstats.Stats(str(tmp / f"broker-{broker_id}.prof")).sort_stats("tottime").print_stats(25)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.replication")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--profile", action="store_true", help="profile the brokers under the RF 3 acks=all row")
    parser.add_argument("--session-timeout-ms", type=int, default=18000,
                        help="the brokers' zookeeper.session.timeout.ms (Kafka's default 18000)")
    args = parser.parse_args()
    count = 50_000 if args.quick else 300_000
    if args.profile:
        profile(count)
        return
    rounds = args.rounds or (1 if args.quick else 2)
    print(f"machine: {ceiling.machine_summary()}", flush=True)
    best: dict[tuple[int, str], float] = {}
    failovers: list[tuple[float, int, int]] = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        with zookeeper(tmp / "zk") as connect, cluster(tmp, connect,
                                                       session_timeout_ms=args.session_timeout_ms) as brokers:
            bootstrap = ",".join(b.bootstrap for b in brokers)
            admin = AdminClient({"bootstrap.servers": bootstrap})
            for round_no in range(rounds):
                for rf, acks in ROWS:
                    topic = f"bench-rf{rf}-acks-{acks}-{round_no}"
                    configs = {"min.insync.replicas": "2"} if rf > 1 else {}
                    for future in admin.create_topics([NewTopic(topic, 1, rf, config=configs)]).values():
                        future.result(30)
                    wait_replicated(tmp, topic, rf)  # every replica's log exists (empty)
                    leader = admin.list_topics(topic, timeout=15).topics[topic].partitions[0].leader
                    before = cpu_split(brokers, leader, {})
                    result = produce(bootstrap, topic, count, 100, acks=acks)
                    cpu = cpu_split(brokers, leader, before)
                    sizes = wait_replicated(tmp, topic, rf)
                    best[(rf, acks)] = max(best.get((rf, acks), 0.0), result.records_per_s)
                    print(f"round {round_no}: RF {rf}, acks={acks}: {result.records_per_s:,.0f} rec/s "
                          f"(bytes per broker {sizes}); CPU s over {result.seconds:.2f} s: "
                          + ", ".join(f"{k} {v:.2f}" for k, v in cpu.items()), flush=True)
                took, killed, new_leader = failover(admin, brokers, bootstrap, f"bench-failover-{round_no}")
                failovers.append((took, killed, new_leader))
                print(f"round {round_no}: failover {took:.2f} s (SIGKILL of leader {killed}, new leader "
                      f"{new_leader})", flush=True)
    print("\n| librdkafka producer, 100 B, one partition | records/s | MB/s |")
    print("| --- | ---: | ---: |")
    for rf, acks in ROWS:
        rate = best[(rf, acks)]
        print(f"| RF {rf}, acks={acks} | {rate:,.0f} | {rate * 100 / 1e6:.1f} |")
    times = ", ".join(f"{took:.2f} s" for took, _, _ in failovers)
    print(f"\nfailover (leader SIGKILL -> next acknowledged acks=all write, zookeeper.session.timeout.ms="
          f"{args.session_timeout_ms}): {times}")


if __name__ == "__main__":
    main()
