"""The executor's half of a batch read: fetch one offset range and hand out Arrow batches.

Spark calls the reader's `read(partition)` as a plain generator in its Python worker. The
network side runs in trio, one `trio.run` per range, in a thread of its own: it fetches the
range from the partition's leader with `broker.client` and passes the raw bytes through a small
bounded queue; the generator decodes them into Arrow columns (`ColumnBuilder`). So the next
fetch is on the wire while this one is decoded, and at most a few fetches' bytes are held
whatever the size of the range. Closing the generator early (a `limit`) stops the thread.

Data loss while reading (the log start moved past our position: retention or deleted records)
follows `failOnDataLoss`: fail naming topic, partition and offsets, or log it and go on from the
new log start.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import trio

from broker.client import (
    Client,
    ErrorCode,
    KafkaError,
    TopicPartition,
    admin,
    fetch,
)
from broker.protocol.constants import EARLIEST, LATEST
from broker.protocol.records import split_batches
from pipeline.clients import open_job_client
from pipeline.columns import ColumnBuilder, CorruptBatch
from pipeline.options import PipelineError, ReadOptions
from pipeline.planning import OffsetRange, job_error

__all__ = ["fetch_range_chunks", "read_range"]

log = logging.getLogger(__name__)

# Errors after which the same fetch may well succeed (a leader moving, a broker restarting).
_RETRIED = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.NETWORK_EXCEPTION,
    ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.OFFSET_NOT_AVAILABLE,
})
_MAX_ATTEMPTS = 8  # failed fetches in a row before the task fails (Spark then retries the task)
_QUEUE_DEPTH = 4  # fetch answers between the trio thread and the decoding generator


@dataclass(frozen=True, slots=True)
class Chunk:
    """Whole batches fetched for [start, end); the decoder keeps the offsets in that range."""

    records: bytes | bytearray | memoryview
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class _Failed:
    error: BaseException


_DONE = object()


def _lost(opts: ReadOptions, what: str) -> None:
    if opts.fail_on_data_loss:
        raise PipelineError(what + '. If you want the query to go on, set the option "failOnDataLoss" to "false".')
    log.warning("data loss: %s", what)


async def _log_bounds(client: Client, tp: TopicPartition) -> tuple[int, int]:
    starts = await admin.list_offsets(client, {tp: EARLIEST})
    ends = await admin.list_offsets(client, {tp: LATEST})
    return starts[tp].offset, ends[tp].offset


async def fetch_range_chunks(client: Client, rng: OffsetRange, opts: ReadOptions,
                             send: trio.MemorySendChannel[Chunk]) -> None:
    """Fetch [rng.start, rng.end) in order and send each answer's whole batches.

    Raises PipelineError naming topic, partition and offset for data loss (failOnDataLoss),
    a corrupt answer, or a fetch that kept failing.
    """
    tp = TopicPartition(rng.topic, rng.partition)
    name = f"{rng.topic}-{rng.partition}"
    position = rng.start
    failures = 0
    while position < rng.end:
        with trio.fail_after(opts.request_timeout_s + 1):
            got = (await fetch(client, {tp: position}, max_wait_ms=100,
                               partition_max_bytes=opts.max_partition_fetch_bytes,
                               max_bytes=opts.max_partition_fetch_bytes))[tp]
        if got.error == ErrorCode.OFFSET_OUT_OF_RANGE:
            with trio.fail_after(opts.request_timeout_s + 1):
                log_start, log_end = await _log_bounds(client, tp)
            if position < log_start:
                _lost(opts, f"{name}: offsets [{position}, {min(log_start, rng.end)}) are no longer in the log "
                            f"(its start offset is now {log_start})")
                position = log_start
            else:
                _lost(opts, f"{name}: offsets [{position}, {rng.end}) are past the log end offset {log_end}")
                return
            continue
        if got.error != ErrorCode.NONE:
            failures += 1
            reason = got.error_message or ErrorCode(got.error).name
            if got.error not in _RETRIED or failures >= _MAX_ATTEMPTS:
                raise PipelineError(f"{name}: fetch at offset {position} failed: {ErrorCode(got.error).name}"
                                    + (f" ({reason})" if reason != ErrorCode(got.error).name else ""))
            await trio.sleep(client.backoff.delay(failures, None))
            continue
        try:
            spans = split_batches(got.records, allow_partial_tail=True)
        except KafkaError as exc:
            raise PipelineError(f"{name}: corrupt record batch in the fetch at offset {position}: {exc}") from None
        if not spans:
            # Nothing whole at our position although the range says there is more: the log
            # was cut below us (truncated), or a batch is larger than a fetch may carry.
            failures += 1
            if got.records:
                raise PipelineError(f"{name}: the batch at offset {position} is larger than "
                                    f"kafka.max.partition.fetch.bytes ({opts.max_partition_fetch_bytes})")
            if got.high_watermark >= 0 and got.high_watermark <= position:
                _lost(opts, f"{name}: offsets [{position}, {rng.end}) are past the log end offset "
                            f"{got.high_watermark}")
                return
            if failures >= _MAX_ATTEMPTS:
                raise PipelineError(f"{name}: no records at offset {position} after {failures} fetches "
                                    f"(high watermark {got.high_watermark})")
            continue
        failures = 0
        last_pos, last = spans[-1]
        whole = memoryview(got.records)[: last_pos + last.size]
        await send.send(Chunk(whole, position, rng.end))
        position = last.last_offset + 1


async def _run_range(rng: OffsetRange, opts: ReadOptions, out: queue.Queue[object], stop: threading.Event) -> None:
    async with open_job_client(opts.bootstrap, opts.security, request_timeout_s=opts.request_timeout_s) as client:
        send, receive = trio.open_memory_channel[Chunk](1)
        async with trio.open_nursery() as nursery:

            async def fetcher() -> None:
                async with send:
                    await fetch_range_chunks(client, rng, opts, send)

            nursery.start_soon(fetcher)
            async with receive:
                async for chunk in receive:
                    # Blocks a worker thread until the decoder takes it (or drains the queue
                    # on close); the bounded queue is what bounds memory.
                    await trio.to_thread.run_sync(out.put, chunk)
                    if stop.is_set():
                        nursery.cancel_scope.cancel()
                        return


def read_range(rng: OffsetRange, opts: ReadOptions, *, rows_per_batch: int = 65536) -> Iterator[pa.RecordBatch]:
    """The records of `rng` as Arrow RecordBatches in Spark's Kafka schema.

    Raises PipelineError naming topic, partition and offset when the range cannot be read.
    """
    out: queue.Queue[object] = queue.Queue(maxsize=_QUEUE_DEPTH)
    stop = threading.Event()
    name = f"{rng.topic}-{rng.partition}"

    def runner() -> None:
        try:
            trio.run(_run_range, rng, opts, out, stop)
        except BaseException as exc:  # handed to the reading thread, which raises it
            out.put(_Failed(exc))
        else:
            out.put(_DONE)

    thread = threading.Thread(target=runner, name=f"causeway-fetch-{name}-{rng.start}", daemon=True)
    thread.start()
    builder = ColumnBuilder(rng.topic, rng.partition, opts.include_headers)
    try:
        while True:
            item = out.get()
            if item is _DONE:
                break
            if isinstance(item, _Failed):
                raise job_error(opts.bootstrap, item.error) from None
            assert isinstance(item, Chunk)
            try:
                builder.add(item.records, item.start, item.end)
            except CorruptBatch as exc:
                raise PipelineError(f"{name}: corrupt record batch at offset {exc.offset}: {exc.reason}") from None
            if len(builder) >= rows_per_batch:
                yield builder.take()
        if len(builder):
            yield builder.take()
    finally:
        stop.set()
        while thread.is_alive():  # drain, so a put blocked on a full queue returns
            try:
                out.get(timeout=0.05)
            except queue.Empty:
                pass
        thread.join()
