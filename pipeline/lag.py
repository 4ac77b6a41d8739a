"""Replication latency of a mirror, from the records themselves: how long after a record was
written at the source did its copy land at the target?

A copy's latency is its append time at the target minus the source record's timestamp. The
target's append time is on the wire only where the target topic stamps records on append
(`message.timestamp.type=LogAppendTime`, timestampType 1): a CreateTime copy keeps the source's
timestamp, so it tells nothing about when it arrived, and such partitions are named in a note.
Copies pair with their source records as the audit pairs them: at the same offset for a
link-mode mirror; for an mm2 mirror, the n-th target record with a content identity (key,
value, headers: the timestamp is what differs) pairs with the n-th source record with it.

Heartbeats (mm2): the mirror carries the source's `heartbeats` topic to `<alias>.heartbeats`;
each beat's value holds the time it was emitted (int16 version 0, int64 ms: Kafka's Heartbeat),
so a LogAppendTime `<alias>.heartbeats` at the target gives the latency of the beats, also in
hours with no traffic, without giving up the create times of the data topics.

Latencies are summarised in Spark with exact percentiles (p50, p99; linear interpolation between
the closest ranks, as Spark's `percentile`) and the max, per partition and per time window of
the source timestamps, and drawn as an SVG chart (no plotting library needed).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from html import escape
from typing import Any, TypeVar

import trio
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from broker.client import TopicPartition, admin
from broker.protocol.constants import EARLIEST, LATEST
from mirror.naming import HEARTBEATS_TOPIC
from pipeline.audit import MirrorSpec, read_pinned
from pipeline.clients import open_job_client
from pipeline.identity import identity_hashes
from pipeline.options import PipelineError, SecurityProps
from pipeline.planning import job_error
from pipeline.progress import stage_progress

__all__ = ["LagReport", "LagStats", "lag", "render_svg"]

RECORDS = "records"
HEARTBEATS = "heartbeats"
_Answer = TypeVar("_Answer")


@dataclass(frozen=True, slots=True)
class LagStats:
    count: int
    p50: float  # ms
    p99: float
    max: float


@dataclass
class LagReport:
    mirror: str
    mode: str
    source: str
    target: str
    window_s: int
    # (kind, source topic, partition, target topic) -> stats
    partitions: dict[tuple[str, str, int, str], LagStats] = field(default_factory=dict)
    overall: dict[str, LagStats] = field(default_factory=dict)  # kind -> stats
    windows: dict[str, list[tuple[int, LagStats]]] = field(default_factory=dict)  # kind -> [(start ms, stats)]
    notes: list[str] = field(default_factory=list)

    def table(self) -> str:
        rows: list[tuple[str, ...]] = [("kind", "source", "target", "copies", "p50 ms", "p99 ms", "max ms")]
        for (kind, topic, partition, target_topic), s in sorted(self.partitions.items()):
            rows.append((kind, f"{topic}-{partition}", f"{target_topic}-{partition}", *_cells(s)))
        for kind, s in sorted(self.overall.items()):
            rows.append((kind, "all", "", *_cells(s)))
        out = [_format(rows, 3)]
        for kind, windows in sorted(self.windows.items()):
            rows = [(f"{kind}: window (UTC, {self.window_s} s)", "copies", "p50 ms", "p99 ms", "max ms")]
            for start, s in windows:
                rows.append((_utc(start), *_cells(s)))
            out.append(_format(rows, 1))
        return "\n\n".join(out)

    def to_dict(self) -> dict[str, Any]:
        return {"mirror": self.mirror, "mode": self.mode, "source": self.source, "target": self.target,
                "window_s": self.window_s, "notes": self.notes,
                "partitions": [{"kind": k, "topic": t, "partition": p, "target_topic": tt, **_stats_dict(s)}
                               for (k, t, p, tt), s in sorted(self.partitions.items())],
                "overall": {k: _stats_dict(s) for k, s in self.overall.items()},
                "windows": {k: [{"start_ms": w, **_stats_dict(s)} for w, s in ws] for k, ws in self.windows.items()}}


def _stats_dict(s: LagStats) -> dict[str, Any]:
    return {"count": s.count, "p50_ms": s.p50, "p99_ms": s.p99, "max_ms": s.max}


def _cells(s: LagStats) -> tuple[str, ...]:
    return (str(s.count), f"{s.p50:.1f}", f"{s.p99:.1f}", f"{s.max:.0f}")


def _utc(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _format(rows: list[tuple[str, ...]], text: int) -> str:
    """Columns aligned: the first `text` to the left, the numbers to the right."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ("  ".join(c.ljust(w) if i < text else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
             for r in rows)
    return "\n".join(line.rstrip() for line in lines)


# -- which partitions: the mirror's topics at both sides ---------------------------------------


@dataclass(frozen=True, slots=True)
class _Survey:
    pairs: dict[str, str]  # source topic -> target topic, both present
    source_logs: dict[tuple[str, int], tuple[int, int]]
    target_logs: dict[tuple[str, int], tuple[int, int]]
    heartbeats: str | None  # the target's copy of the source's heartbeats (mm2), when present
    source_options: dict[str, str]  # the reads' options at each side, its login included
    target_options: dict[str, str]


async def _logs(bootstrap: str, security: SecurityProps, topics: Mapping[str, int],
                timeout_s: float) -> dict[tuple[str, int], tuple[int, int]]:
    tps = [TopicPartition(t, p) for t, n in topics.items() for p in range(n)]
    if not tps:
        return {}
    async with open_job_client(bootstrap, security, client_id="causeway-pipeline-lag",
                               request_timeout_s=timeout_s) as client:
        starts = await admin.list_offsets(client, {tp: EARLIEST for tp in tps})
        ends = await admin.list_offsets(client, {tp: LATEST for tp in tps})
    return {(tp.topic, tp.partition): (starts[tp].offset, ends[tp].offset) for tp in tps}


async def _list(bootstrap: str, security: SecurityProps, timeout_s: float) -> dict[str, int]:
    async with open_job_client(bootstrap, security, client_id="causeway-pipeline-lag",
                               request_timeout_s=timeout_s) as client:
        return await admin.list_topics(client)


async def _survey(spec: MirrorSpec, topics_regex: str | None, timeout_s: float,
                  options: Mapping[str, str]) -> _Survey:
    # By role, not by address: a mirror within one cluster has the same bootstrap at both ends.
    ends = {"source": spec.source_bootstrap, "target": spec.target_bootstrap}
    security = {role: spec.security(role, options) for role in ends}

    async def asking(role: str, call: Callable[[], Awaitable[_Answer]]) -> _Answer:
        """`call()`'s answer from the cluster of `role`, bounded; its failure names that cluster."""
        try:
            with trio.fail_after(timeout_s * 4):
                return await call()
        except BaseException as exc:
            raise job_error(ends[role], exc) from None

    source_topics = await asking("source", lambda: _list(ends["source"], security["source"], timeout_s))
    target_topics = await asking("target", lambda: _list(ends["target"], security["target"], timeout_s))
    wanted = spec.topic_filter(topics_regex)
    pairs = {t: spec.remote(t) for t in sorted(source_topics) if wanted(t) and spec.remote(t) in target_topics}
    beats = f"{spec.source_alias}{spec.separator}{HEARTBEATS_TOPIC}"
    heartbeats = beats if spec.mode == "mm2" and not spec.identity and beats in target_topics else None
    targets = {t: target_topics[t] for t in (*pairs.values(), *([heartbeats] if heartbeats else []))}
    source_logs = await asking("source", lambda: _logs(ends["source"], security["source"],
                                                       {t: source_topics[t] for t in pairs}, timeout_s))
    target_logs = await asking("target", lambda: _logs(ends["target"], security["target"], targets, timeout_s))
    return _Survey(pairs, source_logs, target_logs, heartbeats, spec.options_for("source", options),
                   spec.options_for("target", options))


# -- the latencies, in Spark ---------------------------------------------------------------------


def _content(df: DataFrame) -> DataFrame:
    """Each record with its content identity (not its timestamp: that is what a LogAppendTime
    copy changes) and its rank among the records of its partition with that identity."""
    h1, h2 = identity_hashes(with_timestamp=False)
    df = df.select("topic", "partition", "offset", "timestampType", F.unix_millis("timestamp").alias("ts"),
                   h1.alias("h1"), h2.alias("h2"))
    rank = Window.partitionBy("topic", "partition", "h1", "h2").orderBy("offset")
    return df.withColumn("n", F.row_number().over(rank))


def _record_latencies(spark: SparkSession, spec: MirrorSpec, survey: _Survey) -> DataFrame | None:
    """(kind, topic, partition, target_topic, ts, lat) for every copy with an append time."""
    target_logs = {k: v for k, v in survey.target_logs.items() if k[0] != survey.heartbeats}
    src = read_pinned(spark, spec.source_bootstrap, survey.source_logs, survey.source_options)
    tgt = read_pinned(spark, spec.target_bootstrap, target_logs, survey.target_options)
    if src is None or tgt is None:
        return None
    back = F.create_map(*[F.lit(x) for pair in survey.pairs.items() for x in reversed(pair)])
    s = _content(src).select("topic", "partition", "offset", "h1", "h2", "n", F.col("ts").alias("s_ts"))
    t = (_content(tgt).filter(F.col("timestampType") == 1)
         .select(F.element_at(back, F.col("topic")).alias("topic"), F.col("topic").alias("target_topic"),
                 "partition", "offset", "h1", "h2", "n", F.col("ts").alias("t_ts")))
    on = ["topic", "partition", "offset"] if spec.mode == "link" else ["topic", "partition", "h1", "h2", "n"]
    return (s.join(t, on).select(F.lit(RECORDS).alias("kind"), "topic", "partition", "target_topic",
                                 F.col("s_ts").alias("ts"), (F.col("t_ts") - F.col("s_ts")).alias("lat")))


def _heartbeat_latencies(spark: SparkSession, spec: MirrorSpec, survey: _Survey) -> DataFrame | None:
    if survey.heartbeats is None:
        return None
    df = read_pinned(spark, spec.target_bootstrap, {k: v for k, v in survey.target_logs.items()
                                                if k[0] == survey.heartbeats}, survey.target_options)
    if df is None:
        return None
    # Value: int16 version (0), int64 emission time in ms, big-endian.
    beat = F.conv(F.hex(F.substring("value", 3, 8)), 16, 10).cast("long")
    return (df.filter((F.col("timestampType") == 1) & (F.length("value") == 10)
                      & (F.hex(F.substring("value", 1, 2)) == "0000"))
            .select(F.lit(HEARTBEATS).alias("kind"), F.lit(HEARTBEATS_TOPIC).alias("topic"), "partition",
                    F.col("topic").alias("target_topic"), beat.alias("ts"),
                    (F.unix_millis("timestamp") - beat).alias("lat")))


def _summary(df: DataFrame, keys: list[str | Column]) -> list[Any]:
    quantiles = F.percentile(F.col("lat").cast("double"), F.array(F.lit(0.5), F.lit(0.99)))
    return (df.groupBy(*keys).agg(F.count(F.lit(1)).alias("count"), quantiles.alias("pc"),
                                  F.max("lat").alias("max")).collect())


def _stats(row: Any) -> LagStats:
    return LagStats(int(row["count"]), float(row["pc"][0]), float(row["pc"][1]), float(row["max"]))


def _untimed_notes(spark: SparkSession, spec: MirrorSpec, survey: _Survey) -> list[str]:
    """Target partitions holding copies none of which carries an append time."""
    tgt = read_pinned(spark, spec.target_bootstrap, survey.target_logs, survey.target_options)
    if tgt is None:
        return []
    rows = (tgt.groupBy("topic", "partition").agg(F.max("timestampType").alias("tt"))
            .filter(F.col("tt") == 0).orderBy("topic", "partition").collect())
    by_topic: dict[str, list[int]] = {}
    for r in rows:
        by_topic.setdefault(r.topic, []).append(int(r.partition))
    return [f"{topic} (partitions {', '.join(map(str, parts))}) keeps the source's create times: its copies carry "
            f"no append time, so they give no latency; set message.timestamp.type=LogAppendTime on it at the target "
            f"to measure them" + (" (the beats keep their emission time in their value)" if topic == survey.heartbeats
                                  else "")
            for topic, parts in sorted(by_topic.items())]


def lag(spark: SparkSession, spec: MirrorSpec, *, topics_regex: str | None = None, window_s: int = 60,
        timeout_s: float = 30.0, say: Callable[[str], None] = print,
        options: Mapping[str, str] | None = None) -> LagReport:
    """The replication latency of the mirror `spec` describes (see the module). `options` are
    read options of the data source for both sides (kafka.*: e.g. how to log in; each cluster's
    login in `spec` applies under them).

    Raises PipelineError when a cluster cannot be reached or refuses the login, an option
    cannot be used, or the window is not positive."""
    if window_s <= 0:
        raise PipelineError("the window must be a positive number of seconds")
    survey = trio.run(_survey, spec, topics_regex, timeout_s, dict(options or {}))
    report = LagReport(spec.name, spec.mode, spec.source_bootstrap, spec.target_bootstrap, window_s)
    say(f"lag of mirror {spec.name}: {len(survey.pairs)} topic(s) at both sides"
        + (f", heartbeats in {survey.heartbeats}" if survey.heartbeats else ""))
    parts = [df for df in (_record_latencies(spark, spec, survey), _heartbeat_latencies(spark, spec, survey))
             if df is not None]
    report.notes.extend(_untimed_notes(spark, spec, survey))
    if not parts:
        report.notes.append("no copies with an append time to measure")
        return report
    lat = parts[0] if len(parts) == 1 else parts[0].unionByName(parts[1])
    lat = lat.cache()
    try:
        with stage_progress(spark, say, f"lag of mirror {spec.name}"):
            for r in _summary(lat, ["kind", "topic", "partition", "target_topic"]):
                report.partitions[(r.kind, r.topic, int(r.partition), r.target_topic)] = _stats(r)
            for r in _summary(lat, ["kind"]):
                report.overall[r.kind] = _stats(r)
            window_ms = window_s * 1000
            start = (F.floor(F.col("ts") / window_ms) * window_ms).cast("long").alias("window")
            for r in sorted(_summary(lat, ["kind", start]), key=lambda r: (r.kind, r.window)):
                report.windows.setdefault(r.kind, []).append((int(r.window), _stats(r)))
    finally:
        lat.unpersist()
    return report


# -- the chart -------------------------------------------------------------------------------------

_W, _H, _L, _R, _T, _B = 900, 420, 70, 170, 30, 50
_COLOURS = {("records", "p50"): "#1f77b4", ("records", "p99"): "#ff7f0e", ("records", "max"): "#d62728",
            ("heartbeats", "p50"): "#2ca02c", ("heartbeats", "p99"): "#9467bd", ("heartbeats", "max"): "#8c564b"}


def render_svg(report: LagReport) -> str:
    """p50, p99 and max per window as lines over time (one set per kind), as an SVG document."""
    series = {(kind, q): [(w, getattr(s, q)) for w, s in windows]
              for kind, windows in report.windows.items() for q in ("p50", "p99", "max")}
    points = [p for values in series.values() for p in values]
    x0 = min((w for w, _ in points), default=0)
    x1 = max((w for w, _ in points), default=0) + report.window_s * 1000
    y1 = max((v for _, v in points), default=0.0) or 1.0
    pw, ph = _W - _L - _R, _H - _T - _B

    def x(ms: float) -> float:
        return _L + (ms - x0) / max(1, x1 - x0) * pw

    def y(v: float) -> float:
        return _T + ph - v / y1 * ph

    half = report.window_s * 500  # a window's point at its middle
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" font-family="sans-serif" '
           f'font-size="12">',
           f'<rect width="{_W}" height="{_H}" fill="white"/>',
           f'<text x="{_L}" y="18" font-size="14">{escape(f"replication latency of mirror {report.mirror}")} '
           f'(ms, per {report.window_s} s window of source time)</text>',
           f'<line x1="{_L}" y1="{_T + ph}" x2="{_L + pw}" y2="{_T + ph}" stroke="black"/>',
           f'<line x1="{_L}" y1="{_T}" x2="{_L}" y2="{_T + ph}" stroke="black"/>']
    for i in range(5):
        v = y1 * i / 4
        out.append(f'<text x="{_L - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.0f}</text>')
        out.append(f'<line x1="{_L}" y1="{y(v):.1f}" x2="{_L + pw}" y2="{y(v):.1f}" stroke="#ddd"/>')
    for i in range(3):
        ms = x0 + (x1 - x0) * i / 2
        out.append(f'<text x="{x(ms):.1f}" y="{_T + ph + 18}" text-anchor="middle">{_utc(int(ms))}</text>')
    for n, ((kind, q), values) in enumerate(sorted(series.items())):
        colour = _COLOURS.get((kind, q), "black")
        coords = " ".join(f"{x(w + half):.1f},{y(v):.1f}" for w, v in values)
        out.append(f'<polyline class="series" data-kind="{kind}" data-q="{q}" fill="none" stroke="{colour}" '
                   f'stroke-width="1.5" points="{coords}"/>')
        for w, v in values:
            out.append(f'<circle cx="{x(w + half):.1f}" cy="{y(v):.1f}" r="2" fill="{colour}"/>')
        out.append(f'<text x="{_L + pw + 12}" y="{_T + 14 + 16 * n}" fill="{colour}">{kind} {q}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
