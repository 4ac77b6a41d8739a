"""Mirror throughput: Causeway's mirror in both modes, against the loop a user would otherwise write.

    python -m bench.mirror                     # full run, both modes (a few minutes)
    python -m bench.mirror --quick             # smaller counts, for a smoke check
    python -m bench.mirror --mode link --rounds 3 --link-request-mib 1,4 --wan-across both
    python -m bench.mirror --mode mm2 --exactly-once   # mm2 at-least-once beside exactly-once

1. Unthrottled: N records preloaded in a source broker are copied to a target broker, by
   (a) a confluent-kafka consume-then-produce loop (librdkafka both ways, batching on; with
   `--mode mm2` or `both`), and (b) `causeway mirror` as its own process, in mm2 mode (remote
   topic `src.<topic>`, Produce) and in link mode (mirror topic `<topic>`, LinkAppend), each into
   a fresh target broker from the same preloaded source topic. Each copy is timed from the
   mirror's ready line to the last record at the target, beside this machine's loopback TCP
   ceiling, with the mirror's CPU seconds and resident memory and both brokers' CPU seconds over
   the copy, from /proc. Every copy is then checked: per partition the same record count and the
   same records (key, value, timestamp, headers), and in link mode the same offsets (log start
   and end equal, each record at its source offset).
2. Over an emulated WAN link (100 Mbit/s, 40 ms each way, through the WAN emulator): how much
   of the link's bandwidth the mirror fills while it catches up, on one connection (tasks.max=1),
   since Toxiproxy's bandwidth toxic limits each connection separately. `--wan-across source`
   (the default, as DESIGN.md places a mirror: beside the target, fetching across the link);
   `target` puts the link between the mirror and the target instead (its writes cross it: what
   LinkAppend's request size is for); `both` runs both.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import re
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench import ceiling, clients
from bench.clients import Throughput as Copy
from deploy.broker_process import BrokerProcess
from deploy.child_process import ChildProcess
from deploy.launcher.launch import free_port, link_toxics
from deploy.launcher.plan import LinkPlan
from deploy.wan.client import WanClient
from deploy.wan.process import WanProcess

PARTITIONS = 4
ROOT = Path(__file__).resolve().parents[1]
MIRROR_START_TIMEOUT_S = 60.0  # from its start to its ready line
MODES = ("mm2", "link")
_TICKS = os.sysconf("SC_CLK_TCK")
IDLE_S = 2.0  # how long the target's idle CPU is measured after each copy


# -- what a process used, from /proc ------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Usage:
    cpu_s: float  # user + system CPU seconds since the process started
    rss_bytes: int  # VmRSS now
    peak_rss_bytes: int  # VmHWM: the most it has held resident


def usage(pid: int) -> Usage:
    with open(f"/proc/{pid}/stat") as f:
        # Fields after the command name (which may hold spaces), from field 3: utime is 14, stime 15.
        fields = f.read().rsplit(")", 1)[1].split()
    memory = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                memory[key] = int(value.split()[0]) * 1024
    return Usage((int(fields[11]) + int(fields[12])) / _TICKS, memory.get("VmRSS", 0), memory.get("VmHWM", 0))


# -- brokers ------------------------------------------------------------------------------------

@contextmanager
def broker(path: Path, overrides: tuple[str, ...] = ()) -> Iterator[BrokerProcess]:
    path.parent.mkdir(parents=True, exist_ok=True)
    process = BrokerProcess(path, log_level="warning", overrides=overrides).start()
    try:
        yield process
    finally:
        process.stop()


def pid_of(process: BrokerProcess) -> int:
    assert process.proc is not None, "the broker is running"
    return process.proc.pid


@contextmanager
def wan_broker(path: Path, api: str, name: str, toxics: list[dict[str, Any]]) -> Iterator[tuple[BrokerProcess, str]]:
    """A broker with a LOCAL listener and a WAN listener advertised at a proxy with the link's
    toxics: yields the broker (its `bootstrap` is LOCAL) and the bootstrap across the link."""
    local, wan, proxy = free_port(), free_port(), free_port()
    overrides = (f"listeners=LOCAL://127.0.0.1:{local},WAN://127.0.0.1:{wan}",
                 f"advertised.listeners=LOCAL://127.0.0.1:{local},WAN://127.0.0.1:{proxy}",
                 "listener.security.protocol.map=LOCAL:PLAINTEXT,WAN:PLAINTEXT", "inter.broker.listener.name=LOCAL")
    with broker(path, overrides) as process:
        WanClient(api).create_proxy(name, f"127.0.0.1:{proxy}", f"127.0.0.1:{wan}").add_toxics(toxics)
        yield process, f"127.0.0.1:{proxy}"


# -- the copy and its check -----------------------------------------------------------------------

def target_topic(mode: str, topic: str) -> str:
    """mm2 mode's remote topic is `<source alias>.<topic>`; link mode's mirror topic keeps the name."""
    return topic if mode == "link" else f"src.{topic}"


class Watermarks:
    """High watermarks of a topic's partitions, through one consumer kept for the whole poll."""

    def __init__(self, bootstrap: str, expected: dict[int, int] | None = None, *, read_committed: bool = False) -> None:
        # read_committed: the ends are last stable offsets (what a read_committed reader can reach).
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-offsets",
                                  "isolation.level": "read_committed" if read_committed else "read_uncommitted"})
        self.expected = expected or {}  # partition -> the end it will reach (a preloaded source's)
        self.known: list[int] = []
        self.highs: dict[int, int] = {}

    def __enter__(self) -> Watermarks:
        return self

    def __exit__(self, *exc: object) -> None:
        self.consumer.close()

    def partitions(self, topic: str) -> list[int]:
        metadata = self.consumer.list_topics(topic, timeout=10).topics.get(topic)
        if metadata is None or metadata.error is not None:
            return []
        return sorted(metadata.partitions)

    def ranges(self, topic: str) -> dict[int, tuple[int, int]]:
        """partition -> (log start, high watermark)."""
        return {p: self.consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                for p in self.partitions(topic)}

    def total(self, topic: str) -> int:
        """The sum of the high watermarks; 0 while the topic is being created (no leader yet).
        The topic's partitions are looked up until it has them all, and a partition seen at its
        expected end is not asked again: the polls cost the target as little as they can."""
        try:
            if not self.known or len(self.known) < len(self.expected):
                self.known = self.partitions(topic)
            for p in self.known:
                if self.highs.get(p, -1) < self.expected.get(p, sys.maxsize):
                    self.highs[p] = self.consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
        except KafkaException:
            pass  # no leader yet: the next poll asks again
        return sum(self.highs.values())


def end_offsets(bootstrap: str, topic: str) -> int:
    with Watermarks(bootstrap) as marks:
        return marks.total(topic)


@dataclasses.dataclass(frozen=True)
class PartitionContent:
    start: int  # log start offset
    end: int  # high watermark
    records: int
    digest: str  # of every record's key, value, timestamp and headers, in order
    offsets_digest: str  # of every record's offset, in order


def contents(bootstrap: str, topic: str) -> dict[int, PartitionContent]:
    """Read every partition of `topic` whole (librdkafka) and digest it."""
    with Watermarks(bootstrap) as marks:
        ranges = marks.ranges(topic)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-check", "enable.auto.commit": False,
                         "enable.partition.eof": True, "fetch.max.bytes": 52_428_800,
                         "max.partition.fetch.bytes": 10_485_760})
    digests = {p: hashlib.blake2b(digest_size=16) for p in ranges}
    offsets = {p: hashlib.blake2b(digest_size=16) for p in ranges}
    counts = dict.fromkeys(ranges, 0)
    pending = {p for p, (start, end) in ranges.items() if end > start}
    consumer.assign([TopicPartition(topic, p, start) for p, (start, _) in ranges.items()])
    deadline = time.monotonic() + 600
    try:
        while pending and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=10_000, timeout=1.0):
                p, offset, error = msg.partition(), msg.offset(), msg.error()
                if p is None or offset is None:
                    continue  # a client-level event, not a partition's
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF and offset >= ranges[p][1]:
                        pending.discard(p)
                    continue
                if offset >= ranges[p][1]:
                    continue
                d = digests[p]
                d.update(msg.key() or b"\0")
                d.update(msg.value() or b"\0")
                d.update(msg.timestamp()[1].to_bytes(8, "big", signed=True))
                for header in msg.headers() or []:
                    name, value = header[0], header[1]
                    d.update(str(name).encode() + (value.encode() if isinstance(value, str) else value or b""))
                offsets[p].update(offset.to_bytes(8, "big"))
                counts[p] += 1
                if offset + 1 >= ranges[p][1]:
                    pending.discard(p)
    finally:
        consumer.close()
    if pending:
        raise RuntimeError(f"{topic} at {bootstrap}: partitions {sorted(pending)} not read to their end in time")
    return {p: PartitionContent(start, end, counts[p], digests[p].hexdigest(), offsets[p].hexdigest())
            for p, (start, end) in ranges.items()}


def check_copy(source: dict[int, PartitionContent], target: dict[int, PartitionContent], mode: str) -> str:
    """Raises RuntimeError when the copy is not complete and equal; else says what was checked."""
    problems = []
    if sorted(source) != sorted(target):
        problems.append(f"partitions {sorted(source)} at the source, {sorted(target)} at the target")
    for p in sorted(set(source) & set(target)):
        s, t = source[p], target[p]
        if s.records != t.records:
            problems.append(f"partition {p}: {s.records} records at the source, {t.records} at the target")
        elif s.digest != t.digest:
            problems.append(f"partition {p}: the same count, other records")
        if mode == "link" and ((s.start, s.end) != (t.start, t.end) or s.offsets_digest != t.offsets_digest):
            problems.append(f"partition {p}: offsets {s.start}..{s.end} at the source, {t.start}..{t.end} "
                            f"at the target" + ("" if (s.start, s.end) != (t.start, t.end) else " (others inside)"))
    if problems:
        raise RuntimeError(f"{mode} copy is not complete and equal: " + "; ".join(problems))
    what = "counts and records equal" + (", offsets equal" if mode == "link" else "")
    return f"{len(source)} partitions, {sum(c.records for c in source.values()):,} records: {what}"


def baseline(source: str, target: str, topic: str, count: int, size: int) -> Copy:
    """What a user writes without a mirror: consume with librdkafka, produce each record on."""
    admin = AdminClient({"bootstrap.servers": target})
    admin.create_topics([NewTopic(f"copy.{topic}", PARTITIONS, 1)])[f"copy.{topic}"].result(30)
    consumer = Consumer({"bootstrap.servers": source, "group.id": "bench-copy", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "fetch.max.bytes": 52_428_800,
                         "max.partition.fetch.bytes": 10_485_760})
    producer = Producer({"bootstrap.servers": target, "acks": "all", "linger.ms": 5, "batch.size": 1_000_000,
                         "enable.idempotence": True, "queue.buffering.max.messages": 1_000_000,
                         "queue.buffering.max.kbytes": 1_048_576})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    seen = 0
    start = time.perf_counter()
    deadline = start + 600
    while seen < count and time.perf_counter() < deadline:
        for msg in consumer.consume(num_messages=10_000, timeout=1.0):
            if msg.error() is not None:
                continue
            clients.produce_when_queued(producer, f"copy.{topic}", msg.value(), msg.key(), partition=msg.partition(),
                                        timestamp=msg.timestamp()[1], headers=msg.headers())
            seen += 1
        producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("baseline: records left undelivered")
    elapsed = time.perf_counter() - start
    consumer.close()
    return Copy(seen, size, elapsed)


@dataclasses.dataclass(frozen=True)
class Variant:
    """A mirror setting to measure: a mode, and for link mode its LinkAppend request size."""

    mode: str
    request_bytes: int | None = None  # None: mirror/link.py's own
    exactly_once: bool = False  # mm2 mode's exactly.once.support: required

    @property
    def label(self) -> str:
        if self.exactly_once:
            return f"{self.mode} (exactly-once)"
        if self.request_bytes is None:
            return self.mode
        return f"{self.mode} ({self.request_bytes / 2**20:g} MiB requests)"


@dataclasses.dataclass(frozen=True)
class MirrorRun:
    variant: Variant
    copy: Copy
    mirror_cpu_s: float  # the mirror's CPU over the copy (ready line to the last record)
    mirror_start_cpu_s: float  # its CPU before the ready line (start-up, imports)
    mirror_peak_rss: int  # the mirror's VmHWM when the copy is done
    target_cpu_s: float  # the target broker's CPU over the copy
    source_cpu_s: float  # the source broker's CPU over the copy
    check: str = ""
    round: int = 0
    target_idle_cpu_per_s: float = 0.0  # the target's CPU seconds per second with the mirror caught up

    @property
    def target_copy_cpu_s(self) -> float:
        """The target's CPU over the copy less what it spends idle for as long."""
        return max(0.0, self.target_cpu_s - self.target_idle_cpu_per_s * self.copy.seconds)

    def cpu_us_per_record(self, cpu_s: float) -> float:
        return cpu_s / self.copy.records * 1e6


def run_mirror(source: str, target: str, topic: str, count: int, size: int, tmp: Path, *,
               variant: Variant = Variant("mm2"), settings: dict[str, object] | None = None,
               pids: tuple[int, int] | None = None, profile: Path | None = None,
               expected_ends: dict[int, int] | None = None) -> MirrorRun:
    """`causeway mirror` as a process, from its ready line (Python's start-up, about a second here,
    left out; connecting and creating topics counted) until every record is at the target.
    Its stderr goes to a log beside its config, whose tail a failure shows.
    `pids`: the source and target brokers' pids, whose CPU over the copy is measured;
    `expected_ends`: each source partition's end, so the poll stops asking a copied partition."""
    config = tmp / f"mirror-{topic}-{variant.mode}{'-eos' if variant.exactly_once else ''}.yaml"
    config.write_text(json.dumps({
        "source": {"alias": "src", "bootstrap": source}, "target": {"alias": "dst", "bootstrap": target},
        "topics": {"include": [re.escape(topic)]}, "refresh.topics.interval.seconds": 0.5, "mode": variant.mode,
        **({"exactly.once.support": "required"} if variant.exactly_once else {}), **(settings or {})}))
    env: dict[str, str] = {}
    if variant.request_bytes is not None:
        env["BENCH_LINK_REQUEST_BYTES"] = str(variant.request_bytes)
    if profile is not None:
        env["BENCH_PROFILE"] = str(profile)
    proc = ChildProcess.start("causeway mirror", [sys.executable, "-m", "bench.mirror_child", "mirror", "--config",
                                                  str(config), "--log-level", "warning"],
                              log_path=config.with_suffix(".log"), cwd=ROOT, env=env)
    brokers_before = [usage(pid).cpu_s for pid in pids] if pids else [0.0, 0.0]
    try:
        line = proc.read_ready_line(MIRROR_START_TIMEOUT_S)
        if not line.startswith("causeway mirror ready:"):
            raise RuntimeError(f"the mirror did not start ({line.strip()!r}); log:\n{proc.log_tail()}")
        start = time.perf_counter()
        started = usage(proc.pid).cpu_s
        if pids:
            brokers_before = [usage(pid).cpu_s for pid in pids]
        deadline = start + 600
        # Exactly-once: done when the records are committed (the last stable offsets). Each commit
        # puts a marker in each partition written, so the sum reaches `count` a few records
        # (one per partition per offset.flush.interval.ms) before the last one is copied.
        with Watermarks(target, expected_ends, read_committed=variant.exactly_once) as marks:
            while marks.total(target_topic(variant.mode, topic)) < count:
                now = time.perf_counter()
                if now > deadline or proc.poll() is not None:
                    raise RuntimeError(f"mirror did not copy {count} records (exit {proc.poll()}); log:\n"
                                       f"{proc.log_tail()}")
                # Polling another process's progress: every 20 ms, or 1% of the time so far when
                # that is longer, so the polls (ListOffsets at the target) stay a small, bounded
                # part of the target broker's CPU measured here, and the timing stays within 1%.
                time.sleep(min(0.5, max(0.02, (now - start) / 100)))
        elapsed = time.perf_counter() - start
        done = usage(proc.pid)
        brokers_after = [usage(pid).cpu_s for pid in pids] if pids else [0.0, 0.0]
        # The target's CPU while the mirror idles, caught up (topic discovery, heartbeats, group
        # offsets): what its CPU over the copy holds beside the copy's own work.
        time.sleep(IDLE_S)
        idle = (usage(pids[1]).cpu_s - brokers_after[1]) / IDLE_S if pids else 0.0
    finally:
        proc.stop(30)
    return MirrorRun(variant, Copy(count, size, elapsed), done.cpu_s - started, started, done.peak_rss_bytes,
                     brokers_after[1] - brokers_before[1], brokers_after[0] - brokers_before[0],
                     target_idle_cpu_per_s=idle)


def describe(run: MirrorRun) -> str:
    return (f"{run.copy.rates} ({run.copy.records:,} records in {run.copy.seconds:.2f} s); mirror "
            f"{run.mirror_cpu_s:.2f} CPU s ({run.cpu_us_per_record(run.mirror_cpu_s):.2f} us/record; "
            f"{run.mirror_start_cpu_s:.1f} s to start), peak RSS {run.mirror_peak_rss / 1e6:.0f} MB; target broker "
            f"{run.target_cpu_s:.2f} CPU s ({run.cpu_us_per_record(run.target_cpu_s):.2f} us/record; idle "
            f"{run.target_idle_cpu_per_s:.3f} CPU s/s, so {run.target_copy_cpu_s:.2f} s for the copy), source "
            f"{run.source_cpu_s:.2f} CPU s; check: {run.check}")


def schedule(variants: Sequence[Variant], rounds: int) -> list[tuple[int, Variant]]:
    """Each round runs every variant once, the order reversed every other round, so a load that
    drifts over the run does not favour one mode."""
    order: list[tuple[int, Variant]] = []
    for r in range(rounds):
        order.extend((r, v) for v in (variants if r % 2 == 0 else list(reversed(variants))))
    return order


# -- over an emulated link ------------------------------------------------------------------------

def link_ceiling_mb_s(api: str, toxics: list[dict[str, Any]], total_bytes: int = 30_000_000, *,
                      link: dict[str, str] | None = None) -> float:
    """MB/s of raw bytes through one connection of a proxy with the link's toxics, or on the
    shared `link` ({"name", "upstream"}, with nothing else crossing it meanwhile): what the
    emulated link itself delivers, the mirror's ceiling over it."""
    server = socket.create_server(("127.0.0.1", 0))
    proxy = free_port()
    WanClient(api).create_proxy("ceiling", f"127.0.0.1:{proxy}", f"127.0.0.1:{server.getsockname()[1]}",
                                link=link).add_toxics(toxics)
    received = 0

    def sink() -> None:
        nonlocal received
        conn, _ = server.accept()
        with conn:
            while chunk := conn.recv(1 << 20):
                received += len(chunk)

    thread = threading.Thread(target=sink)
    thread.start()
    with socket.create_connection(("127.0.0.1", proxy)) as client:
        start = time.perf_counter()
        payload = b"x" * (1 << 20)
        for _ in range(total_bytes >> 20):
            client.sendall(payload)
        client.shutdown(socket.SHUT_WR)
        thread.join()
        elapsed = time.perf_counter() - start
    server.close()
    return received / elapsed / 1e6


def over_wan(count: int, size: int, tmp: Path, variants: Sequence[Variant], rounds: int, *, across: str = "source",
             rate_mbit: int = 100, latency_ms: int = 40) -> tuple[list[MirrorRun], float]:
    """Mirror through an emulated link, the link between the mirror and the source (`across`
    "source") or the target ("target"); returns the copies and the link's own throughput in MB/s
    (one connection, raw bytes), measured in the same run."""
    runs = []
    with WanProcess() as emulator:
        api = emulator.api
        # The toxics `causeway up` gives a link of this latency and bandwidth.
        toxics = link_toxics(LinkPlan("a", "b", latency_ms, 0, rate_mbit * 1_000_000 // 8))
        capacity = link_ceiling_mb_s(api, toxics)
        with wan_broker(tmp / f"wan-{across}" / "source", api, "source", toxics) as (source, source_wan):
            clients.create_topic(source.bootstrap, "wan", PARTITIONS)
            clients.produce(source.bootstrap, "wan", count, size)
            expected = contents(source.bootstrap, "wan")
            for r, variant in schedule(variants, rounds):
                name = f"target-{r}-{variant.mode}-{variant.request_bytes}-{variant.exactly_once}"
                with wan_broker(tmp / f"wan-{across}" / name, api, name, toxics) as (target, target_wan):
                    # One fetch lane, so one TCP connection: Toxiproxy's bandwidth toxic limits each
                    # connection, and several lanes would each get the whole rate.
                    mirror_source = source_wan if across == "source" else source.bootstrap
                    mirror_target = target_wan if across == "target" else target.bootstrap
                    run = run_mirror(mirror_source, mirror_target, "wan", count, size, tmp, variant=variant,
                                     settings={"tasks.max": 1}, pids=(pid_of(source), pid_of(target)),
                                     expected_ends={p: c.end for p, c in expected.items()})
                    checked = check_copy(expected, contents(target.bootstrap, target_topic(variant.mode, "wan")),
                                         variant.mode)
                runs.append(run := _checked(run, checked, r))
                print(f"over the link ({across} across it), {variant.label}, round {r + 1}: {describe(run)}; "
                      f"{100 * run.copy.mb_per_s / capacity:.0f}% of the link", flush=True)
    return runs, capacity


def _checked(run: MirrorRun, check: str, round_no: int) -> MirrorRun:
    return dataclasses.replace(run, check=check, round=round_no + 1)


# -- the run ------------------------------------------------------------------------------------

def variants_for(mode: str, request_mib: Sequence[float], *, exactly_once: bool = False) -> list[Variant]:
    modes = MODES if mode == "both" else (mode,)
    out: list[Variant] = []
    for m in modes:
        if m == "link" and request_mib:
            out.extend(Variant("link", int(mib * 2**20)) for mib in request_mib)
        else:
            out.append(Variant(m))
        if m == "mm2" and exactly_once:
            out.append(Variant("mm2", exactly_once=True))
    return out


def loopback(size: int, count: int, tmp: Path, variants: Sequence[Variant], rounds: int, *, with_baseline: bool,
             profile_dir: Path | None = None) -> tuple[Copy | None, list[MirrorRun]]:
    """Copies of one preloaded source topic, each into a fresh target broker."""
    topic = f"bench-{size}"
    runs = []
    base = None
    with broker(tmp / f"plain-{size}" / "source") as source:
        clients.create_topic(source.bootstrap, topic, PARTITIONS)
        clients.produce(source.bootstrap, topic, count, size)
        expected = contents(source.bootstrap, topic)
        if with_baseline:
            with broker(tmp / f"plain-{size}" / "baseline") as target:
                base = baseline(source.bootstrap, target.bootstrap, topic, count, size)
            print(f"confluent-kafka consume->produce loop, {size} B: {base.rates} ({base.records:,} records in "
                  f"{base.seconds:.2f} s)", flush=True)
        for r, variant in schedule(variants, rounds):
            name = f"target-{r}-{variant.mode}-{variant.request_bytes}-{variant.exactly_once}"
            with broker(tmp / f"plain-{size}" / name) as target:
                profile = None
                if profile_dir is not None and r == 0:
                    profile = profile_dir / f"mirror-{variant.mode}-{size}.prof"
                run = run_mirror(source.bootstrap, target.bootstrap, topic, count, size, tmp, variant=variant,
                                 pids=(pid_of(source), pid_of(target)), profile=profile,
                                 expected_ends={p: c.end for p, c in expected.items()})
                checked = check_copy(expected, contents(target.bootstrap, target_topic(variant.mode, topic)),
                                     variant.mode)
            runs.append(run := _checked(run, checked, r))
            print(f"causeway mirror, {variant.label}, {size} B, round {r + 1}: {describe(run)}", flush=True)
    return base, runs


def table(rows: list[tuple[str, MirrorRun]]) -> str:
    lines = ["| copy | round | seconds | records/s | MB/s | mirror CPU s (us/record) | mirror peak RSS MB | "
             "target broker CPU s | less idle (us/record) | source broker CPU s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, run in rows:
        lines.append(f"| {name} | {run.round} | {run.copy.seconds:.2f} | {run.copy.records_per_s:,.0f} | "
                     f"{run.copy.mb_per_s:,.1f} | "
                     f"{run.mirror_cpu_s:.2f} ({run.cpu_us_per_record(run.mirror_cpu_s):.2f}) | "
                     f"{run.mirror_peak_rss / 1e6:.0f} | {run.target_cpu_s:.2f} | {run.target_copy_cpu_s:.2f} "
                     f"({run.cpu_us_per_record(run.target_copy_cpu_s):.2f}) | {run.source_cpu_s:.2f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.mirror")
    parser.add_argument("--quick", action="store_true", help="smaller counts")
    parser.add_argument("--records-scale", type=float, default=1.0,
                        help="multiply the record counts (longer copies: steadier figures)")
    parser.add_argument("--mode", choices=["mm2", "link", "both"], default="both",
                        help="which mirror mode(s) to measure, on the same preloaded topics (default both)")
    parser.add_argument("--rounds", type=int, default=1, help="copies per mode and record size (default 1)")
    parser.add_argument("--link-request-mib", type=lambda s: [float(x) for x in s.split(",")], default=[],
                        help="link mode's LinkAppend request sizes to measure, in MiB, e.g. 1,4 "
                             "(default: mirror/link.py's own)")
    parser.add_argument("--wan-across", choices=["source", "target", "both", "none"], default="source",
                        help="where the emulated link sits: between the mirror and the source (as deployed), "
                             "the target, both in turn, or no WAN run")
    parser.add_argument("--exactly-once", action="store_true",
                        help="also measure mm2 mode with exactly.once.support: required, beside at-least-once")
    parser.add_argument("--no-loopback", action="store_true", help="only the WAN run")
    parser.add_argument("--no-baseline", action="store_true", help="skip the confluent-kafka loop")
    parser.add_argument("--profile-dir", type=Path,
                        help="cProfile the mirror's first loopback copy per mode and size into this directory")
    args = parser.parse_args(argv)
    scale = 10 if args.quick else 1
    variants = variants_for(args.mode, args.link_request_mib, exactly_once=args.exactly_once)
    print(f"machine: {ceiling.machine_summary()}", flush=True)
    print(f"load before: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}", flush=True)
    tcp = ceiling.loopback_tcp_mb_s((2 << 30) // scale)
    print(f"ceiling: loopback TCP {tcp:,.0f} MB/s", flush=True)
    rows: list[tuple[str, MirrorRun]] = []
    baselines: list[tuple[str, Copy]] = []
    if args.profile_dir is not None:
        args.profile_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        if not args.no_loopback:
            for size, count in ((100, 1_000_000 // scale), (1024, 200_000 // scale)):
                count = int(count * args.records_scale)
                base, runs = loopback(size, count, tmp, variants, args.rounds,
                                      with_baseline="mm2" in (v.mode for v in variants) and not args.no_baseline,
                                      profile_dir=args.profile_dir)
                if base is not None:
                    baselines.append((f"confluent-kafka consume->produce loop, {size} B", base))
                rows.extend((f"causeway mirror, {run.variant.label}, {size} B", run) for run in runs)
        across = {"both": ["source", "target"], "none": []}.get(args.wan_across, [args.wan_across])
        wan_count = int(300_000 // scale * args.records_scale)
        for side in across:
            runs, capacity = over_wan(wan_count, 1024, tmp, variants, args.rounds, across=side)
            where = "mirror beside the target" if side == "source" else "mirror beside the source"
            rows.extend((f"{run.variant.label} over 100 Mbit/s, 40 ms ({where}; the link: {capacity:.1f} MB/s, "
                         f"{100 * run.copy.mb_per_s / capacity:.0f}% of it), 1 KiB", run) for run in runs)
    print(f"load after: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}", flush=True)
    print(f"\nloopback TCP ceiling: {tcp:,.0f} MB/s")
    if baselines:
        print("\n| copy | records/s | MB/s |\n|---|---:|---:|")
        for name, copy in baselines:
            print(f"| {name} | {copy.records_per_s:,.0f} | {copy.mb_per_s:,.1f} |")
    print()
    print(table(rows))


if __name__ == "__main__":
    main()
