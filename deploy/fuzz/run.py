"""A whole fuzz run against a broker: prepare, attack, watch, judge.

Before: the stable topics exist and their ids are known; the broker's resident memory and
descriptors are measured. During: every `check_every` frames (and at least every few seconds)
/proc is read again and an ApiVersions request on a fresh connection must be answered. After:
the fuzzer's connections are gone, so the broker's sockets must come back to what they were;
its files may grow only with the partitions the run created; a real client's round trip must
work; the broker's log must hold no record at ERROR (an internal error closing a connection is
one) and, when a limit is given, grow by no more than so many bytes a minute. Any of these
failing fails the run.

The topics the run created are deleted before descriptors are compared, so that what is left
above the baseline is what the broker failed to give back, not partitions it legitimately holds.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from broker.protocol.errors import ErrorCode
from broker.protocol.messages import CreateTopicsRequest, DeleteTopicsRequest, MetadataRequest
from deploy.fuzz import proc
from deploy.fuzz.corpus import STABLE_PARTITIONS, STABLE_TOPICS, Target, build_corpus
from deploy.fuzz.engine import HELD_BY_DESIGN, Counters, EngineOptions, run_engine
from deploy.fuzz.mutate import Mutator
from deploy.fuzz.plan import make_plan
from deploy.fuzz.roundtrip import round_trip
from deploy.fuzz.wire import call, loopback_address, ping

__all__ = ["FuzzOptions", "FuzzResult", "run_fuzz"]

MiB = 1024 * 1024
# What a partition may legitimately keep open (segment, offset and time index, a spare), so
# that the run's topic churn is not taken for a descriptor leak.
FILES_PER_PARTITION = 4
# A log record at ERROR or CRITICAL ("2026-01-01 12:00:00,000 ERROR name: message"), and the
# broker's summary of repeated records ("... and 1,234 more like this (kind) in the last 60 s").
ERROR_RECORD = re.compile(r"^\d{4}-\d\d-\d\d[ T][\d:,.]+ (ERROR|CRITICAL) ")
_REPEATS = re.compile(r"\.\.\. and ([\d,]+) more like this")


@dataclass(frozen=True)
class FuzzOptions:
    bootstrap: str
    frames: int = 50_000
    seed: int = 1
    connections: int = 128
    time_limit_s: float = 1800.0
    check_every: int = 20_000  # frames between /proc samples and ApiVersions probes
    pid: int | None = None  # the broker's pid; found from the listening port when None
    log_path: Path | None = None  # the broker's log, scanned for internal errors
    # Bytes the broker's log may grow by per minute of the run (a part of a minute counts as a
    # whole one); None: not judged. A hostile peer must not be able to fill the broker's disk.
    log_bytes_per_minute_limit: int | None = None
    rss_growth_limit_mib: float = 256.0
    socket_slack: int = 2  # sockets above the baseline still allowed once the run is over
    file_slack: int = 64
    probe_timeout_s: float = 10.0
    reply_timeout_s: float = 5.0
    round_trip: bool = True
    replay: int | None = None  # send only this connection's plan


@dataclass
class FuzzResult:
    options: FuzzOptions
    counters: Counters = field(default_factory=Counters)
    elapsed_s: float = 0.0
    pid: int | None = None
    rss_baseline: int = 0
    rss_max: int = 0
    rss_end: int = 0
    fds_baseline: proc.Descriptors | None = None
    fds_max: int = 0
    fds_end: proc.Descriptors | None = None
    partitions_baseline: int = 0
    partitions_end: int = 0
    probes: int = 0
    probe_max_s: float = 0.0
    logged_errors: int = 0
    log_growth: int = 0
    round_trip_ran: bool = False
    round_trip_error: str | None = None
    failures: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures

    def summary(self) -> str:
        c = self.counters
        rate = c.frames_sent / self.elapsed_s if self.elapsed_s else 0.0
        parts = [
            f"fuzz seed={self.options.seed}",
            f"frames sent={c.frames_sent} answered={c.answered} passed-over={c.passed_over}",
            f"(create-topics={c.sent_by_api[19]} create-partitions={c.sent_by_api[37]} produce={c.sent_by_api[0]})",
            f"connections={c.connections} closed-by-broker={c.closed_by_broker} timed-out={c.timed_out}",
        ]
        if self.pid is not None and self.fds_baseline is not None:
            end = self.fds_end.total if self.fds_end else -1
            parts.append(f"rss max={self.rss_max / MiB:.0f}MiB (baseline {self.rss_baseline / MiB:.0f}, "
                         f"end {self.rss_end / MiB:.0f})")
            parts.append(f"fds max={self.fds_max} (baseline {self.fds_baseline.total}, end {end})")
        else:
            parts.append("rss/fds n/a (broker not a local process)")
        parts.append(f"probe max={self.probe_max_s * 1000:.0f}ms")
        if self.options.log_path is not None:
            parts.append(f"logged-errors={self.logged_errors} log+{self.log_growth / MiB:.1f}MiB")
        if self.options.round_trip:
            verdict = "skipped" if not self.round_trip_ran else "ok" if self.round_trip_error is None else "FAILED"
            parts.append(f"round-trip={verdict}")
        parts.append(f"{self.elapsed_s:.0f}s ({rate:.0f} frames/s)")
        verdict = "PASS" if self.passed else "FAIL: " + "; ".join(self.failures)
        return " ".join(parts) + ": " + verdict

    def details(self) -> str:
        """The samples kept of each kind of event, for a report."""
        lines = []
        for kind, samples in sorted(self.counters.samples.items()):
            lines.append(f"  {kind}:")
            lines.extend(f"    {s}" for s in samples)
        return "\n".join(lines)


def _prepare(address: tuple[str, int], timeout_s: float) -> Target:
    """Create the stable topics (they may exist from an earlier run) and learn their ids."""
    request = CreateTopicsRequest(timeout_ms=int(timeout_s * 1000), topics=[
        CreateTopicsRequest.CreatableTopic(name=name, num_partitions=STABLE_PARTITIONS, replication_factor=1)
        for name in STABLE_TOPICS])
    response = call(address, request, 5, timeout_s=timeout_s)
    for result in response.topics:
        if result.error_code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
            raise RuntimeError(f"cannot create topic {result.name}: error {result.error_code} {result.error_message}")
    deadline = time.monotonic() + timeout_s
    while True:  # creation may finish after the answer: wait for every partition's leader
        metadata = call(address, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=n)
                                                         for n in STABLE_TOPICS]), 12, timeout_s=timeout_s)
        ready = {t.name: t for t in metadata.topics if t.error_code == ErrorCode.NONE
                 and len(t.partitions) >= STABLE_PARTITIONS and all(p.leader_id >= 0 for p in t.partitions)}
        if len(ready) == len(STABLE_TOPICS):
            break
        if time.monotonic() >= deadline:
            raise RuntimeError(f"topics {', '.join(STABLE_TOPICS)} not ready in {timeout_s:.0f}s")
        time.sleep(0.1)
    broker_id = metadata.brokers[0].node_id if metadata.brokers else 0
    return Target(broker_id=broker_id, topic_ids={name: t.topic_id for name, t in ready.items()})


def _scan_log(path: Path, start: int, counters: Counters) -> tuple[int, int]:
    """Records logged at ERROR or CRITICAL since byte `start` (an internal error closing a
    connection is one; summaries of suppressed repeats count what they suppressed), and how many
    bytes the log grew. A few of the lines go into the samples."""
    try:
        size = path.stat().st_size
        errors = 0
        with path.open("rb") as f:
            f.seek(start)
            for raw in f:
                line = raw.decode("utf-8", "replace").rstrip()
                match = ERROR_RECORD.match(line)
                if not match:
                    continue
                repeats = _REPEATS.search(line)
                errors += int(repeats.group(1).replace(",", "")) if repeats else 1
                counters.sample("errors in the broker's log", line[:300])
        return errors, size - start
    except OSError:
        return 0, 0


def run_fuzz(options: FuzzOptions, *, progress: Callable[[str], None] | None = None) -> FuzzResult:
    """Run the whole thing; never raises for what the broker does (that is in the result)."""
    say = progress or (lambda _line: None)
    result = FuzzResult(options)
    address = loopback_address(options.bootstrap)
    pid = options.pid if options.pid is not None else proc.listener_pid(address[1])
    result.pid = pid
    start = time.monotonic()
    try:
        ping(address, timeout_s=options.probe_timeout_s)
        target = _prepare(address, options.probe_timeout_s * 3)
        topics_before = _topics(address)
        result.partitions_baseline = sum(topics_before.values())
    except (OSError, RuntimeError) as exc:
        result.failures.append(f"broker not usable before the run: {exc}")
        return result
    mutator = Mutator(build_corpus(target))
    if options.replay is not None:
        plan = make_plan(mutator, options.seed, options.replay)
        say(f"fuzz: connection {plan.index}: window {plan.window}, hang up {plan.hang_up}, chunked {plan.chunked}")
        for frame in plan.frames:
            say(f"  {frame.label} ({len(frame.data)} bytes)")
    if pid is not None:
        result.rss_baseline = result.rss_max = proc.rss_bytes(pid)
        result.fds_baseline = proc.descriptors(pid)
        result.fds_max = result.fds_baseline.total
    log_start = options.log_path.stat().st_size if options.log_path and options.log_path.exists() else 0
    say(f"fuzz: seed {options.seed}, {options.frames} frames, {options.connections} connections, "
        f"broker {options.bootstrap} (pid {pid if pid is not None else 'unknown'})")

    counters = result.counters
    next_check = [0]
    last_report = [start]

    def tick() -> bool:
        now = time.monotonic()
        due = counters.frames_sent >= next_check[0] or now - last_report[0] >= 10.0
        if not due:
            return True
        next_check[0] = counters.frames_sent + options.check_every
        if not _sample(result, address, pid):
            return False
        if now - last_report[0] >= 10.0 or counters.frames_sent >= options.frames:
            last_report[0] = now
            rate = counters.frames_sent / max(now - start, 1e-9)
            memory = f", rss {proc.rss_bytes(pid) / MiB:.0f}MiB, fds {result.fds_max} max" if pid else ""
            say(f"fuzz: {counters.frames_sent}/{options.frames} frames ({rate:.0f}/s), "
                f"{counters.answered} answered, {counters.closed_by_broker} closed by the broker{memory}")
        return True

    engine = EngineOptions(address=address, seed=options.seed, frames=options.frames,
                           connections=options.connections,
                           time_limit_s=max(1.0, options.time_limit_s - (time.monotonic() - start)),
                           reply_timeout_s=options.reply_timeout_s, only_index=options.replay)
    run_engine(engine, mutator, counters, tick=tick, tick_every_s=0.5)
    if not result.failures:
        _judge(result, address, pid, log_start, set(topics_before))
    result.elapsed_s = time.monotonic() - start
    _judge_log_size(result)
    if counters.frames_sent < options.frames and not result.failures and options.replay is None:
        result.failures.append(f"time limit of {options.time_limit_s:.0f}s reached after "
                               f"{counters.frames_sent} of {options.frames} frames")
    return result


def _judge_log_size(result: FuzzResult) -> None:
    limit = result.options.log_bytes_per_minute_limit
    if limit is None or result.options.log_path is None or result.failures:
        return
    minutes = max(1.0, result.elapsed_s / 60)
    if result.log_growth > limit * minutes:
        result.failures.append(f"the broker's log grew by {result.log_growth:,} bytes in {result.elapsed_s:.0f}s "
                               f"(limit {limit:,} bytes a minute)")


def _sample(result: FuzzResult, address: tuple[str, int], pid: int | None) -> bool:
    """Read /proc and probe the broker; False (with a failure recorded) when it is gone."""
    options = result.options
    if pid is not None:
        if not proc.alive(pid):
            result.failures.append(f"the broker (pid {pid}) died")
            return False
        try:
            result.rss_max = max(result.rss_max, proc.rss_bytes(pid))
            result.fds_max = max(result.fds_max, proc.descriptors(pid).total)
        except OSError:
            result.failures.append(f"the broker (pid {pid}) died")
            return False
        if result.rss_max - result.rss_baseline > options.rss_growth_limit_mib * MiB:
            result.failures.append(f"RSS grew by {(result.rss_max - result.rss_baseline) / MiB:.0f} MiB "
                                   f"(limit {options.rss_growth_limit_mib:.0f})")
            return False
    try:
        latency = ping(address, timeout_s=options.probe_timeout_s)
    except OSError as exc:
        died = pid is not None and not proc.alive(pid)
        result.failures.append(f"the broker (pid {pid}) died" if died else
                               f"ApiVersions not answered within {options.probe_timeout_s:.0f}s: {exc}")
        return False
    result.probes += 1
    result.probe_max_s = max(result.probe_max_s, latency)
    return True


def _topics(address: tuple[str, int]) -> dict[str, int]:
    """Every topic the broker lists, with its partition count."""
    response = call(address, MetadataRequest(topics=None, allow_auto_topic_creation=False), 9)
    return {t.name: len(t.partitions) for t in response.topics if t.name}


def _clean_up(address: tuple[str, int], before: set[str], timeout_s: float) -> str | None:
    """Delete the topics the run created (names the fuzzer uses: `fuzz` and its mutations), so
    that the broker's descriptors can be compared with what it held before. None when done."""
    leftovers = sorted(n for n in _topics(address) if n not in before and n.startswith("fuzz"))
    if not leftovers:
        return None
    deadline = time.monotonic() + timeout_s
    for i in range(0, len(leftovers), 100):
        chunk = leftovers[i : i + 100]
        call(address, DeleteTopicsRequest(topic_names=chunk, timeout_ms=int(timeout_s * 1000)), 4,
             timeout_s=timeout_s)
    while True:
        remaining = [n for n in _topics(address) if n in set(leftovers)]
        if not remaining:
            return None
        if time.monotonic() >= deadline:
            return f"{len(remaining)} topics the run created still listed {timeout_s:.0f}s after DeleteTopics"
        time.sleep(0.2)


def _held_by_design(counters: Counters, port: int) -> int:
    """Sockets the broker still holds for gone peers whose request was a group join or sync:
    those wait for the group's rebalance, up to timeouts the request named (as in Kafka)."""
    held = 0
    for peer in proc.close_wait_peers(port):
        left = counters.left_waiting.get(peer)
        held += left is not None and left[1].api_key in HELD_BY_DESIGN
    return held


def _sample_held(counters: Counters, port: int) -> None:
    """Name what the broker still holds connections for, for the report."""
    for peer in proc.close_wait_peers(port):
        left = counters.left_waiting.get(peer)
        what = f"connection {left[0]}: {left[1].label}" if left else "a connection the fuzzer did not leave waiting"
        counters.sample("held by the broker after the run (CLOSE_WAIT)", f"port {peer}: {what}")


def _judge(result: FuzzResult, address: tuple[str, int], pid: int | None, log_start: int,
           topics_before: set[str]) -> None:
    options = result.options
    if not _sample(result, address, pid):
        return
    c = result.counters
    if c.malformed:
        result.failures.append(f"{c.malformed} answers did not decode")
    if c.unmatched:
        result.failures.append(f"{c.unmatched} answers carried a correlation id nobody sent")
    try:
        problem = _clean_up(address, topics_before, options.probe_timeout_s * 6)
    except OSError as exc:
        problem = f"deleting the run's topics failed: {exc}"
    if problem:
        result.failures.append(problem)
    partitions_end: int | None = None
    try:
        partitions_end = result.partitions_end = sum(_topics(address).values())
    except OSError as exc:
        result.failures.append(f"Metadata after the run failed: {exc}")
    if pid is not None and result.fds_baseline is not None:
        base = result.fds_baseline
        new_partitions = max(0, (partitions_end or 0) - result.partitions_baseline)
        # Without a partition count (Metadata failed) the files cannot be judged: sockets only.
        file_limit = (base.files + FILES_PER_PARTITION * new_partitions + options.file_slack
                      if partitions_end is not None else 2**31)
        # The broker closes its side of our connections as it notices them gone: poll, bounded.
        deadline = time.monotonic() + 30.0
        while True:
            now_fds = proc.descriptors(pid)
            held = _held_by_design(result.counters, address[1])
            socket_limit = base.sockets + options.socket_slack + held
            if (now_fds.sockets <= socket_limit and now_fds.files <= file_limit) or time.monotonic() >= deadline:
                break
            time.sleep(0.2)
        result.fds_end = now_fds
        result.rss_end = proc.rss_bytes(pid)
        if now_fds.sockets > socket_limit:
            result.failures.append(f"sockets leaked: {now_fds.sockets} open after the run, {base.sockets} before "
                                   f"({held} held for pending group joins, as Kafka holds them)")
            _sample_held(result.counters, address[1])
        if now_fds.files > file_limit:
            result.failures.append(f"files leaked: {now_fds.files} open after the run, {base.files} before "
                                   f"(+{new_partitions} partitions allow {file_limit})")
    if options.round_trip:
        result.round_trip_ran = True
        result.round_trip_error = round_trip(options.bootstrap, f"fuzz-roundtrip-{options.seed}")
        if result.round_trip_error:
            result.failures.append(f"real client round trip failed: {result.round_trip_error}")
    if options.log_path is not None:
        result.logged_errors, result.log_growth = _scan_log(options.log_path, log_start, result.counters)
        if result.logged_errors:
            result.failures.append(f"{result.logged_errors} errors logged in {options.log_path}")
    _sample(result, address, pid)
