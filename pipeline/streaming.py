"""The data source's streaming side: `spark.readStream.format("causeway")` and
`df.writeStream.format("causeway")`, as Spark's Kafka source and sink behave.

Offsets live in Spark's checkpoint, in Spark's Kafka form: `{"topic": {"0": 23, "1": 7}}`, the
next offset to read per partition. Each micro-batch reads [previous end, new end) of every
partition with the batch reader's executors (`pipeline.fetching.read_range`), so a query restarted
from its checkpoint goes on where the last committed batch ended: nothing read twice, nothing
skipped. The driver's side (`CausewayStreamReader`) lives in one long-lived Python process Spark
keeps for the query; each call asks the cluster afresh (metadata and ListOffsets).

Triggers: processingTime and the default (a batch as soon as the last ended) read what is there,
bounded by `maxOffsetsPerTrigger`; `once` reads everything in one batch (Spark passes no limit);
`availableNow` records the log ends when the query starts and reads up to them, in batches of
at most `maxOffsetsPerTrigger`, then stops.

Options as Spark's Kafka source for streams: `startingOffsets` is `latest` by default (or
`earliest`, or per-partition JSON with -2/-1; a checkpoint, when there is one, wins);
`endingOffsets`/`endingTimestamp` are refused, as Spark refuses them; partitions created while
the query runs are read from their start.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from pyspark.sql.datasource import (
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from broker.protocol.constants import EARLIEST
from pipeline.options import (
    OffsetSpec,
    PipelineError,
    ReadOptions,
    WriteOptions,
    parse_partition_json,
    parse_read_options,
)

if TYPE_CHECKING:
    import pyarrow as pa

    from pipeline.planning import OffsetRange

__all__ = ["CausewayStreamReader", "CausewayStreamWriter", "StreamOptions", "parse_stream_options", "rate_limit"]

Offsets = dict[str, dict[str, int]]  # Spark's Kafka offset JSON: topic -> partition (as text) -> offset


@dataclasses.dataclass(frozen=True, slots=True)
class StreamOptions:
    read: ReadOptions
    max_offsets_per_trigger: int | None = None


def parse_stream_options(options: Mapping[str, str]) -> StreamOptions:
    """A stream's options: the batch reader's, with Spark's streaming rules for the offsets."""
    opts = {k.lower(): v for k, v in options.items()}
    for name in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp"):
        if name in opts:
            shown = {"endingoffsets": "endingOffsets", "endingtimestamp": "endingTimestamp",
                     "endingoffsetsbytimestamp": "endingOffsetsByTimestamp"}[name]
            raise PipelineError(f"option {shown} is not valid in streaming queries (a stream has no end)")
    limit = None
    if "maxoffsetspertrigger" in opts:
        try:
            limit = int(opts["maxoffsetspertrigger"])
        except ValueError:
            limit = 0
        if limit <= 0:
            raise PipelineError(f"option maxOffsetsPerTrigger must be a positive integer, "
                                f"got {opts['maxoffsetspertrigger']!r}")
    text = opts.pop("startingoffsets", "latest").strip()
    parsed = parse_read_options(opts)  # every other option, checked as for a batch read
    if "startingtimestamp" in opts or "startingoffsetsbytimestamp" in opts:
        starting = parsed.starting  # timestamps take precedence, as in Spark
    elif text.lower() in ("earliest", "latest"):
        starting = OffsetSpec(text.lower())
    else:
        offsets = parse_partition_json("startingOffsets", text)
        for (topic, partition), offset in offsets.items():
            if offset < EARLIEST:
                raise PipelineError(f"option startingOffsets: {topic}-{partition}: offset {offset} is neither an "
                                    "offset nor -2 (earliest) nor -1 (latest)")
        starting = OffsetSpec("offsets", offsets)
    return StreamOptions(dataclasses.replace(parsed, starting=starting, ending=OffsetSpec("latest")), limit)


def _to_json(offsets: Mapping[tuple[str, int], int]) -> Offsets:
    out: Offsets = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out


def _from_json(offsets: Mapping[str, Mapping[str, int]]) -> dict[tuple[str, int], int]:
    return {(topic, int(p)): int(o) for topic, parts in offsets.items() for p, o in parts.items()}


def _log_bounds(opts: ReadOptions) -> dict[tuple[str, int], tuple[int, int]]:
    """Each subscribed partition's [log start, log end) now."""
    from pipeline.planning import plan_read

    # Planning "earliest to latest" lists the partitions and both ends in one round.
    plan = plan_read(dataclasses.replace(opts, starting=OffsetSpec("earliest"), ending=OffsetSpec("latest")))
    return {(r.topic, r.partition): (r.start, r.end) for r in plan.ranges}


def rate_limit(start: Mapping[tuple[str, int], int], end: Mapping[tuple[str, int], int],
               limit: int) -> dict[tuple[str, int], int]:
    """Spark's KafkaSource.rateLimit: at most about `limit` offsets in all, shared among the
    partitions in proportion to what each has waiting (each with data gets at least one)."""
    sizes = {tp: end[tp] - start.get(tp, end[tp]) for tp in end}
    total = sum(s for s in sizes.values() if s > 0)
    if total <= limit:
        return dict(end)
    out = {}
    for tp, stop in end.items():
        begin = start.get(tp, stop)
        size = sizes[tp]
        if size <= 0:
            out[tp] = stop
            continue
        share = limit * (size / total)
        step = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = min(stop, begin + step)
    return out


class StreamPartition(InputPartition):
    """One task of a micro-batch: offsets [start, end) of one partition."""

    def __init__(self, rng: OffsetRange) -> None:
        super().__init__((rng.topic, rng.partition, rng.start, rng.end))
        self.range = rng


class CausewayStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: StreamOptions) -> None:
        self.opts = opts
        self.available_now: dict[tuple[str, int], int] | None = None

    def initialOffset(self) -> dict[str, dict[str, int]]:
        from pipeline.planning import plan_read

        plan = plan_read(self.opts.read)  # startingOffsets resolved and checked as for a batch
        return _to_json({(r.topic, r.partition): r.start for r in plan.ranges})

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.opts.max_offsets_per_trigger
        return ReadMaxRows(limit) if limit is not None else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.available_now = {tp: end for tp, (_, end) in _log_bounds(self.opts.read).items()}

    def latestOffset(self, start: dict[str, dict[str, int]], limit: ReadLimit) -> dict[str, dict[str, int]]:
        begin = _from_json(start)
        bounds = _log_bounds(self.opts.read)
        gone = sorted(set(begin) - set(bounds))
        if gone:
            listed = ", ".join(f"{t}-{p}" for t, p in gone)
            if self.opts.read.fail_on_data_loss:
                raise PipelineError(f"partitions {listed} are no longer there (topic deleted?). Some data may have "
                                    'been lost. If you want the query to go on, set the option "failOnDataLoss" '
                                    'to "false".')
        # A partition new since the last batch is read from its log start, as Spark's Kafka source does.
        begin = {tp: begin.get(tp, first) for tp, (first, _) in bounds.items()}
        end = {tp: last for tp, (_, last) in bounds.items()}
        if self.available_now is not None:  # nothing past what was there when the query started
            end = {tp: min(last, self.available_now[tp]) if tp in self.available_now else begin[tp]
                   for tp, last in end.items()}
        end = {tp: max(last, begin[tp]) for tp, last in end.items()}  # never behind the start
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(begin, end, limit.max_rows)
        return _to_json(end)

    def partitions(self, start: dict[str, dict[str, int]], end: dict[str, dict[str, int]]) -> Sequence[InputPartition]:
        from pipeline.planning import OffsetRange, split_ranges

        begin = _from_json(start)
        stop = _from_json(end)
        missing = [tp for tp in stop if tp not in begin]
        if missing:  # partitions created since `start`: from their log start
            bounds = _log_bounds(self.opts.read)
            begin.update({tp: bounds.get(tp, (stop[tp], stop[tp]))[0] for tp in missing})
        ranges = [OffsetRange(t, p, begin[(t, p)], last) for (t, p), last in sorted(stop.items())
                  if last > begin[(t, p)]]
        return [StreamPartition(r) for r in split_ranges(ranges, self.opts.read.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, StreamPartition):
            return iter(())
        from pipeline.fetching import read_range

        return read_range(partition.range, self.opts.read)

    def commit(self, end: dict[str, dict[str, int]]) -> None:
        """Offsets are kept in Spark's checkpoint only: nothing to commit to the cluster."""


@dataclasses.dataclass
class StreamCommit(WriterCommitMessage):
    records: int
    partitions: int


class CausewayStreamWriter(DataSourceStreamArrowWriter):
    """Each micro-batch's rows produced as the batch writer produces them (idempotent producer,
    order kept per partition); at least once across a task retry or a batch replayed after a
    restart, as Spark's Kafka sink."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StreamCommit:
        from pipeline.producing import write_task_batches

        result = write_task_batches(iterator, self.opts)
        return StreamCommit(result.records, result.partitions)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 - Spark's name
        """The rows are on the cluster once every task returned: nothing more to do."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 - Spark's name
        """Produced records cannot be taken back; the batch is replayed (at least once)."""

