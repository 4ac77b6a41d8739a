"""The mirror's Prometheus metrics: MirrorMaker 2's, by the names the Prometheus JMX exporter
gives them (Strimzi's MM2 rules), and the lag a DR owner watches.

    metrics.listener: 127.0.0.1:9465      # in the mirror's config; unset: no endpoint

MM2's per-partition MBeans (``kafka.connect.mirror:type=MirrorSourceConnector,target=T,topic=R,
partition=P``, R the remote topic) become ``kafka_connect_mirror_source_connector_<attribute>``
with labels target, topic, partition, hyphens made underscores: ``record_count``,
``record_rate``, ``byte_count``, ``byte_rate``, ``replication_latency_ms`` and its ``_max`` and
``_avg``. The checkpoint connector's ``checkpoint_latency_ms`` (``_max``, ``_avg``) carries
source, target, group, topic, partition. MM2 has no lag metric; Causeway's
``causeway_mirror_partition_lag_records`` and ``..._lag_seconds`` are estimated as Kafka's lag
exporters estimate a consumer group's: records are the source's log end less the mirrored
position, seconds how long ago the source's log end passed that position, interpolated in a
table of log ends the mirror saw and when (kafka-lag-exporter's method).

How it stays off the hot path and thread-safe: the writers record one latency per batch written
(:class:`LatencyWindow`, on the event loop); once a second (every N/2000 s for N partitions over
2,000) :meth:`MirrorMetrics.sample_forever` reads every partition's counters on the loop, a few
hundred at a time, and publishes an immutable snapshot; the endpoint's thread only reads the
latest snapshot and renders it as text. Rates and latency max/average are over a window of about
``WINDOW_S`` seconds, as Kafka's metrics sample theirs (two samples of 30 s).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import trio
from prometheus_client import CollectorRegistry, ProcessCollector

from broker.metrics import MetricsServer, escape_label_value, serve_metrics

if TYPE_CHECKING:
    from broker.client import TopicPartition
    from mirror.config import MirrorConfig

__all__ = ["CheckpointLatencies", "LatencyWindow", "MirrorMetrics", "lag_seconds", "serve_mirror_metrics"]

log = logging.getLogger(__name__)

WINDOW_S = 30.0
SAMPLE_INTERVAL_S = 1.0
PARTITIONS_SAMPLED_PER_S = 2000  # more partitions than this: sampled less often than each second
SAMPLE_CHUNK = 500  # partitions sampled between two checkpoints of the event loop
# Latencies kept per partition: one per batch written, at most this many in a window (a
# partition writing faster is summarised from its latest batches).
_LATENCIES_KEPT = 1024
# Points (source log end, when) kept per partition for the time lag; thinned when full, keeping
# the recent ones dense and the old ones sparse, so a long backlog is still dated.
_END_POINTS_KEPT = 64


class LatencyWindow:
    """Replication latencies (ms from a batch's newest timestamp to its write acknowledged) of
    the last ``WINDOW_S`` seconds. Added to on the event loop, read there by the sampler."""

    __slots__ = ("_samples",)

    def __init__(self) -> None:
        self._samples: deque[tuple[float, int]] = deque(maxlen=_LATENCIES_KEPT)

    def add(self, latency_ms: int) -> int:
        """Record one batch's latency; returns it (the caller's status shows the newest)."""
        self._samples.append((time.monotonic(), latency_ms))
        return latency_ms

    def stats(self, now: float) -> tuple[float, float] | None:
        """(max, average) of the window's latencies; None when nothing was written in it."""
        samples = self._samples
        while samples and samples[0][0] < now - WINDOW_S:
            samples.popleft()
        if not samples:
            return None
        values = [ms for _, ms in samples]
        return float(max(values)), sum(values) / len(values)


def lag_seconds(points: list[tuple[int, float]], position: int, now: float) -> float:
    """How long ago the source's log end passed `position` (the first offset not yet mirrored),
    from `points`, (log end, when) in time order: interpolated between the last point at or
    below it and the first above it; 0 when no point is above it (nothing is behind). Before the
    oldest point: at least since then."""
    previous: tuple[int, float] | None = None
    for end, at in points:
        if end > position:
            if previous is None:
                return max(0.0, now - at)
            prev_end, prev_at = previous
            passed = prev_at + (at - prev_at) * (position + 1 - prev_end) / (end - prev_end)
            return max(0.0, now - passed)
        previous = (end, at)
    return 0.0


class PartitionMirror(Protocol):
    """What the metrics read of a mirrored partition (mirror/partition.py); a protocol, so the
    partition can import this module without a circle."""

    target: TopicPartition
    high_watermark: int
    written_through: int
    records: int
    bytes: int
    latency_ms: int | None
    latencies: LatencyWindow
    parked: bool

    @property
    def lag(self) -> int: ...


class Mirror(Protocol):
    """What the metrics read of a mirror (mirror/runtime.py)."""

    config: MirrorConfig
    checkpoint_latencies: CheckpointLatencies

    @property
    def partitions(self) -> Mapping[TopicPartition, PartitionMirror]: ...
    @property
    def source_alias(self) -> str: ...
    @property
    def target_alias(self) -> str: ...


@dataclass
class _Tracked:
    """What the sampler keeps of one partition between samples."""

    ends: list[tuple[int, float]] = field(default_factory=list)  # (source log end, when)
    # (when, records, bytes): the window's start, and the one before it
    current: tuple[float, int, int] | None = None
    previous: tuple[float, int, int] | None = None


@dataclass(frozen=True, slots=True)
class _Row:
    topic: str  # the remote topic (MM2's `topic` label)
    partition: int
    records: int
    bytes: int
    record_rate: float
    byte_rate: float
    latency: tuple[float, float] | None  # (max, avg) ms over the window
    latency_now: int | None  # the newest batch's
    lag: int
    lag_s: float
    parked: bool


class MirrorMetrics:
    """One mirror's metrics: sampled on its event loop, served from the latest sample."""

    def __init__(self, mirror: Mirror) -> None:
        self._mirror = mirror
        self._tracked: dict[TopicPartition, _Tracked] = {}
        self._rows: tuple[_Row, ...] = ()  # replaced whole by each sample: the thread reads one
        self._checkpoints: tuple[tuple[str, str, int, float, float], ...] = ()
        self.registry = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self.registry)

    # -- on the event loop ---------------------------------------------------------------------

    async def sample(self) -> None:
        """Read every partition's counters and publish a snapshot (on the loop: the partitions
        are the mirror's, changed by its tasks), giving the loop back every SAMPLE_CHUNK
        partitions so that thousands of them never hold it long."""
        now = time.monotonic()
        rows: list[_Row] = []
        live = dict(self._mirror.partitions)
        for tp in [tp for tp in self._tracked if tp not in live]:
            del self._tracked[tp]
        for i, (tp, pm) in enumerate(live.items()):
            if i and not i % SAMPLE_CHUNK:
                await trio.lowlevel.checkpoint()
            rows.append(self._row(self._tracked.setdefault(tp, _Tracked()), pm, now))
        self._rows = tuple(rows)
        self._checkpoints = tuple(self._mirror.checkpoint_latencies.stats(now))

    def _row(self, tracked: _Tracked, pm: PartitionMirror, now: float) -> _Row:
        end = pm.high_watermark
        if end >= 0 and (not tracked.ends or tracked.ends[-1][0] != end):
            if tracked.ends and end < tracked.ends[-1][0]:
                tracked.ends.clear()  # the source's log went back (re-created): start over
            if len(tracked.ends) >= _END_POINTS_KEPT:
                del tracked.ends[1:_END_POINTS_KEPT // 2:2]  # every other older point
            tracked.ends.append((end, now))
        # Two anchors a window apart, as Kafka's two samples: the rate spans one to two windows.
        if tracked.current is None or pm.records < tracked.current[1]:
            tracked.previous, tracked.current = None, (now, pm.records, pm.bytes)
        elif now - tracked.current[0] >= WINDOW_S:
            tracked.previous, tracked.current = tracked.current, (now, pm.records, pm.bytes)
        since, records0, bytes0 = tracked.previous or tracked.current
        elapsed = now - since
        record_rate = (pm.records - records0) / elapsed if elapsed > 0 else 0.0
        byte_rate = (pm.bytes - bytes0) / elapsed if elapsed > 0 else 0.0
        lag = pm.lag
        position = pm.written_through + 1
        return _Row(pm.target.topic, pm.target.partition, pm.records, pm.bytes, record_rate, byte_rate,
                    pm.latencies.stats(now), pm.latency_ms, lag,
                    lag_seconds(tracked.ends, position, now) if lag > 0 else 0.0, pm.parked)

    async def sample_forever(self) -> None:
        while True:
            await self.sample()
            # Once a second, less often with many partitions: sampling 10,000 took about 0.3 s
            # of the loop on the shared test machine.
            await trio.sleep(max(SAMPLE_INTERVAL_S, len(self._rows) / PARTITIONS_SAMPLED_PER_S))

    # -- in the endpoint's thread ------------------------------------------------------------------

    def render(self) -> str:
        """The latest snapshot as text in Prometheus's exposition format (the endpoint's thread
        calls it; text rather than prometheus_client samples, which for thousands of partitions
        cost seconds a scrape: see broker/replication/replica_metrics.py)."""
        rows, checkpoints = self._rows, self._checkpoints
        target = escape_label_value(self._mirror.target_alias)
        source = escape_label_value(self._mirror.source_alias)
        columns: dict[str, list[str]] = {name: [] for name, _ in _PARTITION_FAMILIES}
        for row in rows:
            label = f'{{partition="{row.partition}",target="{target}",topic="{row.topic}"}} '
            values: tuple[tuple[str, object], ...] = (
                (_MM2 + "record_count", row.records), (_MM2 + "record_rate", row.record_rate),
                (_MM2 + "byte_count", row.bytes), (_MM2 + "byte_rate", row.byte_rate),
                (_MM2 + "replication_latency_ms", row.latency_now),
                (_MM2 + "replication_latency_ms_max", row.latency[0] if row.latency else None),
                (_MM2 + "replication_latency_ms_avg", row.latency[1] if row.latency else None),
                (_OURS + "lag_records", row.lag), (_OURS + "lag_seconds", row.lag_s),
                (_OURS + "parked", int(row.parked)),
            )
            for name, value in values:
                if value is not None:
                    columns[name].append(f"{name}{label}{value}\n")
        parts = [_header(name, help_text) + "".join(columns[name]) for name, help_text in _PARTITION_FAMILIES]
        cp_max, cp_avg = [], []
        for group, topic, partition, worst, mean in checkpoints:
            label = (f'{{group="{escape_label_value(group)}",partition="{partition}",source="{source}",'
                     f'target="{target}",topic="{topic}"}} ')
            cp_max.append(f"{_CHECKPOINT}_max{label}{worst}\n")
            cp_avg.append(f"{_CHECKPOINT}_avg{label}{mean}\n")
        parts.append(_header(f"{_CHECKPOINT}_max", "Largest ms from a checkpoint pass's start to the checkpoint "
                                                   "written at the target, last 30 s (MM2's "
                                                   "checkpoint-latency-ms-max).") + "".join(cp_max))
        parts.append(_header(f"{_CHECKPOINT}_avg", "Average of the same (MM2's checkpoint-latency-ms-avg).")
                     + "".join(cp_avg))
        parked = sum(1 for r in rows if r.parked)
        parts.append(_header("causeway_mirror_partitions", "Partitions the mirror copies, and how many are parked.")
                     + f'causeway_mirror_partitions{{source="{source}",state="mirrored",target="{target}"}} '
                       f"{len(rows)}\n"
                     + f'causeway_mirror_partitions{{source="{source}",state="parked",target="{target}"}} {parked}\n')
        return "".join(parts)


_MM2 = "kafka_connect_mirror_source_connector_"
_OURS = "causeway_mirror_partition_"
_CHECKPOINT = "kafka_connect_mirror_checkpoint_connector_checkpoint_latency_ms"
# Per partition, with labels target, topic (the remote topic), partition; in the order rendered.
_PARTITION_FAMILIES = (
    (_MM2 + "record_count", "Records replicated in this run (MM2's record-count)."),
    (_MM2 + "record_rate", "Records replicated per second, over 30 to 60 s (MM2's record-rate)."),
    (_MM2 + "byte_count", "Record batch bytes replicated in this run (MM2's byte-count)."),
    (_MM2 + "byte_rate", "Record batch bytes replicated per second, over 30 to 60 s (MM2's byte-rate)."),
    (_MM2 + "replication_latency_ms", "Ms from the newest record timestamp of the latest batch written to its "
                                      "write acknowledged (MM2's replication-latency-ms)."),
    (_MM2 + "replication_latency_ms_max", "Largest replication latency of the last 30 s (MM2's "
                                          "replication-latency-ms-max)."),
    (_MM2 + "replication_latency_ms_avg", "Average replication latency of the last 30 s, per batch (MM2's "
                                          "replication-latency-ms-avg)."),
    (_OURS + "lag_records", "Source log end less the mirrored position: records not yet at the target."),
    (_OURS + "lag_seconds", "How long ago the source's log end passed the mirrored position (0: caught up), "
                            "estimated from the log ends seen."),
    (_OURS + "parked", "1 while the partition is parked on a batch it cannot write (see the status)."),
)


def _header(name: str, help_text: str) -> str:
    return f"# HELP {name} {help_text}\n# TYPE {name} gauge\n"


class CheckpointLatencies:
    """Checkpoint latencies (ms) by (group, remote topic, partition), each over ``WINDOW_S``;
    added to on the loop by the checkpoint writer, read there by the sampler."""

    def __init__(self) -> None:
        self._windows: dict[tuple[str, str, int], LatencyWindow] = {}

    def add(self, group: str, topic: str, partition: int, latency_ms: int) -> None:
        self._windows.setdefault((group, topic, partition), LatencyWindow()).add(latency_ms)

    def stats(self, now: float) -> Iterator[tuple[str, str, int, float, float]]:
        for (group, topic, partition), window in list(self._windows.items()):
            stats = window.stats(now)
            if stats is None:
                del self._windows[(group, topic, partition)]
                continue
            yield group, topic, partition, stats[0], stats[1]


async def serve_mirror_metrics(mirror: Mirror, listener: str, *,
                               task_status: trio.TaskStatus[MetricsServer] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve `mirror`'s metrics on `listener` (HOST:PORT; port 0 picks one) until cancelled,
    sampling once a second. Raises OSError naming `metrics.listener` when it cannot bind."""
    metrics = MirrorMetrics(mirror)
    server = serve_metrics(listener, registry=metrics.registry, texts=[metrics.render], key="metrics.listener")
    try:
        log.info("mirror %s: metrics served on %s", mirror.config.display_name, server.url)
        task_status.started(server)
        await metrics.sample_forever()
    finally:
        await trio.to_thread.run_sync(server.close)
