"""`causeway pipeline audit`: did a mirror copy everything, once, in order, unchanged?

Both sides of a mirror are read with the `causeway` data source, each record reduced to its
identity: a 128-bit content hash of key, value, timestamp and headers (two xxhash64 chains with
different seeds; null and empty are told apart). The comparison runs in Spark (aggregations and
joins on the hashes, one window per partition), and only per-partition counts and offset ranges
come back to the driver.

How source and target records are paired, per partition (the target's partition p holds the
source's partition p, in both modes):

1. By identity: the n-th source record with a given hash pairs with the n-th target record with
   that hash (both in offset order). A pair is a record copied. A target record whose hash the
   source has fewer times is a *duplicate* (what a mirror restart writes again); a source record
   left over is not in the target.
2. By position: a source record left over is paired with a target record left over (a hash the
   source does not have) at the offset it should have landed: the same offset in a link-mode
   mirror (offsets equal), and in an mm2 mirror the source offset plus the offset difference of
   the nearest copied record before it (after it, else the newest offset sync). Such a pair is a
   *content mismatch*; the source records still left over are *missing*, the target's *extra*.
3. Order: a copied record whose target offset is below that of a record before it in the source
   (or above one after it) is *reordered*. In link mode a copied record at another offset than
   its source offset is *shifted* (consumers' offsets would point at other records).

A source record after everything the mirror has copied (the last copied record, the mirror's
stored position in mm2 mode, the target's log end in link mode) is *behind*: the mirror has not
got there yet, which is lag, not loss. In mm2 mode, target records older than every copied one
are *older* when the source's log no longer starts at 0 (the source deleted them by retention).
Neither counts against the copy; everything else does.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from broker.faults import crash_point
from pipeline.identity import with_identity
from pipeline.leftovers import HOST, writer_gone
from pipeline.options import PipelineError, ReadOptions, SecurityProps, parse_read_options, security_options
from pipeline.progress import stage_progress

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["FINDINGS", "AuditReport", "MirrorSpec", "PartitionAudit", "audit", "check_inputs", "check_mirror",
           "write_json", "write_parquet"]

# Kinds counted against the copy (exit 1), then those only reported.
FINDINGS = ("missing", "extra", "duplicated", "reordered", "mismatched", "shifted")
NOTED = ("behind", "older")
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class MirrorSpec:
    """What the audit needs to know about a mirror: its two clusters, its mode and naming."""

    source_bootstrap: str
    target_bootstrap: str
    mode: str = "mm2"  # "mm2" | "link"
    source_alias: str = "source"
    target_alias: str | None = None  # names the offset-syncs topic on the source
    identity: bool = False  # naming: identity keeps topic names (link mode always does)
    separator: str = "."
    include: tuple[str, ...] = (".*",)
    exclude: tuple[str, ...] = ()
    offset_syncs_location: str = "source"
    name: str = ""
    # How to log in to each cluster when a topology secures it (the kafka.* security options
    # without their prefix, from the client file `causeway up` wrote); none: plaintext.
    source_security: SecurityProps = field(default=(), repr=False)
    target_security: SecurityProps = field(default=(), repr=False)

    def options_for(self, role: str, options: Mapping[str, str] | None = None) -> dict[str, str]:
        """The read options for the cluster of `role` (source or target): its login
        (`source_security` or `target_security`, as kafka.* options) under `options`, whose
        keys win (Spark's option names are case-insensitive)."""
        given = {key.lower() for key in options or {}}
        login = self.source_security if role == "source" else self.target_security
        return {**{f"kafka.{k}": v for k, v in login if f"kafka.{k}" not in given}, **(options or {})}

    def security(self, role: str, options: Mapping[str, str] | None = None) -> SecurityProps:
        """The security of the clients a job opens itself at the cluster of `role`: that of
        its reads (`options_for`). Raises PipelineError naming an option the client cannot use."""
        return security_options(self.options_for(role, options))

    def remote(self, topic: str) -> str:
        if self.mode == "link" or self.identity:
            return topic
        return f"{self.source_alias}{self.separator}{topic}"

    def topic_filter(self, topics_regex: str | None = None) -> Callable[[str], bool]:
        """Whether a source topic is one this mirror copies (and `topics_regex`, a whole-name
        regex, narrows to): the mirror's include and exclude patterns, less internal topics,
        topics that came from the target (a cycle, mm2) and the mirror's own heartbeats
        (unless named by `topics_regex`)."""
        from mirror.config import INTERNAL_TOPICS
        from mirror.naming import ReplicationPolicy

        policy = ReplicationPolicy(identity=self.identity, separator=self.separator)
        narrow = re.compile(topics_regex) if topics_regex else None

        def wanted(topic: str) -> bool:
            if policy.is_internal(topic) or any(re.fullmatch(p, topic) for p in (*self.exclude, *INTERNAL_TOPICS)):
                return False
            if self.mode == "mm2" and self.target_alias and policy.is_cycle(topic, self.target_alias):
                return False
            if policy.is_heartbeats(topic) and narrow is None:
                return False  # the mirror's own beacons: audited only when asked for by name
            if narrow is not None and not narrow.fullmatch(topic):
                return False
            return any(re.fullmatch(p, topic) for p in self.include)

        return wanted


@dataclass(slots=True)
class PartitionAudit:
    topic: str
    partition: int
    target_topic: str
    source_records: int = 0
    target_records: int = 0
    copied: int = 0
    counts: dict[str, int] = field(default_factory=dict)  # kind -> records
    # kind -> [(first, last, records)]: source offsets, but target offsets for extra,
    # duplicated and older; a mismatch also carries the target offsets [(.., .., .., t_first, t_last)]
    ranges: dict[str, list[list[int]]] = field(default_factory=dict)
    source_log: tuple[int, int] = (0, 0)  # [start, end) when read
    target_log: tuple[int, int] = (0, 0)

    @property
    def clean(self) -> bool:
        return not any(self.counts.get(kind, 0) for kind in FINDINGS)

    def count(self, kind: str) -> int:
        return self.counts.get(kind, 0)


@dataclass(slots=True)
class AuditReport:
    mirror: str
    mode: str
    source: str
    target: str
    started_ms: int
    partitions: list[PartitionAudit]
    notes: list[str] = field(default_factory=list)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])

    @property
    def clean(self) -> bool:
        return all(p.clean for p in self.partitions)

    def total(self, kind: str) -> int:
        return sum(p.count(kind) for p in self.partitions)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["clean"] = self.clean
        for p in out["partitions"]:
            p["clean"] = not any(p["counts"].get(k, 0) for k in FINDINGS)
        return out

    def findings(self) -> list[str]:
        """One line per kind per partition, naming the offsets."""
        lines = []
        for p in self.partitions:
            where = f"{p.topic}-{p.partition} -> {p.target_topic}-{p.partition}"
            for kind in (*FINDINGS, *NOTED):
                n = p.count(kind)
                if not n:
                    continue
                side = "target" if kind in ("extra", "duplicated", "older") else "source"
                spans = []
                for r in p.ranges.get(kind, []):
                    span = f"{r[0]}" if r[0] == r[1] else f"{r[0]}-{r[1]}"
                    if kind == "mismatched":
                        span += f" (target {r[3]}" + ("" if r[3] == r[4] else f"-{r[4]}") + ")"
                    spans.append(span)
                shown = len(p.ranges.get(kind, []))
                more = "" if shown >= p.counts.get(f"{kind}_ranges", shown) else ", ..."
                lines.append(f"{where}: {kind} {n} record(s) at {side} offsets {', '.join(spans)}{more}")
        return lines

    def table(self) -> str:
        head = ("TOPIC", "PARTITION", "TARGET", "SOURCE", "TARGET-RECS", "COPIED", "MISSING", "EXTRA",
                "DUPLICATED", "REORDERED", "MISMATCHED", "SHIFTED", "BEHIND", "STATE")
        rows: list[tuple[object, ...]] = [head]
        for p in self.partitions:
            rows.append((p.topic, p.partition, p.target_topic, p.source_records, p.target_records, p.copied,
                         p.count("missing"), p.count("extra"), p.count("duplicated"), p.count("reordered"),
                         p.count("mismatched"), p.count("shifted"), p.count("behind"),
                         "clean" if p.clean else "NOT CLEAN"))
        widths = [max(len(str(r[i])) for r in rows) for i in range(len(head))]
        return "\n".join("  ".join(str(v).ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows)


# -- the driver's look at both clusters -----------------------------------------------------


@dataclass(slots=True)
class _Side:
    logs: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)  # (topic, p) -> [start, end)


@dataclass(slots=True)
class _Survey:
    topics: list[str]
    source: _Side
    target: _Side
    absent: list[str]  # remote topics the target does not have
    positions: dict[tuple[str, int], int]  # mm2: last upstream offset the mirror says it wrote
    syncs: dict[tuple[str, int], tuple[int, int]]  # newest (upstream, downstream) per partition
    notes: list[str]


async def _survey(spec: MirrorSpec, topics_regex: str | None, timeout_s: float,
                  options: Mapping[str, str]) -> _Survey:
    import trio

    from broker.client import TopicPartition, admin
    from broker.protocol.constants import EARLIEST, LATEST
    from mirror.formats import OffsetSync, fold_positions
    from mirror.naming import ReplicationPolicy
    from mirror.topics import read_whole_topic
    from pipeline.clients import open_job_client
    from pipeline.planning import job_error

    async def logs(client: Any, names: Mapping[str, int]) -> dict[tuple[str, int], tuple[int, int]]:
        tps = [TopicPartition(t, p) for t, n in names.items() for p in range(n)]
        if not tps:
            return {}
        starts = await admin.list_offsets(client, {tp: EARLIEST for tp in tps})
        ends = await admin.list_offsets(client, {tp: LATEST for tp in tps})
        return {(tp.topic, tp.partition): (starts[tp].offset, ends[tp].offset) for tp in tps}

    async def asking(bootstrap: str, call: Awaitable[_T]) -> _T:
        """`call`'s answer from the cluster `bootstrap`; its failure names that cluster."""
        try:
            return await call
        except Exception as exc:  # noqa: BLE001 - a cluster's failure becomes a PipelineError naming it
            raise job_error(bootstrap, exc) from None

    wanted = spec.topic_filter(topics_regex)
    notes: list[str] = []
    policy = ReplicationPolicy(identity=spec.identity, separator=spec.separator)
    source_at, target_at = spec.source_bootstrap, spec.target_bootstrap
    async with open_job_client(source_at, spec.security("source", options), client_id="causeway-audit",
                               request_timeout_s=timeout_s) as src, \
            open_job_client(target_at, spec.security("target", options), client_id="causeway-audit",
                            request_timeout_s=timeout_s) as tgt:
        with trio.fail_after(timeout_s * 4):
            source_topics = {t: n for t, n in (await asking(source_at, admin.list_topics(src))).items() if wanted(t)}
            target_topics = await asking(target_at, admin.list_topics(tgt))
            topics = sorted(source_topics)
            present = {spec.remote(t): target_topics[spec.remote(t)] for t in topics if spec.remote(t) in target_topics}
            absent = [spec.remote(t) for t in topics if spec.remote(t) not in target_topics]
            source = _Side(await asking(source_at, logs(src, source_topics)))
            raw_target = await asking(target_at, logs(tgt, present))
            back = {spec.remote(t): t for t in topics}
            target = _Side({(back[t], p): span for (t, p), span in raw_target.items()})
            positions: dict[tuple[str, int], int] = {}
            syncs: dict[tuple[str, int], tuple[int, int]] = {}
            if spec.mode == "mm2":
                # committed_only: an exactly-once mirror's aborted positions are not positions.
                positions = fold_positions(await asking(target_at, read_whole_topic(
                    tgt, policy.positions_topic(spec.source_alias), committed_only=True)), spec.source_alias)
                other = spec.target_alias if spec.offset_syncs_location == "source" else spec.source_alias
                if other is None:
                    notes.append("offset syncs not read: the target's alias is not known (--target-alias)")
                else:
                    holder, at = (src, source_at) if spec.offset_syncs_location == "source" else (tgt, target_at)
                    for record in await asking(at, read_whole_topic(holder, policy.offset_syncs_topic(other))):
                        if record.key is None or record.value is None:
                            continue
                        try:
                            sync = OffsetSync.decode(record.key, record.value)
                        except Exception:  # noqa: BLE001 - a foreign record in the topic is skipped, as the mirror does
                            continue
                        syncs[(sync.topic, sync.partition)] = (sync.upstream_offset, sync.downstream_offset)
    for name in absent:
        notes.append(f"target topic {name} does not exist: every record of its source is missing or behind")
    return _Survey(topics, source, target, absent, positions, syncs, notes)


# -- the comparison, in Spark ------------------------------------------------------------------


def read_pinned(spark: SparkSession, bootstrap: str, logs: Mapping[tuple[str, int], tuple[int, int]],
                options: Mapping[str, str] | None = None) -> DataFrame | None:
    """The records of `logs` ((topic, partition) -> [start, end)) with headers, offsets pinned in
    the plan; None when every range is empty. Shared by the audit and the lag job."""
    spans = {k: v for k, v in logs.items() if v[1] > v[0]}
    if not spans:
        return None
    assign: dict[str, list[int]] = {}
    start: dict[str, dict[str, int]] = {}
    end: dict[str, dict[str, int]] = {}
    for (topic, partition), (lo, hi) in sorted(spans.items()):
        assign.setdefault(topic, []).append(partition)
        start.setdefault(topic, {})[str(partition)] = lo
        end.setdefault(topic, {})[str(partition)] = hi
    # Offsets pinned here, so the plan is the same however often Spark evaluates it.
    return (spark.read.format("causeway").options(**(options or {}))
            .option("kafka.bootstrap.servers", bootstrap).option("includeHeaders", "true")
            .option("assign", json.dumps(assign)).option("startingOffsets", json.dumps(start))
            .option("endingOffsets", json.dumps(end)).load())


def _pairs(spark: SparkSession, spec: MirrorSpec, survey: _Survey, options: Mapping[str, str]) -> DataFrame:
    """(topic, partition, cs, s, t): identity pairs; s or t null where one side has no partner;
    cs is how many source records have that hash."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    keys = ["topic", "partition", "h1", "h2"]
    schema = StructType([StructField("topic", StringType()), StructField("partition", IntegerType()),
                         StructField("offset", LongType()), StructField("h1", LongType()),
                         StructField("h2", LongType())])
    empty = spark.createDataFrame([], schema)
    src = read_pinned(spark, spec.source_bootstrap, survey.source.logs, spec.options_for("source", options))
    src_h = with_identity(src) if src is not None else empty
    remote_logs = {(spec.remote(t), p): span for (t, p), span in survey.target.logs.items()}
    tgt = read_pinned(spark, spec.target_bootstrap, remote_logs, spec.options_for("target", options))
    if tgt is not None:
        back = F.create_map(*[F.lit(x) for t in survey.topics for x in (spec.remote(t), t)])
        tgt_h = with_identity(tgt).withColumn("topic", F.element_at(back, F.col("topic")))
    else:
        tgt_h = empty
    s = src_h.groupBy(*keys).agg(F.array_sort(F.collect_list("offset")).alias("so"))
    t = tgt_h.groupBy(*keys).agg(F.array_sort(F.collect_list("offset")).alias("to"))
    none = F.array().cast("array<bigint>")
    joined = s.join(t, keys, "full_outer").select(
        "topic", "partition", F.coalesce("so", none).alias("so"), F.coalesce("to", none).alias("to"))
    return joined.select(
        "topic", "partition", F.size("so").alias("cs"),
        F.explode(F.zip_with("so", "to", lambda a, b: F.struct(a.alias("s"), b.alias("t")))).alias("p"),
    ).select("topic", "partition", "cs", F.col("p.s").alias("s"), F.col("p.t").alias("t"))


def _classify(spec: MirrorSpec, pairs: DataFrame, bounds: DataFrame, cached: list[DataFrame]) -> DataFrame:
    """(kind, topic, partition, offset, other): one row per record found wanting, or behind.
    DataFrames it caches are added to `cached`, for the caller to unpersist."""
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    link = spec.mode == "link"
    tp = ["topic", "partition"]
    matched = F.col("s").isNotNull() & F.col("t").isNotNull()
    # Only growing frames (unbounded preceding): Spark recomputes a frame that reaches to the
    # unbounded following for every row (quadratic), so "after" is "before" in reverse order.
    forward = Window.partitionBy(*tp).orderBy("s")
    backward = Window.partitionBy(*tp).orderBy(F.col("s").desc())
    delta = F.when(matched, F.col("t") - F.col("s"))
    by_source = (pairs.where(F.col("s").isNotNull()).join(F.broadcast(bounds), tp, "left").select(
        *tp, "s", "t", "through", "sync_delta",
        F.last(delta, ignorenulls=True).over(forward.rowsBetween(Window.unboundedPreceding, 0)).alias("prev_d"),
        F.max("t").over(forward.rowsBetween(Window.unboundedPreceding, -1)).alias("max_before"),
        F.last(delta, ignorenulls=True).over(backward.rowsBetween(Window.unboundedPreceding, 0)).alias("next_d"),
        F.min("t").over(backward.rowsBetween(Window.unboundedPreceding, -1)).alias("min_after"),
    ))
    # The window sorts every source record; only the few rows found wanting are kept (and
    # cached), so the branches below do not sort again.
    out_of_order = F.col("t").isNotNull() & ((F.col("t") < F.col("max_before")) | (F.col("t") > F.col("min_after")))
    moved = F.col("t").isNotNull() & (F.col("t") != F.col("s")) & F.lit(link)
    flagged = by_source.select("*", F.coalesce(out_of_order, F.lit(False)).alias("is_reordered"),
                               F.coalesce(moved, F.lit(False)).alias("is_shifted")).where(
        F.col("t").isNull() | F.col("is_reordered") | F.col("is_shifted")).persist(StorageLevel.MEMORY_AND_DISK)
    cached.append(flagged)
    reordered = flagged.where("is_reordered")
    shifted = flagged.where("is_shifted") if link else None
    lacking = flagged.where(F.col("t").isNull())
    behind = lacking.where(F.col("s") > F.col("through"))
    expected = F.col("s") if link else F.col("s") + F.coalesce("prev_d", "next_d", "sync_delta", F.lit(0))
    candidates = lacking.where(F.col("s") <= F.col("through")).select(*tp, "s", expected.alias("et"))
    target_only = pairs.where(F.col("s").isNull())
    duplicated = target_only.where(F.col("cs") > 0)
    extras = target_only.where(F.col("cs") == 0).select(*tp, F.col("t").alias("et"))
    # One source record per target record (two could expect the same offset): the first.
    paired = candidates.join(extras, [*tp, "et"], "inner").groupBy(*tp, "et").agg(F.min("s").alias("s"))
    missing = candidates.join(paired.select(*tp, "s"), [*tp, "s"], "left_anti")
    unpaired = extras.join(paired.select(*tp, "et"), [*tp, "et"], "left_anti").join(F.broadcast(bounds), tp, "left")
    # Null-safe: a target partition the source lacks has no bounds, and its records are extra.
    older_cond = F.coalesce(F.lit(not link) & (F.col("source_start") > 0) & F.col("min_copied_t").isNotNull()
                            & (F.col("et") < F.col("min_copied_t")), F.lit(False))

    def rows(kind: str, df: DataFrame, offset: str, other: str | None = None) -> DataFrame:
        return df.select(F.lit(kind).alias("kind"), *tp, F.col(offset).alias("offset"),
                         (F.col(other) if other else F.lit(None).cast("bigint")).alias("other"))

    parts = [rows("missing", missing, "s"), rows("mismatched", paired, "s", "et"),
             rows("extra", unpaired.where(~older_cond), "et"), rows("older", unpaired.where(older_cond), "et"),
             rows("duplicated", duplicated, "t"), rows("reordered", reordered, "s", "t"),
             rows("behind", behind, "s")]
    if shifted is not None:
        parts.append(rows("shifted", shifted, "s", "t"))
    out = parts[0]
    for part in parts[1:]:
        out = out.unionByName(part)
    return out


def _ranges(found: DataFrame, max_ranges: int) -> list[Any]:
    """Runs of consecutive offsets per kind and partition: the first `max_ranges` of each, with
    the kind's record count and number of runs."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    key = ["kind", "topic", "partition"]
    islands = found.withColumn("grp", F.col("offset") - F.row_number().over(Window.partitionBy(*key).orderBy("offset")))
    runs = islands.groupBy(*key, "grp").agg(F.min("offset").alias("first"), F.max("offset").alias("last"),
                                            F.count("*").alias("n"), F.min("other").alias("ofirst"),
                                            F.max("other").alias("olast"))
    w = Window.partitionBy(*key)
    ranked = runs.select(*key, "first", "last", "n", "ofirst", "olast",
                         F.row_number().over(w.orderBy("first")).alias("rank"),
                         F.sum("n").over(w).alias("total"), F.count("*").over(w).alias("runs"))
    # Sorted here, not by Spark: an orderBy would cost a sampling job for a few hundred rows.
    return sorted(ranked.where(F.col("rank") <= max_ranges).collect(),
                  key=lambda r: (r.kind, r.topic, r.partition, r.first))


def check_inputs(spec: MirrorSpec, topics_regex: str | None = None,
                 options: Mapping[str, str] | None = None) -> ReadOptions:
    """The topic pattern, the mode and the read options of an audit (or a lag report), each
    cluster's with its login, checked without a cluster: a bad one is named now; the source's
    are returned. Raises PipelineError."""
    if topics_regex is not None:
        try:
            re.compile(topics_regex)
        except re.error as exc:
            raise PipelineError(f"--topics: bad regular expression {topics_regex!r}: {exc}") from None
    if spec.mode not in ("mm2", "link"):
        raise PipelineError(f"mode must be mm2 or link, got {spec.mode!r}")
    # The options as a read takes them (the offsets are the audit's own).
    checked = {role: parse_read_options({**spec.options_for(role, options), "kafka.bootstrap.servers": bootstrap,
                                         "assign": '{"t":[0]}'})
               for role, bootstrap in (("source", spec.source_bootstrap), ("target", spec.target_bootstrap))}
    return checked["source"]


def check_mirror(spec: MirrorSpec, topics_regex: str | None = None, options: Mapping[str, str] | None = None) -> None:
    """What an audit or a lag report checks before Spark starts: `check_inputs`, then both
    clusters within seconds. Raises PipelineError naming what is wrong."""
    from pipeline.planning import check_cluster

    check_inputs(spec, topics_regex, options)
    check_cluster(spec.source_bootstrap, security=spec.security("source", options))
    check_cluster(spec.target_bootstrap, security=spec.security("target", options))


def audit(spark: SparkSession, spec: MirrorSpec, *, topics_regex: str | None = None, max_ranges: int = 20,
          options: Mapping[str, str] | None = None, request_timeout_s: float | None = None,
          say: Callable[[str], None] | None = None) -> AuditReport:
    """Compare the mirror's source and target topics, partition by partition.

    `options` are read options of the data source for both sides' reads (kafka.*; each
    cluster's login in `spec` applies under them), checked first; the audit's own clients log in
    with the same security options; kafka.request.timeout.ms (default 30000) also bounds the look at both clusters,
    unless `request_timeout_s` is given.

    Raises PipelineError for an unreachable cluster, a bad option or a bad topic pattern;
    everything the clusters hold is reported, never raised.
    """
    import trio
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from pipeline.planning import job_error

    checked = check_inputs(spec, topics_regex, options)
    opts = dict(options or {})
    if request_timeout_s is None:
        request_timeout_s = checked.request_timeout_s
    say = say or (lambda _line: None)
    started = int(time.time() * 1000)
    try:
        survey = trio.run(_survey, spec, topics_regex, request_timeout_s, opts)
    except BaseException as exc:
        failed = job_error(spec.source_bootstrap, exc)
        if isinstance(failed, PipelineError) and spec.target_bootstrap not in str(failed):
            failed = PipelineError(f"{failed} (source {spec.source_bootstrap}, target {spec.target_bootstrap})")
        raise failed from None
    name = spec.name or f"{spec.source_alias}->{spec.target_alias or 'target'}"
    report = AuditReport(name, spec.mode, spec.source_bootstrap, spec.target_bootstrap, started, [], survey.notes)
    if not survey.topics:
        report.notes.append("no source topic matches the mirror's topics" + (f" and {topics_regex!r}"
                                                                              if topics_regex else ""))
        return report
    planned_s = sum(e - s for s, e in survey.source.logs.values())
    planned_t = sum(e - s for s, e in survey.target.logs.values())
    say(f"audit {name}: {len(survey.topics)} topic(s), {len(survey.source.logs)} partition(s); "
        f"{planned_s} source and {planned_t} target offsets to compare")
    pairs = _pairs(spark, spec, survey, opts).persist(StorageLevel.MEMORY_AND_DISK)
    cached = [pairs]
    try:
        with stage_progress(spark, say, f"audit {name}"):
            matched = F.col("s").isNotNull() & F.col("t").isNotNull()
            stats = {(r.topic, r.partition): r for r in pairs.groupBy("topic", "partition").agg(
                F.count("s").alias("source_records"), F.count("t").alias("target_records"),
                F.sum(matched.cast("long")).alias("copied"), F.max(F.when(matched, F.col("s"))).alias("max_copied_s"),
                F.min(F.when(matched, F.col("t"))).alias("min_copied_t")).collect()}
            say(f"audit {name}: {sum(r.source_records for r in stats.values())} source records read, "
                f"{sum(r.target_records for r in stats.values())} target records read")
            bound_rows = []
            for key, (s_start, _end) in survey.source.logs.items():
                r = stats.get(key)
                through = r.max_copied_s if r is not None and r.max_copied_s is not None else -1
                if spec.mode == "link":
                    through = max(through, survey.target.logs.get(key, (0, 0))[1] - 1)
                else:
                    through = max(through, survey.positions.get(key, -1))
                sync = survey.syncs.get(key)
                bound_rows.append((key[0], key[1], through, sync[1] - sync[0] if sync else None, s_start,
                                   r.min_copied_t if r is not None else None))
            bounds = spark.createDataFrame(bound_rows, "topic string, partition int, through long, sync_delta long, "
                                                       "source_start long, min_copied_t long")
            found = _ranges(_classify(spec, pairs, bounds, cached), max_ranges)
    finally:
        for df in cached:
            df.unpersist()
    by_key: dict[tuple[str, int], PartitionAudit] = {}
    for (topic, partition), (s_start, s_end) in sorted(survey.source.logs.items()):
        r = stats.get((topic, partition))
        by_key[(topic, partition)] = PartitionAudit(
            topic, partition, spec.remote(topic),
            source_records=r.source_records if r else 0, target_records=r.target_records if r else 0,
            copied=int(r.copied or 0) if r else 0, source_log=(s_start, s_end),
            target_log=survey.target.logs.get((topic, partition), (0, 0)))
    for row in found:
        p = by_key.get((row.topic, row.partition))
        if p is None:  # a target partition the source does not have
            got = stats.get((row.topic, row.partition))
            p = by_key[(row.topic, row.partition)] = PartitionAudit(
                row.topic, row.partition, spec.remote(row.topic), target_records=got.target_records if got else 0,
                target_log=survey.target.logs.get((row.topic, row.partition), (0, 0)))
        p.counts[row.kind] = int(row.total)
        p.counts[f"{row.kind}_ranges"] = int(row.runs)
        span = [int(row.first), int(row.last), int(row.n)]
        if row.kind == "mismatched":
            span += [int(row.ofirst), int(row.olast)]
        p.ranges.setdefault(row.kind, []).append(span)
    report.partitions = [by_key[k] for k in sorted(by_key)]
    return report


def _counted(report: AuditReport) -> Iterable[dict[str, Any]]:
    for p in report.partitions:
        row: dict[str, Any] = {
            "run_id": report.run_id, "audited_at_ms": report.started_ms, "mirror": report.mirror,
            "mode": report.mode, "source": report.source, "target": report.target, "topic": p.topic,
            "partition": p.partition, "target_topic": p.target_topic, "source_records": p.source_records,
            "target_records": p.target_records, "copied": p.copied, "clean": p.clean,
            "source_log_start": p.source_log[0], "source_log_end": p.source_log[1],
            "target_log_start": p.target_log[0], "target_log_end": p.target_log[1],
        }
        for kind in (*FINDINGS, *NOTED):
            row[kind] = p.count(kind)
        row["ranges"] = json.dumps(p.ranges, sort_keys=True)
        yield row


def _replace_durably(tmp: Path, final: Path) -> None:
    """`tmp` (complete) renamed to `final`, both on disk first: a process killed, or a machine
    that loses power, leaves the old `final` or the new one, never a torn one."""
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    crash_point("pipeline-audit-before-rename")
    os.replace(tmp, final)
    fd = os.open(final.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json(report: AuditReport, path: Path, say: Callable[[str], None] | None = None) -> None:
    """The whole report as JSON, written to a hidden temporary name and renamed: never half a file.
    Such names beside `path` that killed runs left are removed first, saying so (stderr by default)."""
    tmp = path.with_name(f".{path.name}.{HOST}.{os.getpid()}.tmp")
    stray = re.compile(re.escape(f".{path.name}.") + _WRITER + r"\.tmp")
    remove_strays(path.parent, stray, f"audit JSON {path}", say or _say_on_stderr)
    tmp.write_text(json.dumps(report.to_dict(), indent=2) + "\n")
    _replace_durably(tmp, path)


# A file being written names its writer: `<name>.<host>.<pid>.tmp` (older runs: without the host).
_WRITER = r"(?:(?P<host>[A-Za-z0-9-]+)\.)?(?P<pid>\d+)"
HISTORY_TMP = re.compile(r"_audit-\d+-[0-9a-f]+\.parquet\." + _WRITER + r"\.tmp")


def remove_strays(directory: Path, pattern: re.Pattern[str], what: str, say: Callable[[str], None]) -> None:
    """Remove the files matching `pattern` that runs killed while writing them left (their
    process gone: see pipeline.leftovers), saying so in one line; a running audit's are left alone."""
    if not directory.is_dir():
        return
    removed = []
    for path in sorted(directory.iterdir()):
        found = pattern.fullmatch(path.name)
        if found is None:
            continue
        try:
            gone = writer_gone(int(found["pid"]), found["host"], path.stat().st_mtime)
            if gone:
                path.unlink()
        except FileNotFoundError:
            continue  # its own run renamed or removed it meanwhile
        if gone:
            removed.append(path.name)
    if removed:
        say(f"{what}: removed {len(removed)} unfinished file(s) that killed runs left: "
            + ", ".join(removed))


def _say_on_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def write_parquet(report: AuditReport, directory: Path, say: Callable[[str], None] = _say_on_stderr) -> Path:
    """One Parquet file per run under `directory` (one row per partition): the audit's history,
    readable as one table with `spark.read.parquet(directory)`. Written under a `_` name (which
    Spark and pyarrow skip) and renamed into place. What audits killed while writing left there
    is removed first, saying so through `say` (stderr by default)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory.mkdir(parents=True, exist_ok=True)
    remove_strays(directory, HISTORY_TMP, f"audit history {directory}", say)
    rows = list(_counted(report))
    schema = pa.schema([
        ("run_id", pa.string()), ("audited_at_ms", pa.int64()), ("mirror", pa.string()), ("mode", pa.string()),
        ("source", pa.string()), ("target", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
        ("target_topic", pa.string()), ("source_records", pa.int64()), ("target_records", pa.int64()),
        ("copied", pa.int64()), ("clean", pa.bool_()), ("source_log_start", pa.int64()),
        ("source_log_end", pa.int64()), ("target_log_start", pa.int64()), ("target_log_end", pa.int64()),
        *[(kind, pa.int64()) for kind in (*FINDINGS, *NOTED)], ("ranges", pa.string()),
    ])
    table = pa.Table.from_pylist(rows, schema=schema)
    final = directory / f"audit-{report.started_ms}-{report.run_id}.parquet"
    tmp = directory / f"_{final.name}.{HOST}.{os.getpid()}.tmp"
    pq.write_table(table, tmp)
    _replace_durably(tmp, final)
    return final
