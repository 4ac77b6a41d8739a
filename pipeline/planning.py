"""The driver's half of a batch read: which partitions, which offset ranges, how many tasks.

Partitions come from the subscription (metadata); each partition's log start and log end from
ListOffsets; the starting and ending options are resolved against them and checked as Spark's
Kafka source checks them (`failOnDataLoss`). Ranges are then cut for `minPartitions` the way
Spark's KafkaOffsetRangeCalculator cuts them: in proportion to their sizes.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import trio

from broker.client import (
    Client,
    ConnectionFailed,
    ErrorCode,
    KafkaError,
    TopicMetadata,
    TopicPartition,
    admin,
)
from broker.client.cluster import parse_bootstrap
from broker.protocol.constants import EARLIEST, LATEST
from broker.tasks import leaves
from pipeline.clients import open_job_client
from pipeline.options import OffsetSpec, PipelineError, ReadOptions, SecurityProps, Subscription

__all__ = [
    "CHECK_TIMEOUT_S",
    "OffsetRange",
    "Plan",
    "check_cluster",
    "plan_ranges",
    "plan_read",
    "split_ranges",
    "cluster_error",
    "job_error",
]

log = logging.getLogger(__name__)

# How long a job waits for a cluster to answer its first Metadata request before Spark starts.
CHECK_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Records [start, end) of one partition: one Spark task reads it."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class Plan:
    """Each partition's resolved range (before splitting), and what was skipped because the log
    no longer holds it (failOnDataLoss=false)."""

    ranges: tuple[OffsetRange, ...]
    data_loss: tuple[str, ...] = ()

    @property
    def records(self) -> int:
        """Offsets planned (compacted gaps included: an upper bound on records)."""
        return sum(r.size for r in self.ranges)


async def _describe(client: Client, names: Sequence[str]) -> dict[str, TopicMetadata]:
    found = {}
    for name in names:  # one at a time, so a missing topic is named
        try:
            found.update(await admin.describe_topics(client, [name]))
        except KafkaError as exc:
            if exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise PipelineError(f"topic {name!r} does not exist") from None
            raise
    return found


async def _partitions(client: Client, sub: Subscription) -> list[TopicPartition]:
    if sub.assign:
        topics = await _describe(client, sorted({t for t, _ in sub.assign}))
        for topic, partition in sub.assign:
            if partition not in topics[topic].partitions:
                raise PipelineError(f"assign: topic {topic!r} has no partition {partition} "
                                    f"(it has {topics[topic].partition_count})")
        return [TopicPartition(t, p) for t, p in sub.assign]
    if sub.pattern is not None:
        pattern = sub.pattern  # the whole name, as Java's Pattern.matches; internal topics left out
        everything = await admin.describe_topics(client)
        topics = {name: t for name, t in everything.items()
                  if pattern.fullmatch(name) and not t.is_internal and t.error == ErrorCode.NONE}
    else:
        topics = await _describe(client, sub.topics)
    return [TopicPartition(name, p) for name in sorted(topics) for p in sorted(topics[name].partitions)]


async def _resolve(
    client: Client, spec: OffsetSpec, which: str, tps: list[TopicPartition],
    log_start: dict[TopicPartition, int], log_end: dict[TopicPartition, int], strategy: str,
) -> dict[TopicPartition, int]:
    if spec.kind == "earliest":
        return dict(log_start)
    if spec.kind == "latest":
        return dict(log_end)
    if spec.kind == "offsets":
        named = {TopicPartition(t, p) for t, p in spec.offsets}
        missing = sorted(set(tps) - named)
        if missing:
            listed = ", ".join(f"{tp.topic}-{tp.partition}" for tp in missing)
            raise PipelineError(f"option {which}Offsets must give an offset for every partition read; "
                                f"missing: {listed}")
        out = {}
        for tp in tps:
            offset = spec.offsets[(tp.topic, tp.partition)]
            out[tp] = log_start[tp] if offset == EARLIEST else log_end[tp] if offset == LATEST else offset
        return out
    # Timestamps: the first offset whose timestamp is at or after it (ListOffsets).
    if spec.kind == "timestamp":
        stamps = {tp: spec.timestamp for tp in tps}
    else:
        missing = sorted(tp for tp in tps if (tp.topic, tp.partition) not in spec.offsets)
        if missing:
            listed = ", ".join(f"{tp.topic}-{tp.partition}" for tp in missing)
            raise PipelineError(f"option {which}OffsetsByTimestamp must give every partition read; missing: {listed}")
        stamps = {tp: spec.offsets[(tp.topic, tp.partition)] for tp in tps}
    found = await admin.list_offsets(client, stamps)
    out = {}
    for tp in tps:
        offset = found[tp].offset
        if offset < 0:
            # No record at or after the timestamp. Spark: an end then is the latest offset; a
            # start fails, unless startingOffsetsByTimestampStrategy=latest.
            if which == "starting" and strategy == "error":
                raise PipelineError(f"no offset in {tp.topic}-{tp.partition} has a timestamp at or after "
                                    f"{stamps[tp]} (startingOffsetsByTimestampStrategy=error)")
            offset = log_end[tp]
        out[tp] = offset
    return out


async def plan_ranges(client: Client, opts: ReadOptions) -> Plan:
    """Resolve `opts` against the cluster: one range per partition (empty ones included).

    Raises PipelineError for a missing topic, offsets the log does not hold (unless
    failOnDataLoss is false: then they are skipped and listed in `Plan.data_loss`), or a start
    after an end.
    """
    tps = await _partitions(client, opts.subscription)
    if not tps:
        return Plan(())
    starts = await admin.list_offsets(client, {tp: EARLIEST for tp in tps})
    ends = await admin.list_offsets(client, {tp: LATEST for tp in tps})
    log_start = {tp: starts[tp].offset for tp in tps}
    log_end = {tp: ends[tp].offset for tp in tps}
    start = await _resolve(client, opts.starting, "starting", tps, log_start, log_end, opts.timestamp_strategy)
    end = await _resolve(client, opts.ending, "ending", tps, log_start, log_end, opts.timestamp_strategy)
    ranges: list[OffsetRange] = []
    lost: list[str] = []

    def data_loss(message: str) -> None:
        if opts.fail_on_data_loss:
            raise PipelineError(message + ". Some data may have been lost because it is no longer in the log "
                                "(retention, deletion) or never was. If you want the query to go on, "
                                'set the option "failOnDataLoss" to "false".')
        log.warning("data loss: %s", message)
        lost.append(message)

    for tp in tps:
        lo, hi = start[tp], end[tp]
        name = f"{tp.topic}-{tp.partition}"
        where = f"(the log holds [{log_start[tp]}, {log_end[tp]}))"
        if lo < log_start[tp]:
            data_loss(f"{name}: starting offset {lo} is before the log start offset {log_start[tp]} {where}")
            lo = log_start[tp]
        if lo > log_end[tp]:
            data_loss(f"{name}: starting offset {lo} is after the log end offset {log_end[tp]} {where}")
            lo = log_end[tp]
        if hi > log_end[tp]:
            data_loss(f"{name}: ending offset {hi} is after the log end offset {log_end[tp]} {where}")
            hi = log_end[tp]
        if hi < log_start[tp]:
            data_loss(f"{name}: ending offset {hi} is before the log start offset {log_start[tp]} {where}")
            hi = log_start[tp]
        if lo > hi:
            raise PipelineError(f"{name}: starting offset {lo} is after the ending offset {hi}: the offset "
                                "options are wrong or the topic was recreated")
        ranges.append(OffsetRange(tp.topic, tp.partition, lo, hi))
    return Plan(tuple(ranges), tuple(lost))


def split_ranges(ranges: tuple[OffsetRange, ...] | list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Non-empty ranges, cut so there are at least `min_partitions` of them when there are
    enough offsets: each range into parts in proportion to its share of all offsets (at least
    one part), as Spark does, so one big partition does not leave the other tasks idle."""
    ranges = [r for r in ranges if r.size > 0]
    if min_partitions is None or min_partitions <= len(ranges):
        return ranges
    total = sum(r.size for r in ranges)
    out: list[OffsetRange] = []
    for r in ranges:
        parts = min(r.size, max(1, math.floor(r.size / total * min_partitions + 0.5)))
        for i in range(parts):
            lo = r.start + r.size * i // parts
            hi = r.start + r.size * (i + 1) // parts
            out.append(OffsetRange(r.topic, r.partition, lo, hi))
    return out


def job_error(bootstrap: str, exc: BaseException) -> BaseException:
    """What a job reports for `exc`: a PipelineError as it is, a cluster failure as a
    PipelineError naming the cluster, anything else unchanged."""
    # The first leaf of a nursery's groups says what went wrong; the others are usually its
    # cancellations' echoes.
    exc = leaves(exc)[0]
    if isinstance(exc, PipelineError):
        return exc
    if isinstance(exc, (KafkaError, ConnectionFailed, trio.TooSlowError, OSError)):
        return cluster_error(bootstrap, exc)
    return exc


def cluster_error(bootstrap: str, exc: BaseException) -> PipelineError:
    if isinstance(exc, KafkaError):
        return PipelineError(f"cluster {bootstrap}: {exc}")
    return PipelineError(f"cluster {bootstrap} is unreachable or did not answer in time: {exc}")


def check_cluster(bootstrap: str, topics: Sequence[str] = (), *, security: SecurityProps = (),
                  timeout_s: float = CHECK_TIMEOUT_S) -> None:
    """Ask `bootstrap` for the metadata of `topics` (or of none) within `timeout_s`, logged in
    with `security` (ReadOptions.security): what a job checks before it starts Spark, so that a
    cluster out of reach, a refused login or a missing topic is said in seconds, not after
    Spark's start-up and the read's own timeouts.

    Raises PipelineError naming the cluster (malformed, unreachable, silent, refusing the login)
    or the topic."""
    try:
        parse_bootstrap(bootstrap)
    except ValueError as exc:
        raise PipelineError(f"bootstrap {bootstrap!r}: {exc}") from None

    async def main() -> None:
        async with open_job_client(bootstrap, security, request_timeout_s=timeout_s,
                                   connect_timeout_s=timeout_s) as client:
            with trio.fail_after(timeout_s):
                if topics:
                    await _describe(client, topics)
                else:
                    await client.refresh_metadata([])

    try:
        trio.run(main)
    except BaseException as exc:
        if isinstance(leaves(exc)[0], trio.TooSlowError):
            raise PipelineError(f"cluster {bootstrap} did not answer within {timeout_s:g} s") from None
        raise job_error(bootstrap, exc) from None


def plan_read(opts: ReadOptions) -> Plan:
    """`plan_ranges` on a client of its own (one trio.run), for the Spark driver.

    Raises PipelineError, naming the cluster, when it cannot be reached in time."""

    async def main() -> Plan:
        async with open_job_client(opts.bootstrap, opts.security, request_timeout_s=opts.request_timeout_s) as client:
            with trio.fail_after(opts.request_timeout_s * 4):  # bounds the few rounds of metadata and ListOffsets
                return await plan_ranges(client, opts)

    try:
        return trio.run(main)
    except BaseException as exc:
        raise job_error(opts.bootstrap, exc) from None
