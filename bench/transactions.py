"""What a transaction costs: confluent-kafka's transactional producer beside its idempotent one,
on a standalone Causeway broker, on a 3-broker ZooKeeper cluster, and on Apache Kafka 4.x (one
KRaft node), in one run.

    python -m bench.transactions            # 2 rounds, transactions of 1, 10, 100 and 1,000 records
    python -m bench.transactions --quick    # a smoke run (one round, short cases)
    python -m bench.transactions --rounds 3

For each transaction size N, one producer runs for a fixed time: transactional (begin, N records
of 100 B spread over the topic's 3 partitions, commit_transaction), then idempotent (acks=all, N
records, flush): a transaction against a round of the same records, the same producer settings
otherwise (librdkafka's defaults, linger.ms=5). A transaction costs its AddPartitionsToTxn, its
EndTxn and, before the producer's next AddPartitionsToTxn is taken, the coordinator's markers
and its CompleteCommit: every one of them a write to a replicated log. The figures are
transactions (or rounds) per second and records per second.

The cluster: one ZooKeeper node and three ZooKeeper-mode brokers (bench.replication), the topic
and `__transaction_state` with 3 replicas and min.insync.replicas=2 (`__transaction_state`'s
default). Standalone Causeway and Kafka keep one replica of everything (Kafka's single-node
settings, bench.peers.kraft). `__transaction_state` gets 3 partitions everywhere (its 50 by
default only make the first FindCoordinator slower). Each round runs the setups in a rotated
order (the machine is shared); each figure is the best of the rounds, every value printed as it
comes. The machine's floor is measured in the same run: the loopback round trip of 100 B between
two Python threads (bench.ceiling), the least any one of a transaction's round trips can take.
The end is a Markdown section for BENCHMARKS.md.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench import ceiling
from bench.clients import produce_when_queued
from bench.peers import KafkaBroker, PeerMissing, peer
from bench.replication import cluster, zookeeper
from bench.side_by_side import announce_run, how_run, profile_from_command_line
from deploy.broker_process import BrokerProcess

__all__ = ["CLUSTER", "FULL", "KAFKA", "MODES", "QUICK", "SETUPS", "STANDALONE", "Profile", "Rate", "Results",
           "main", "markdown", "run"]

STANDALONE, CLUSTER, KAFKA = "causeway standalone", "causeway 3 brokers (ZooKeeper)", "kafka (1 KRaft node)"
SETUPS: tuple[str, ...] = (STANDALONE, CLUSTER, KAFKA)
TRANSACTIONAL, IDEMPOTENT = "transactional", "idempotent"
MODES: tuple[str, ...] = (TRANSACTIONAL, IDEMPOTENT)
PARTITIONS = 3
RECORD = b"x" * 100
TIMEOUT_S = 60.0
# Both sides: __transaction_state's partitions (the default 50 only slow the first FindCoordinator).
TXN_LOG = {"transaction.state.log.num.partitions": "3"}


@dataclass(frozen=True)
class Profile:
    rounds: int
    sizes: tuple[int, ...]  # records per transaction (per flushed round when idempotent)
    seconds: float  # per case
    ceiling_round_trips: int


FULL = Profile(rounds=2, sizes=(1, 10, 100, 1000), seconds=8.0, ceiling_round_trips=2000)
QUICK = Profile(rounds=1, sizes=(1, 100), seconds=1.0, ceiling_round_trips=200)


@dataclass(frozen=True)
class Rate:
    rounds_per_s: float  # transactions, or flushed rounds
    records_per_s: float


@dataclass
class Results:
    profile: Profile
    kafka_version: str
    # setup -> (mode, size) -> one Rate per round
    rates: dict[str, dict[tuple[str, int], list[Rate]]] = field(default_factory=lambda: {s: {} for s in SETUPS})
    round_trip_us: list[float] = field(default_factory=list)  # loopback p50, one per round
    load: list[float] = field(default_factory=list)
    missing: dict[str, str] = field(default_factory=dict)  # setup -> why it was not measured
    started: str = ""
    seconds: float = 0.0

    def best(self, setup: str, mode: str, size: int) -> Rate | None:
        found = self.rates[setup].get((mode, size))
        return max(found, key=lambda rate: rate.rounds_per_s) if found else None


def transactional_rate(bootstrap: str, topic: str, size: int, seconds: float, transactional_id: str) -> Rate:
    """Transactions of `size` records, committed one after another for `seconds`."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5})
    producer.init_transactions(TIMEOUT_S)
    done = 0
    began = time.monotonic()
    while done == 0 or time.monotonic() - began < seconds:
        producer.begin_transaction()
        for i in range(size):
            produce_when_queued(producer, topic, RECORD, partition=i % PARTITIONS)
        producer.commit_transaction(TIMEOUT_S)
        done += 1
    elapsed = time.monotonic() - began
    return Rate(done / elapsed, done * size / elapsed)


def idempotent_rate(bootstrap: str, topic: str, size: int, seconds: float) -> Rate:
    """Rounds of `size` records, each flushed (acks=all) before the next, for `seconds`."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    done = 0
    began = time.monotonic()
    while done == 0 or time.monotonic() - began < seconds:
        for i in range(size):
            produce_when_queued(producer, topic, RECORD, partition=i % PARTITIONS)
        if producer.flush(TIMEOUT_S):
            raise RuntimeError(f"records of {topic} not delivered in {TIMEOUT_S:.0f} s")
        done += 1
    elapsed = time.monotonic() - began
    return Rate(done / elapsed, done * size / elapsed)


def create_topic(bootstrap: str, topic: str, replicas: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"min.insync.replicas": "2"} if replicas > 1 else {}
    for future in admin.create_topics([NewTopic(topic, PARTITIONS, replicas, config=config)]).values():
        future.result(timeout=TIMEOUT_S)


@contextmanager
def start_standalone(directory: Path) -> Iterator[str]:
    overrides = tuple(f"{k}={v}" for k, v in TXN_LOG.items())
    broker = BrokerProcess(directory / "data", overrides=overrides, log_level="warning").start()
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


@contextmanager
def start_cluster(directory: Path) -> Iterator[str]:
    overrides = tuple(f"{k}={v}" for k, v in TXN_LOG.items())
    with zookeeper(directory / "zk") as connect, cluster(directory, connect, overrides=overrides) as brokers:
        yield ",".join(b.bootstrap for b in brokers)


@contextmanager
def start_kafka(directory: Path) -> Iterator[str]:
    broker = KafkaBroker(directory, overrides=dict(TXN_LOG)).start()
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


STARTERS: dict[str, Callable[[Path], AbstractContextManager[str]]] = {
    STANDALONE: start_standalone, CLUSTER: start_cluster, KAFKA: start_kafka}


def measure(setup: str, directory: Path, profile: Profile, results: Results, say: Callable[[str], None]) -> None:
    """Every size, transactional then idempotent, against one fresh setup."""
    results.load.append(os.getloadavg()[0])
    with STARTERS[setup](directory) as bootstrap:
        topic = "txn-bench"
        create_topic(bootstrap, topic, 3 if setup == CLUSTER else 1)
        # Untimed: FindCoordinator creates __transaction_state, and the first InitProducerId waits for it.
        transactional_rate(bootstrap, topic, 1, 0.0, "warmup")
        for size in profile.sizes:
            for mode in MODES:
                rate = (transactional_rate(bootstrap, topic, size, profile.seconds, f"bench-{size}")
                        if mode == TRANSACTIONAL else idempotent_rate(bootstrap, topic, size, profile.seconds))
                results.rates[setup].setdefault((mode, size), []).append(rate)
                say(f"  {setup}: {mode}, {size:,} records each: {rate.rounds_per_s:,.1f}"
                    f" {'transactions' if mode == TRANSACTIONAL else 'rounds'}/s, {rate.records_per_s:,.0f} records/s")
    results.load.append(os.getloadavg()[0])


def run(profile: Profile, *, say: Callable[[str], None] = print, setups: tuple[str, ...] = SETUPS) -> Results:
    try:
        kafka_version = peer("kafka4").version
    except PeerMissing as exc:
        kafka_version = "not fetched"
        setups = tuple(s for s in setups if s != KAFKA)
        say(f"Apache Kafka left out: {exc}")
    results = Results(profile, kafka_version, started=announce_run(say))
    if KAFKA not in setups:
        results.missing[KAFKA] = "not run"
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-transactions-", dir=os.environ.get("BENCH_DIR")) as tmp:
        for round_no in range(profile.rounds):
            shift = round_no % len(setups)
            order = setups[shift:] + setups[:shift]
            p50, _ = ceiling.loopback_round_trip_us(profile.ceiling_round_trips)
            results.round_trip_us.append(p50)
            say(f"round {round_no + 1} of {profile.rounds} ({', then '.join(order)}): loopback round trip"
                f" p50 {p50:,.0f} µs")
            for setup in order:
                directory = Path(tmp) / f"round-{round_no}-{SETUPS.index(setup)}"
                directory.mkdir()
                measure(setup, directory, profile, results, say)
    results.seconds = time.monotonic() - began
    return results


def _cell(rate: Rate | None) -> str:
    return f"{rate.rounds_per_s:,.1f} | {rate.records_per_s:,.0f}" if rate is not None else "- | -"


def markdown(results: Results, command: str) -> str:
    """The BENCHMARKS.md section: how it was run, the machine's state, the table."""
    p = results.profile
    lines = [
        f"## Transactions: transactional produce beside idempotent ({results.started[:10]})",
        "",
        how_run(command, results.started, results.seconds, results.load,
                "brokers, ZooKeeper and the client on the same cores")
        + " Floor in the same run: the loopback round trip of 100 B between two Python threads, p50"
        f" {', '.join(f'{x:,.0f}' for x in results.round_trip_us)} µs (one per round).",
        "",
        "One confluent-kafka producer (librdkafka defaults, linger.ms=5) for"
        f" {p.seconds:g} s per case: transactional (begin, N records of 100 B over 3 partitions,"
        " commit_transaction), then idempotent (acks=all, N records, flush). The cluster: 3 ZooKeeper-mode"
        " brokers, the topic and `__transaction_state` with 3 replicas, min.insync.replicas=2; the others one"
        f" replica. Apache Kafka {results.kafka_version}: one KRaft node. {p.rounds} round(s), setups in rotated"
        " order, best of the rounds.",
        "",
        "| setup | records per transaction | transactions/s | transactional records/s | idempotent rounds/s"
        " | idempotent records/s | transactional / idempotent |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for setup in SETUPS:
        if setup in results.missing:
            lines.append(f"| {setup} | - | - | - | - | - | {results.missing[setup]} |")
            continue
        for size in p.sizes:
            t, i = results.best(setup, TRANSACTIONAL, size), results.best(setup, IDEMPOTENT, size)
            ratio = f"{t.records_per_s / i.records_per_s:.2f}" if t and i and i.records_per_s else "n/a"
            lines.append(f"| {setup} | {size:,} | {_cell(t)} | {_cell(i)} | {ratio} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    profile, command = profile_from_command_line("bench.transactions", __doc__, FULL, QUICK, argv)
    results = run(profile, say=lambda line: print(line, flush=True))
    print("\n" + markdown(results, command), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
