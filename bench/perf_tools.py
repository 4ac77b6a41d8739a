"""Apache Kafka's own performance tools, run against any broker, their output parsed into figures.

kafka-producer-perf-test (ProducerPerformance), kafka-consumer-perf-test (ConsumerPerformance) and
EndToEndLatency, by main class from the cached peer (bench.peers). The figures are taken as the
tools print them: their "MB" is 2**20 bytes, and EndToEndLatency's percentiles are whole
milliseconds. A line that does not parse raises `ToolOutputError` with the whole output, so a
changed tool fails loudly rather than yielding zeros.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.peers import ToolRun, run_tool

__all__ = ["BENCH_JVM_FLAGS", "ConsumerFigures", "EndToEndFigures", "ProducerFigures", "ToolOutputError",
           "consumer_perf", "end_to_end_latency", "parse_consumer_perf", "parse_end_to_end", "parse_producer_perf",
           "producer_perf"]

# What kafka-run-class.sh gives the perf tools (KAFKA_JVM_PERFORMANCE_OPTS with a 512 MiB heap),
# not bench.peers' start-fast flags: the client compiler alone would make the client the bottleneck.
# The same client JVM runs against both brokers. CDS output stays off stdout, which is parsed.
BENCH_JVM_FLAGS: tuple[str, ...] = ("-Xms256m", "-Xmx512m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                                    "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
                                    "-Xshare:auto", "-Xlog:disable", "-Xlog:all=warning,cds*=off:stderr",
                                    "-Djava.awt.headless=true")
TOOL_TIMEOUT_S = 600.0

_PRODUCER_SUMMARY = re.compile(
    r"^(?P<records>\d+) records sent, (?P<rps>[\d.]+) records/sec \((?P<mbps>[\d.]+) MB/sec\), "
    r"(?P<avg>[\d.]+) ms avg latency, (?P<max>[\d.]+) ms max latency, (?P<p50>\d+) ms 50th, (?P<p95>\d+) ms 95th, "
    r"(?P<p99>\d+) ms 99th, (?P<p999>\d+) ms 99\.9th\.?$")
_E2E_AVERAGE = re.compile(r"^Avg latency: (?P<avg>[\d.]+) ms$")
_E2E_PERCENTILES = re.compile(r"^Percentiles: 50th = (?P<p50>\d+), 99th = (?P<p99>\d+), 99\.9th = (?P<p999>\d+)$")


class ToolOutputError(RuntimeError):
    """A Kafka tool printed something other than the figures expected of it."""

    def __init__(self, what: str, run: ToolRun) -> None:
        super().__init__(f"{what} in the output of {' '.join(run.argv)}:\n--- stdout\n{run.stdout}"
                         f"--- stderr\n{run.stderr}")


@dataclass(frozen=True)
class ProducerFigures:
    """ProducerPerformance's summary line."""

    records: int
    records_per_s: float
    mib_per_s: float
    avg_ms: float
    max_ms: float
    p50_ms: int
    p95_ms: int
    p99_ms: int
    p999_ms: int


@dataclass(frozen=True)
class ConsumerFigures:
    """ConsumerPerformance's line. `records_per_s` and `mib_per_s` count from the consumer's start,
    group join included; the fetch_ ones leave the join (rebalance_ms) out."""

    records: int
    mib_per_s: float
    records_per_s: float
    rebalance_ms: float
    fetch_mib_per_s: float
    fetch_records_per_s: float


@dataclass(frozen=True)
class EndToEndFigures:
    """EndToEndLatency: one record at a time, produced then polled until it arrives."""

    avg_ms: float
    p50_ms: int
    p99_ms: int
    p999_ms: int


def parse_producer_perf(run: ToolRun) -> ProducerFigures:
    """The final summary line (the one with percentiles; progress lines have none)."""
    for line in reversed(run.lines):
        match = _PRODUCER_SUMMARY.match(line.strip())
        if match:
            return ProducerFigures(int(match["records"]), float(match["rps"]), float(match["mbps"]),
                                   float(match["avg"]), float(match["max"]), int(match["p50"]), int(match["p95"]),
                                   int(match["p99"]), int(match["p999"]))
    raise ToolOutputError("no summary line with percentiles", run)


def parse_consumer_perf(run: ToolRun) -> ConsumerFigures:
    """The header line and the values line that follows it, matched by column name."""
    lines = run.lines
    for at, line in enumerate(lines[:-1]):
        if line.startswith("start.time,"):
            columns = [c.strip() for c in line.split(",")]
            values = [v.strip() for v in lines[at + 1].split(",")]
            if len(values) != len(columns):
                raise ToolOutputError(f"{len(values)} values for {len(columns)} columns", run)
            row = dict(zip(columns, values, strict=True))
            try:
                return ConsumerFigures(int(row["data.consumed.in.nMsg"]), float(row["MB.sec"]), float(row["nMsg.sec"]),
                                       float(row["rebalance.time.ms"]), float(row["fetch.MB.sec"]),
                                       float(row["fetch.nMsg.sec"]))
            except (KeyError, ValueError) as exc:
                raise ToolOutputError(f"unreadable column ({exc})", run) from exc
    raise ToolOutputError("no header line", run)


def parse_end_to_end(run: ToolRun) -> EndToEndFigures:
    average = percentiles = None
    for line in run.lines:
        average = average or _E2E_AVERAGE.match(line.strip())
        percentiles = percentiles or _E2E_PERCENTILES.match(line.strip())
    if average is None or percentiles is None:
        raise ToolOutputError("no average or percentiles line", run)
    return EndToEndFigures(float(average["avg"]), int(percentiles["p50"]), int(percentiles["p99"]),
                           int(percentiles["p999"]))


def _command_config(path: Path | None) -> tuple[str, ...]:
    return ("--command-config", str(path)) if path is not None else ()


def producer_perf(bootstrap: str, topic: str, records: int, size: int, properties: Sequence[str],
                  jvm_flags: Sequence[str] = BENCH_JVM_FLAGS, command_config: Path | None = None) -> ProducerFigures:
    """Unthrottled kafka-producer-perf-test; `properties` are producer configs, KEY=VALUE;
    `command_config` a properties file of more (a secured listener's client keys)."""
    run = run_tool("kafka-producer-perf-test", "--bootstrap-server", bootstrap, "--topic", topic,
                   "--num-records", str(records), "--record-size", str(size), "--throughput", "-1",
                   *_command_config(command_config), "--command-property", *properties, jvm_flags=jvm_flags,
                   timeout=TOOL_TIMEOUT_S).check()
    figures = parse_producer_perf(run)
    if figures.records != records:
        raise ToolOutputError(f"{figures.records} records sent, not {records}", run)
    return figures


def consumer_perf(bootstrap: str, topic: str, records: int, group: str,
                  jvm_flags: Sequence[str] = BENCH_JVM_FLAGS, command_config: Path | None = None) -> ConsumerFigures:
    """kafka-consumer-perf-test reading `records` from the start of `topic` in a fresh group;
    `command_config` a properties file of consumer keys (a secured listener's client keys)."""
    run = run_tool("kafka-consumer-perf-test", "--bootstrap-server", bootstrap, "--topic", topic,
                   "--num-records", str(records), "--group", group, "--timeout", "30000",
                   *_command_config(command_config), jvm_flags=jvm_flags, timeout=TOOL_TIMEOUT_S).check()
    figures = parse_consumer_perf(run)
    if figures.records < records:
        raise ToolOutputError(f"{figures.records} records consumed, not {records}", run)
    return figures


def end_to_end_latency(bootstrap: str, topic: str, records: int, size: int, acks: str = "1",
                       jvm_flags: Sequence[str] = BENCH_JVM_FLAGS) -> EndToEndFigures:
    run = run_tool("kafka-e2e-latency", "--bootstrap-server", bootstrap, "--topic", topic, "--num-records",
                   str(records), "--producer-acks", acks, "--record-size", str(size), jvm_flags=jvm_flags,
                   timeout=TOOL_TIMEOUT_S).check()
    return parse_end_to_end(run)
