"""Copy a range of a topic from one cluster to another through Spark (a bulk backfill).

Partition p of the source goes to partition p of the target, in offset order, with each record's
key, value, headers and timestamp as they are at the source. The target topic is created, when
missing, with the source's partition count and the source topic's own config overrides (the
target cluster's default replication factor); a target with fewer partitions is refused.

The range is read in steps of at most `step_records` offsets per partition, each one Spark job.
A step's Spark tasks are the source partitions' ranges, never split (no minPartitions), so one
task writes one partition from first record to last, with an idempotent producer and one batch
in flight: retried sends are not written twice and order holds within each partition. A task
Spark retries skips what its failed attempt wrote (the target's log end moved past where the
step began by exactly that prefix), so task retries do not duplicate either.

A rerun is refused when the target already holds records of the range: before copying into
partitions that are not empty, the range and the target are compared in Spark by record identity
(key, value, timestamp, headers, as the audit compares them), and a copy that would write any
record a second time fails naming how many, per partition, unless `allow_duplicates` is given.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

import pyarrow as pa
import trio
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType
from pyspark.sql.window import Window

from broker.client import KafkaError, TopicPartition, admin, init_idempotent_producer
from broker.client.admin import NewTopic
from broker.client.batching import size_batches
from broker.faults import crash_point
from broker.progress import rate_and_eta
from broker.protocol.constants import EARLIEST, LATEST
from broker.protocol.errors import ErrorCode
from broker.protocol.records import Record
from mirror.config import EXCLUDED_CONFIGS
from pipeline.clients import open_job_client
from pipeline.identity import with_identity
from pipeline.options import PipelineError, ReadOptions, SecurityProps, parse_read_options, security_options
from pipeline.planning import OffsetRange, Plan, check_cluster, job_error, plan_read
from pipeline.progress import stage_progress
from pipeline.source import FORMAT
from pipeline.spark import writing_to

__all__ = ["CopyResult", "CopySink", "DuplicateCopy", "check_copy", "copy"]

DEFAULT_STEP_RECORDS = 1_000_000
_T = TypeVar("_T")
_SINK = "causeway-copy"
_BATCH_BYTES = 512 * 1024
# Topic configs a copy does not carry over, as MirrorMaker 2 leaves them (they describe the
# source cluster, not the data). Above all message.timestamp.type: a LogAppendTime target would
# re-stamp every copy, and the timestamp bounds would refuse old records the source took in time.
_NOT_COPIED = EXCLUDED_CONFIGS | {"message.format.version"}


class DuplicateCopy(PipelineError):
    """The target already holds records of the range: copying would write them again."""

    def __init__(self, message: str, overlap: Mapping[int, int]) -> None:
        super().__init__(message)
        self.overlap = dict(overlap)


@dataclass(frozen=True, slots=True)
class CopyResult:
    target_topic: str
    planned: int  # offsets in the range (compacted gaps included)
    copied: int  # records written
    steps: int
    created: bool  # the target topic was created by this copy
    ranges: tuple[OffsetRange, ...] = ()
    duplicated: dict[int, int] = field(default_factory=dict)  # records written again (allow_duplicates)


# -- the target: created or checked ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Target:
    created: bool
    logs: dict[int, tuple[int, int]]  # partition -> (log start, log end) before the copy


async def prepare_target(source: str, target: str, topic: str, target_topic: str, partitions: int,
                         timeout_s: float, security: SecurityProps = ()) -> _Target:
    """The target topic, created like the source's when missing, and its logs; both clusters are
    logged in to with `security` (the copy's kafka.* security options)."""
    created = False
    async with open_job_client(target, security, client_id="causeway-pipeline-copy",
                               request_timeout_s=timeout_s) as client:
        with trio.fail_after(timeout_s * 4):
            try:
                described = await admin.describe_topics(client, [target_topic])
                count = described[target_topic].partition_count
            except KafkaError as exc:
                if exc.code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    raise
                configs = await _source_configs(source, topic, timeout_s, security)
                await admin.create_topics(client, {target_topic: NewTopic(partitions, -1, configs)})
                created, count = True, partitions
            if count < partitions:
                raise PipelineError(f"target topic {target_topic!r} on cluster {target} has {count} partitions, "
                                    f"fewer than the {partitions} of {topic!r} on {source}: partition p is copied "
                                    f"to partition p, so add partitions to the target first")
            tps = [TopicPartition(target_topic, p) for p in range(partitions)]
            starts = await admin.list_offsets(client, {tp: EARLIEST for tp in tps})
            ends = await admin.list_offsets(client, {tp: LATEST for tp in tps})
    return _Target(created, {tp.partition: (starts[tp].offset, ends[tp].offset) for tp in tps})


async def _source_configs(source: str, topic: str, timeout_s: float, security: SecurityProps) -> dict[str, str]:
    """The source topic's own overrides (what `kafka-topics --describe` lists as its configs)."""
    async with open_job_client(source, security, client_id="causeway-pipeline-copy",
                               request_timeout_s=timeout_s) as client:
        entries = await admin.describe_configs(client, topic)
    return {e.name: e.value for e in entries.values()
            if not e.is_default and not e.read_only and not e.is_sensitive and e.value is not None
            and e.name not in _NOT_COPIED}


def _target(source: str, target: str, topic: str, target_topic: str, partitions: int, timeout_s: float,
            security: SecurityProps) -> _Target:
    try:
        return trio.run(prepare_target, source, target, topic, target_topic, partitions, timeout_s, security)
    except BaseException as exc:
        raise job_error(target, exc) from None


# -- reading the range ---------------------------------------------------------------------------


def _read(spark: SparkSession, bootstrap: str, topic: str, ranges: list[OffsetRange],
          options: Mapping[str, str]) -> DataFrame:
    """The ranges as one DataFrame, offsets pinned (the same plan however often it is evaluated)."""
    return (spark.read.format(FORMAT).options(**options)
            .option("kafka.bootstrap.servers", bootstrap).option("includeHeaders", "true")
            .option("assign", json.dumps({topic: [r.partition for r in ranges]}))
            .option("startingOffsets", json.dumps({topic: {str(r.partition): r.start for r in ranges}}))
            .option("endingOffsets", json.dumps({topic: {str(r.partition): r.end for r in ranges}}))
            .load())


@dataclass(frozen=True, slots=True)
class _Overlap:
    held: int  # records of the range the target already holds
    resume: int | None  # the offset after them when they are the range's first records, else None


def _overlap(spark: SparkSession, source: str, target: str, topic: str, target_topic: str,
             ranges: list[OffsetRange], logs: Mapping[int, tuple[int, int]],
             options: Mapping[str, str]) -> dict[int, _Overlap]:
    """Per partition, the records of the source range the target already holds: the n-th source
    record with an identity pairs with the n-th target record with it (so records that repeat at
    the source count only as often as the target repeats them), and whether they are the range's
    first records (what an interrupted copy leaves), so the copy can say where to continue."""
    busy = [r for r in ranges if r.size > 0 and logs[r.partition][1] > logs[r.partition][0]]
    if not busy:
        return {}
    held = [OffsetRange(target_topic, r.partition, *logs[r.partition]) for r in busy]
    rank = Window.partitionBy("partition", "h1", "h2").orderBy("offset")
    src = with_identity(_read(spark, source, topic, busy, options)).withColumn("n", F.row_number().over(rank))
    tgt = (with_identity(_read(spark, target, target_topic, held, options)).withColumn("n", F.row_number().over(rank))
           .select("partition", "h1", "h2", "n", F.lit(True).alias("held")))
    rows = (src.join(tgt, ["partition", "h1", "h2", "n"], "left")
            .groupBy("partition")
            .agg(F.count("held").alias("held"), F.max(F.when(F.col("held"), F.col("offset"))).alias("last_held"),
                 F.min(F.when(F.col("held").isNull(), F.col("offset"))).alias("first_new"))
            .collect())
    return {int(r.partition): _Overlap(int(r.held), int(r.last_held) + 1 if r.first_new is None
                                       or r.first_new > r.last_held else None)
            for r in rows if r.held}


# -- the executor's half: one task writes one partition's range -----------------------------------


async def produce_rows(batches: Iterator[pa.RecordBatch], target: str, topic: str, timeout_s: float,
                      expected: Mapping[int, int], retry: bool, security: SecurityProps = ()) -> int:
    """Produce the rows to `topic`, partition by partition in order; return how many were written.

    `expected` holds each partition's log end when the step began. A retried task (`retry`)
    first skips what its failed attempt wrote: the records past that log end, which are the
    range's first ones since a task writes in order, one batch at a time. (A first attempt
    writes everything: records past the log end then are another writer's.) The producer logs in
    with `security`."""
    written = 0
    skip: dict[int, int] = {}
    async with open_job_client(target, security, client_id="causeway-pipeline-copy",
                               request_timeout_s=timeout_s) as client:
        with trio.fail_after(timeout_s + 1):
            producer = await init_idempotent_producer(client)

        async def already_written(partition: int) -> int:
            if not retry:
                return 0
            tp = TopicPartition(topic, partition)
            with trio.fail_after(timeout_s + 1):
                end = (await admin.list_offsets(client, {tp: LATEST}))[tp].offset
            return max(0, end - expected[partition])

        # Pulling the next batch from Spark blocks this thread briefly; nothing is in flight then:
        # each batch is acknowledged before the next is taken, which is what keeps the order.
        for batch in batches:
            if batch.num_rows == 0:
                continue
            parts = batch.column("partition").to_pylist()
            keys = batch.column("key").to_pylist()
            values = batch.column("value").to_pylist()
            stamps = batch.column("ts").to_pylist()
            headers = batch.column("headers").to_pylist()
            runs: list[tuple[int, list[Record]]] = []
            for i in range(batch.num_rows):
                if parts[i] not in skip:
                    skip[parts[i]] = await already_written(parts[i])
                if skip[parts[i]] > 0:
                    skip[parts[i]] -= 1
                    continue
                hs = () if headers[i] is None else tuple((h["key"], h["value"]) for h in headers[i])
                record = Record(keys[i], values[i], hs, stamps[i])
                if not runs or runs[-1][0] != parts[i]:
                    runs.append((parts[i], []))
                runs[-1][1].append(record)
            for partition, records in runs:
                for chunk in size_batches(records, _BATCH_BYTES):
                    with trio.fail_after(timeout_s + 1):
                        answer = await producer.send(topic, partition, chunk)
                    if answer.error != ErrorCode.NONE:
                        raise PipelineError(f"{topic}-{partition}: produce failed: {ErrorCode(answer.error).name}"
                                            + (f" ({answer.error_message})" if answer.error_message else ""))
                    written += len(chunk)
                    crash_point("pipeline-copy-batch-written")  # an executor killed midway through its range
    return written


class _CopyWriter(DataSourceArrowWriter):
    def __init__(self, target: str, topic: str, timeout_s: float, expected: dict[int, int],
                 security: SecurityProps) -> None:
        self.target, self.topic, self.timeout_s, self.expected = target, topic, timeout_s, expected
        self.security = security

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        from pyspark import TaskContext

        context = TaskContext.get()
        retry = context is not None and context.attemptNumber() > 0
        try:
            trio.run(produce_rows, iterator, self.target, self.topic, self.timeout_s, self.expected, retry,
                     self.security)
        except BaseException as exc:
            raise job_error(self.target, exc) from None
        return WriterCommitMessage()


class CopySink(DataSource):
    """Format "causeway-copy": the rows of one step (partition, key, value, headers, ts as epoch
    ms) produced as they are to option `topic` on option `bootstrap`, logged in with the kafka.*
    security options among its options. Spark's Kafka sink has no timestamp column, so the copy
    has a writer of its own."""

    @classmethod
    def name(cls) -> str:
        return _SINK

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        expected = {int(p): int(o) for p, o in json.loads(self.options["expected"]).items()}
        return _CopyWriter(self.options["bootstrap"], self.options["topic"], float(self.options["timeout_s"]), expected,
                           security_options(dict(self.options)))


# -- the job ------------------------------------------------------------------------------------


def _on_source(source: str, topic: str, ask: Callable[[], _T]) -> _T:
    """`ask()`, a missing `topic` named as the source cluster's."""
    try:
        return ask()
    except PipelineError as exc:
        if str(exc) == f"topic {topic!r} does not exist":
            raise PipelineError(f"topic {topic!r} does not exist on the source cluster {source}") from None
        raise


def _read_options(source: str, topic: str, starting: str, ending: str, options: Mapping[str, str]) -> ReadOptions:
    return parse_read_options({**options, "kafka.bootstrap.servers": source, "subscribe": topic,
                               "startingOffsets": starting, "endingOffsets": ending})


def _plan(source: str, topic: str, starting: str, ending: str, options: Mapping[str, str]) -> tuple[Plan, ReadOptions]:
    opts = _read_options(source, topic, starting, ending, options)
    return _on_source(source, topic, lambda: plan_read(opts)), opts


def check_copy(source: str, target: str, topic: str, *, starting_offsets: str = "earliest",
               ending_offsets: str = "latest", options: Mapping[str, str] | None = None) -> None:
    """What `copy` checks before Spark starts: its read options, the source topic, both clusters
    within seconds (logged in to as the copy will). Raises PipelineError as `copy` does."""
    security = _read_options(source, topic, starting_offsets, ending_offsets, options or {}).security
    _on_source(source, topic, lambda: check_cluster(source, [topic], security=security))
    check_cluster(target, security=security)


def copy(spark: SparkSession, source: str, target: str, topic: str, *, target_topic: str | None = None,
         starting_offsets: str = "earliest", ending_offsets: str = "latest", allow_duplicates: bool = False,
         step_records: int = DEFAULT_STEP_RECORDS, say: Callable[[str], None] = print,
         options: Mapping[str, str] | None = None) -> CopyResult:
    """Copy `topic`'s range [starting_offsets, ending_offsets) (Spark's Kafka option forms:
    earliest, latest, or per-partition JSON) from cluster `source` to `target_topic` (default:
    the same name) on cluster `target`; see the module. `options` are read options of the data
    source; its kafka.* security options (kafka.security.protocol, kafka.sasl.*, kafka.ssl.*)
    log in to both clusters, for the reads, the writes and the copy's own admin clients alike.

    Raises PipelineError for a missing source topic, an unreachable cluster or a refused login,
    offsets outside the log (failOnDataLoss in `options`), or a target topic with fewer
    partitions; DuplicateCopy
    when the target already holds records of the range and `allow_duplicates` is false.
    """
    if step_records <= 0:
        raise PipelineError("step_records must be positive")
    target_topic = target_topic or topic
    read_options = {k: v for k, v in (options or {}).items()}
    plan, checked = _plan(source, topic, starting_offsets, ending_offsets, read_options)
    timeout_s, security = checked.request_timeout_s, checked.security
    for message in plan.data_loss:
        say(f"copy {topic}: data loss: {message}")
    ranges = list(plan.ranges)
    label = f"copy {topic} -> {target_topic}"
    prepared = _target(source, target, topic, target_topic, len(ranges), timeout_s, security)
    if prepared.created:
        say(f"{label}: created {target_topic} on {target} with {len(ranges)} partitions")
    # Only the options that shape reading travel to the reads (not the offsets: they are pinned).
    pinned = {k: v for k, v in read_options.items() if k.lower().startswith("kafka.") or k == "failOnDataLoss"}
    overlap = _overlap(spark, source, target, topic, target_topic, ranges, prepared.logs, pinned)
    if overlap:
        total = sum(o.held for o in overlap.values())
        where = ", ".join(f"{target_topic}-{p}: {o.held}" for p, o in sorted(overlap.items()))
        if not allow_duplicates:
            hint = ("Narrow the range with the starting offsets, or pass --allow-duplicates "
                    "(allow_duplicates=True) to copy anyway")
            if all(o.resume is not None for o in overlap.values()):
                # The range's first records, as an interrupted copy leaves them: say where to go on.
                resume = {str(r.partition): overlap[r.partition].resume if r.partition in overlap else r.start
                          for r in ranges}
                hint = (f"They are the range's first records, as an interrupted copy leaves them: continue with "
                        f"--starting-offsets '{json.dumps({topic: resume}, separators=(',', ':'))}'; or pass "
                        "--allow-duplicates (allow_duplicates=True) to copy them again")
            raise DuplicateCopy(f"{label}: the target already holds {total} of the records of this range ({where}); "
                                f"copying again would write them twice. {hint}",
                                {p: o.held for p, o in overlap.items()})
        say(f"{label}: writing {total} records the target already holds again ({where}), as allowed")
    logs = prepared.logs
    position = {r.partition: r.start for r in ranges}
    ends = {r.partition: r.end for r in ranges}
    planned = plan.records
    say(f"{label}: {planned} offsets to copy in {len(ranges)} partitions "
        f"(from {json.dumps(position, sort_keys=True)} to {json.dumps(ends, sort_keys=True)})")
    copied = steps = done = 0
    started = time.monotonic()  # the steps' rate and ETA
    while any(position[p] < ends[p] for p in position):
        step = [OffsetRange(topic, p, position[p], min(ends[p], position[p] + step_records))
                for p in sorted(position) if position[p] < ends[p]]
        df = _read(spark, source, topic, step, pinned).selectExpr(
            "partition", "key", "value", "headers", "unix_millis(timestamp) AS ts")
        with stage_progress(spark, say, f"{label} step {steps + 1}"), writing_to(spark, CopySink):
            (df.write.format(_SINK).options(**{f"kafka.{k}": v for k, v in security})
             .option("bootstrap", target).option("topic", target_topic)
             .option("timeout_s", str(timeout_s))
             .option("expected", json.dumps({str(r.partition): logs[r.partition][1] for r in step}))
             .mode("append").save())
        # What the step wrote: the target's log ends moved by it (the copy's own count, as long
        # as nothing else writes to those partitions meanwhile).
        after = _target(source, target, topic, target_topic, len(ranges), timeout_s, security).logs
        written = sum(after[r.partition][1] - logs[r.partition][1] for r in step)
        logs = after
        steps += 1
        copied += int(written)
        done += sum(r.size for r in step)
        for r in step:
            position[r.partition] = r.end
        say(f"{label} step {steps}: {done} of {planned} offsets done ({copied} records written); "
            f"{rate_and_eta(done, planned, time.monotonic() - started, 'offsets')}")
    return CopyResult(target_topic, planned, copied, steps, prepared.created, tuple(ranges),
                      {p: o.held for p, o in overlap.items()})
