"""Apache Kafka beside Causeway: the same tools, the same settings, the same machine, one run.

    python -m bench.side_by_side            # full run (two rounds, about ten minutes)
    python -m bench.side_by_side --quick    # a smoke run (one round, small counts)
    python -m bench.side_by_side --rounds 3

Each round starts a fresh Apache Kafka 4.x KRaft node (bench.peers.KafkaBroker) and a fresh
Causeway broker (deploy.broker_process), one after the other, and runs against each in turn:
Kafka's kafka-producer-perf-test (100 B and 1 KiB records, acks=1 and acks=all, the same counts
and producer settings), kafka-consumer-perf-test reading what was produced, Kafka's
EndToEndLatency, and a fixed-rate librdkafka producer/consumer pair (bench.fixed_rate). It records
each broker's start-up (process start to first ready) and its RSS after the runs. The order of the
brokers alternates between rounds, since the machine is shared; each figure is the best of the
rounds, and every round's value is printed as it comes. This machine's ceilings (loopback TCP,
file append: bench.ceiling) and its load average are measured in the same run. The end is a
Markdown section for BENCHMARKS.md, every figure beside its ratio Causeway/Kafka.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from bench import ceiling, clients, perf_tools
from bench.fixed_rate import end_to_end_at_rate
from bench.peers import KafkaBroker, peer
from deploy.broker_process import BrokerProcess
from deploy.child_process import rss_bytes

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["CAUSEWAY", "FULL", "KAFKA", "QUICK", "Figure", "Profile", "Results", "announce_run", "how_run", "main",
           "profile_from_command_line", "run"]

KAFKA, CAUSEWAY = "kafka", "causeway"
# Kafka's published single-broker figure: one producer thread, 100-byte records, no replication
# (Jay Kreps, "Benchmarking Apache Kafka: 2 Million Writes Per Second (On Three Cheap Machines)", 2014).
ANCHOR_RECORDS_PER_S = 821_557
# The producer settings both brokers get (kafka-producer-perf-test --command-property). acks=all
# keeps the producer's default idempotence on; acks=1 turns it off, as Kafka does when acks is set.
PRODUCER_PROPERTIES: tuple[str, ...] = ("linger.ms=5", "batch.size=65536", "buffer.memory=67108864",
                                        "compression.type=none")
# Both brokers: no delay before the first rebalance (Kafka's quick-start setting; KafkaBroker sets it).
CAUSEWAY_OVERRIDES: tuple[str, ...] = ("group.initial.rebalance.delay.ms=0",)
ProfileT = TypeVar("ProfileT", bound="DataclassInstance")


@dataclass(frozen=True)
class Profile:
    rounds: int
    produce: tuple[tuple[int, int], ...]  # (record size, records)
    acks: tuple[str, ...]
    warmup_records: int  # 100 B records produced and consumed, untimed, before each broker's runs
    e2e_tool_records: int  # EndToEndLatency's sequential round trips
    e2e_rate: int  # the fixed-rate pair: records/s ...
    e2e_records: int  # ... and how many
    ceiling_bytes: int


FULL = Profile(rounds=2, produce=((100, 2_000_000), (1024, 500_000)), acks=("1", "all"), warmup_records=500_000,
               e2e_tool_records=2_000, e2e_rate=1_000, e2e_records=10_000, ceiling_bytes=1 << 30)
QUICK = Profile(rounds=1, produce=((100, 20_000),), acks=("1",), warmup_records=0, e2e_tool_records=100,
                e2e_rate=500, e2e_records=250, ceiling_bytes=64 << 20)


@dataclass(frozen=True)
class Figure:
    key: str
    label: str
    unit: str
    higher_is_better: bool
    mib_per_s: bool = False  # a throughput in the tools' MB (2**20 bytes): shown as a share of loopback TCP

    def best(self, values: list[float]) -> float:
        return max(values) if self.higher_is_better else min(values)


@dataclass
class Results:
    profile: Profile
    kafka_version: str
    figures: list[Figure] = field(default_factory=list)
    values: dict[str, dict[str, list[float]]] = field(default_factory=lambda: {KAFKA: {}, CAUSEWAY: {}})
    tcp_mb_s: list[float] = field(default_factory=list)
    append_mb_s: list[float] = field(default_factory=list)
    load: list[float] = field(default_factory=list)  # 1-minute load averages sampled through the run
    started: str = ""
    seconds: float = 0.0

    def record(self, broker: str, figure: Figure, value: float) -> None:
        if all(f.key != figure.key for f in self.figures):
            self.figures.append(figure)
        self.values[broker].setdefault(figure.key, []).append(value)

    def best(self, broker: str, figure: Figure) -> float | None:
        found = self.values[broker].get(figure.key)
        return figure.best(found) if found else None


@dataclass
class Started:
    bootstrap: str
    pid: int
    startup_s: float


def kafka_format_seconds(directory: Path) -> float:
    """How long `kafka-storage format` takes on its own: the first of the two JVMs a fresh KRaft
    node's start-up counts (KafkaBroker.start times both together). Run on a scratch node's config
    the way KafkaBroker runs it, so that start-up less this is the broker process's own."""
    scratch = KafkaBroker(directory)
    scratch.write_config()
    began = time.monotonic()
    scratch.format_storage()
    return time.monotonic() - began


@contextmanager
def start_kafka(directory: Path) -> Iterator[Started]:
    """A fresh KRaft node: its start-up counts `kafka-storage format` (a JVM of its own) and the
    broker's start until its listener answers ApiVersions (bench.peers.kraft)."""
    broker = KafkaBroker(directory).start()
    assert broker.proc is not None
    try:
        yield Started(broker.bootstrap, broker.proc.pid, broker.startup_seconds)
    finally:
        broker.stop()


@contextmanager
def start_causeway(directory: Path) -> Iterator[Started]:
    """A fresh `causeway broker` process: start-up from spawning the interpreter to its ready line."""
    directory.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    broker = BrokerProcess(directory / "data", overrides=CAUSEWAY_OVERRIDES, log_level="warning").start()
    startup = time.monotonic() - began
    assert broker.proc is not None
    try:
        yield Started(broker.bootstrap, broker.proc.pid, startup)
    finally:
        broker.stop()


def peak_rss_bytes(pid: int) -> int:
    """VmHWM: the most the process held resident over its life."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmHWM for pid {pid}")


def measure(broker: str, directory: Path, profile: Profile, results: Results, say: Callable[[str], None]) -> None:
    """Every workload against one fresh broker, each figure recorded as it comes."""
    starter = start_kafka if broker == KAFKA else start_causeway
    results.load.append(os.getloadavg()[0])

    def note(figure: Figure, value: float) -> None:
        results.record(broker, figure, value)
        say(f"  {broker}: {figure.label}: {value:,.2f} {figure.unit}")

    # Kafka's start-up counts `kafka-storage format`; timed apart too, so the broker's own start shows.
    formatting = kafka_format_seconds(directory / "format-only") if broker == KAFKA else 0.0
    with starter(directory / "broker") as started:
        note(Figure("startup", "start-up to first ready (Kafka: format, then start)", "s", False), started.startup_s)
        if broker == KAFKA:
            note(Figure("format", "of which kafka-storage format (timed apart)", "s", False), formatting)
        note(Figure("startup less format", "start-up, broker process only", "s", False),
             started.startup_s - formatting)
        bootstrap = started.bootstrap
        if profile.warmup_records:  # the JVM compiles its hot paths during the first run: leave it untimed
            clients.create_topic(bootstrap, "warmup")
            perf_tools.producer_perf(bootstrap, "warmup", profile.warmup_records, 100, ("acks=1", *PRODUCER_PROPERTIES))
            perf_tools.consumer_perf(bootstrap, "warmup", profile.warmup_records, "warmup")
        for size, records in profile.produce:
            for acks in profile.acks:
                topic = f"perf-{size}-acks-{acks}"
                clients.create_topic(bootstrap, topic)
                p = perf_tools.producer_perf(bootstrap, topic, records, size, (f"acks={acks}", *PRODUCER_PROPERTIES))
                case = f"produce {size} B, acks={acks}"
                note(Figure(f"{case} rps", f"{case}, records/s", "rec/s", True), p.records_per_s)
                note(Figure(f"{case} mib", f"{case}, MB/s", "MB/s", True, mib_per_s=True), p.mib_per_s)
                note(Figure(f"{case} avg", f"{case}, average latency", "ms", False), p.avg_ms)
                note(Figure(f"{case} p99", f"{case}, p99 latency", "ms", False), p.p99_ms)
            read = f"perf-{size}-acks-{profile.acks[0]}"
            c = perf_tools.consumer_perf(bootstrap, read, records, f"perf-consumer-{size}")
            case = f"consume {size} B"
            note(Figure(f"{case} rps", f"{case}, records/s", "rec/s", True), c.records_per_s)
            note(Figure(f"{case} mib", f"{case}, MB/s", "MB/s", True, mib_per_s=True), c.mib_per_s)
            note(Figure(f"{case} fetch mib", f"{case}, MB/s after the group join", "MB/s", True, mib_per_s=True),
                 c.fetch_mib_per_s)
        clients.create_topic(bootstrap, "e2e-tool")
        e = perf_tools.end_to_end_latency(bootstrap, "e2e-tool", profile.e2e_tool_records, 100)
        case = f"EndToEndLatency, 100 B, acks=1, {profile.e2e_tool_records:,} sequential records"
        note(Figure("e2e tool avg", f"{case}, average", "ms", False), e.avg_ms)
        note(Figure("e2e tool p50", f"{case}, p50", "ms", False), e.p50_ms)
        note(Figure("e2e tool p99", f"{case}, p99", "ms", False), e.p99_ms)
        note(Figure("e2e tool p999", f"{case}, p99.9", "ms", False), e.p999_ms)
        clients.create_topic(bootstrap, "e2e-rate")
        lat = end_to_end_at_rate(bootstrap, "e2e-rate", rate=profile.e2e_rate, records=profile.e2e_records)
        case = f"end to end at {profile.e2e_rate:,} rec/s (librdkafka pair, 100 B, acks=1, linger 0)"
        note(Figure("e2e rate p50", f"{case}, p50", "ms", False), lat.p50_ms)
        note(Figure("e2e rate p99", f"{case}, p99", "ms", False), lat.p99_ms)
        note(Figure("e2e rate p999", f"{case}, p99.9", "ms", False), lat.p999_ms)
        note(Figure("rss", "RSS after the runs", "MiB", False), rss_bytes(started.pid) / 2**20)
        note(Figure("peak rss", "peak RSS (VmHWM)", "MiB", False), peak_rss_bytes(started.pid) / 2**20)
    results.load.append(os.getloadavg()[0])


def announce_run(say: Callable[[str], None]) -> str:
    """Say the machine and its load as a run begins; return the start, as the section heads it."""
    say(f"machine: {ceiling.machine_summary()}, Python {platform.python_version()}; load average "
        f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


def how_run(command: str, started: str, seconds: float, load: list[float], where: str) -> str:
    """The sentences that open a section: the command, when and how long, the machine, where
    the processes ran (`where`), and the load average sampled through the run."""
    load = load or [0.0]
    return (f"`{command}` at {started[11:]} ({seconds / 60:.0f} min). Machine: {ceiling.machine_summary()},"
            f" Python {platform.python_version()}; {where}, over loopback. Load average (1 min) during the run:"
            f" {min(load):.1f} to {max(load):.1f} on {os.cpu_count()} cores (the machine is shared with other work).")


def run(profile: Profile, *, say: Callable[[str], None] = print) -> Results:
    results = Results(profile, peer("kafka4").version, started=announce_run(say))
    began = time.monotonic()
    for round_no in range(profile.rounds):
        order = (KAFKA, CAUSEWAY) if round_no % 2 == 0 else (CAUSEWAY, KAFKA)
        results.tcp_mb_s.append(ceiling.loopback_tcp_mb_s(profile.ceiling_bytes * 2))
        results.append_mb_s.append(ceiling.file_append_mb_s(profile.ceiling_bytes))
        say(f"round {round_no + 1} of {profile.rounds} ({' then '.join(order)}): ceilings loopback TCP "
            f"{results.tcp_mb_s[-1]:,.0f} MB/s, file append {results.append_mb_s[-1]:,.0f} MB/s")
        for broker in order:
            with tempfile.TemporaryDirectory(prefix=f"side-by-side-{broker}-", dir=os.environ.get("BENCH_DIR")) as tmp:
                measure(broker, Path(tmp), profile, results, say)
    results.seconds = time.monotonic() - began
    return results


def _number(value: float, unit: str) -> str:
    if unit in ("rec/s",):
        return f"{value:,.0f}"
    if unit in ("MiB",):
        return f"{value:,.0f} MiB"
    if unit == "s":
        return f"{value:.2f} s"
    if unit == "ms":
        return f"{value:,.2f} ms" if value != int(value) else f"{int(value):,} ms"
    return f"{value:,.1f}"


def _spread(results: Results, figure: Figure) -> str:
    """Lowest to highest over the rounds, per broker: how far apart the rounds fell."""
    parts = []
    for broker in (KAFKA, CAUSEWAY):
        values = results.values[broker].get(figure.key, [])
        if len(values) > 1:
            parts.append(f"{_number(min(values), figure.unit)} to {_number(max(values), figure.unit)}")
        else:
            parts.append("-")
    return "; ".join(parts) if any(part != "-" for part in parts) else ""


def markdown(results: Results, command: str) -> str:
    """The BENCHMARKS.md section: how it was run, the machine's state, the table."""
    tcp = max(results.tcp_mb_s, default=0.0)
    load = results.load or [0.0]
    p = results.profile
    lines = [
        f"## Apache Kafka beside Causeway ({results.started[:10]})",
        "",
        f"`{command}` ({results.seconds / 60:.0f} min; part of `make bench` when `make peers` has fetched"
        f" the jars). Machine: {ceiling.machine_summary()}, Python {platform.python_version()}, OpenJDK"
        f" {_java_version()}; both brokers and every client on the same cores, over loopback. Load average"
        f" (1 min) during the run: {min(load):.1f} to {max(load):.1f} on {os.cpu_count()} cores (the machine"
        f" is shared). Ceilings in the same run: loopback TCP"
        f" {', '.join(f'{x:,.0f}' for x in results.tcp_mb_s)} MB/s, file append"
        f" {', '.join(f'{x:,.0f}' for x in results.append_mb_s)} MB/s (one per round).",
        "",
        f"Apache Kafka {results.kafka_version}: one KRaft node (broker and controller), heap 256-512 MiB, G1."
        f" Causeway: `causeway broker`, default settings. Both with `group.initial.rebalance.delay.ms=0`."
        f" Producer settings for both: `{' '.join(PRODUCER_PROPERTIES)}`; {p.rounds} round(s), brokers"
        f" in alternating order, best of the rounds; the first {p.warmup_records:,} records of each broker's"
        f" session are an untimed warm-up. MB/s as the tools print them (2^20 bytes).",
        "",
        "| figure | Apache Kafka | Causeway | Causeway / Kafka | better | share of loopback TCP (Kafka / Causeway)"
        " | range over the rounds (Kafka; Causeway) |",
        "| --- | ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    for figure in results.figures:
        k, c = results.best(KAFKA, figure), results.best(CAUSEWAY, figure)
        ratio = f"{c / k:.2f}" if k and c is not None else "n/a"
        share = ""
        if figure.mib_per_s and tcp and k is not None and c is not None:
            share = f"{k * 1.048576 / tcp:.1%} / {c * 1.048576 / tcp:.1%}"
        lines.append(f"| {figure.label} | {_number(k, figure.unit) if k is not None else '-'} | "
                     f"{_number(c, figure.unit) if c is not None else '-'} | {ratio} | "
                     f"{'higher' if figure.higher_is_better else 'lower'} | {share} | {_spread(results, figure)} |")
    anchor = next((f for f in results.figures if f.key == "produce 100 B, acks=1 rps"), None)
    if anchor is not None:
        c = results.best(CAUSEWAY, anchor)
        if c is not None:
            lines.append("| Kafka's published figure: 100 B, one producer, no replication (2014, dedicated hardware),"
                         f" records/s | {ANCHOR_RECORDS_PER_S:,} | {_number(c, 'rec/s')} |"
                         f" {c / ANCHOR_RECORDS_PER_S:.2f} | higher | | |")
    return "\n".join(lines) + "\n"


def _java_version() -> str:
    try:
        done = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    first = (done.stderr or done.stdout).splitlines()[:1]
    return first[0].split('"')[1] if first and '"' in first[0] else "unknown"


def profile_from_command_line(module: str, description: str | None, full: ProfileT, quick: ProfileT,
                              argv: list[str] | None) -> tuple[ProfileT, str]:
    """`--quick` and `--rounds N`, as the benchmarks of Kafka beside Causeway take them: the profile
    to run and the command line as typed, for the section's heading."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one round, small counts (a smoke run)")
    parser.add_argument("--rounds", type=int, help="rounds (default: 2, or 1 with --quick)")
    args = parser.parse_args(argv)
    profile = quick if args.quick else full
    if args.rounds is not None:
        if args.rounds < 1:
            parser.error("--rounds must be at least 1")
        profile = dataclasses.replace(profile, rounds=args.rounds)
    return profile, " ".join([f"python -m {module}", *(argv if argv is not None else sys.argv[1:])])


def main(argv: list[str] | None = None) -> int:
    profile, command = profile_from_command_line("bench.side_by_side", __doc__, FULL, QUICK, argv)
    results = run(profile, say=lambda line: print(line, flush=True))
    print("\n" + markdown(results, command), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
