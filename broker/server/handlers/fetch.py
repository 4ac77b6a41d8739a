"""Fetch: whole record batches for consumers, with Kafka's long-poll and size limits.

A fetch that finds fewer than ``min_bytes`` waits up to ``max_wait_ms`` for appends to any of
its partitions, then reads again. Limits follow KIP-74: ``partition_max_bytes`` per partition and
``max_bytes`` for the response, except that the first batch of the first partition with data is
returned whole even if it is larger, so a consumer is never stuck behind a big batch.

Record data is never read into memory here: the answer carries each partition's batches as a
FileSlice (a descriptor, a position and a length), which the connection sends from the file.

Fetch sessions (KIP-227) are not kept: the response's session id 0 tells clients to send full
fetch requests, which every client supports.
"""

from __future__ import annotations

import uuid
from typing import cast

import trio

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.messages import FetchRequest, FetchResponse, Records
from broker.replication.partition import Partition
from broker.server.context import RequestContext
from broker.server.handlers.base import ApiHandler
from broker.storage import ReadResult
from broker.storage.file_slice import FileSlice

PartitionData = FetchResponse.PartitionData


class _Wanted:
    """One requested partition, resolved once, read on every pass."""

    __slots__ = ("topic_name", "topic_id", "request", "partition", "error", "read_error")

    def __init__(
        self,
        topic_name: str,
        topic_id: uuid.UUID,
        request: FetchRequest.FetchPartition,
        partition: Partition | None,
        error: ErrorCode,
    ) -> None:
        self.topic_name = topic_name
        self.topic_id = topic_id
        self.request = request
        self.partition = partition
        self.error = error
        self.read_error = ErrorCode.NONE  # of the latest read


def _resolve(ctx: RequestContext, request: FetchRequest) -> list[_Wanted]:
    controller = ctx.services.controller
    replicas = ctx.services.replicas
    by_id = ctx.version >= 13
    wanted: list[_Wanted] = []
    for fetch_topic in request.topics:
        if by_id:
            info = controller.topic_by_id(fetch_topic.topic_id)
            name = info.name if info is not None else ""
            missing = ErrorCode.UNKNOWN_TOPIC_ID
        else:
            name = fetch_topic.topic
            info = controller.topics().get(name)
            missing = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        topic_id = info.topic_id if info is not None else fetch_topic.topic_id
        for fp in fetch_topic.partitions:
            partition: Partition | None = None
            error = ErrorCode.NONE
            if info is None:
                error = missing
            else:
                try:
                    partition = replicas.get(name, fp.partition)
                    partition.check_leader_epoch(fp.current_leader_epoch)
                except KafkaError as exc:
                    error = exc.code
                    partition = None
            wanted.append(_Wanted(name, topic_id, fp, partition, error))
    return wanted


def _read_all(wanted: list[_Wanted], max_bytes: int) -> tuple[list[ReadResult | None], int, bool]:
    """Find every partition's batches once (nothing is read into memory); returns where they
    lie (None for a partition in error), the bytes found and whether any partition has an
    error (which ends the long poll, as in Kafka)."""
    out: list[ReadResult | None] = []
    total = 0
    any_error = False
    for w in wanted:
        w.read_error = ErrorCode.NONE
        if w.partition is None:
            any_error = True
            out.append(None)
            continue
        result: ReadResult | None = None
        budget = min(w.request.partition_max_bytes, max_bytes - total)
        try:
            if budget > 0 or total == 0:
                result = w.partition.read(w.request.fetch_offset, max(budget, 0), min_one_batch=(total == 0))
                total += result.length
        except KafkaError as exc:
            w.read_error = exc.code
            any_error = True
        out.append(result)
    return out, total, any_error


def _answers(wanted: list[_Wanted], reads: list[ReadResult | None]) -> list[PartitionData]:
    """The partition answers, each record set a FileSlice of its segment file (the server
    sends it from the file and closes it; see :func:`close_slices`). No await may come between
    the read and this call: the log could change in between."""
    out: list[PartitionData] = []
    try:
        for w, result in zip(wanted, reads, strict=True):
            out.append(_answer(w, result))
    except BaseException:
        for part in out:
            if isinstance(part.records, FileSlice):
                part.records.close()
        raise
    return out


def _answer(w: _Wanted, result: ReadResult | None) -> PartitionData:
    if w.partition is None:
        return PartitionData(partition_index=w.request.partition, error_code=w.error,
                             high_watermark=-1, last_stable_offset=-1, log_start_offset=-1)
    records: FileSlice | None = result.open_slice() if result is not None else None
    return PartitionData(
        partition_index=w.request.partition,
        error_code=w.read_error,
        high_watermark=w.partition.high_watermark,
        last_stable_offset=w.partition.high_watermark,
        log_start_offset=w.partition.log.log_start_offset,
        aborted_transactions=None,
        preferred_read_replica=-1,
        # The encoder writes a FileSlice's length and leaves a gap that the connection
        # fills from the file (broker.protocol.spliced): same bytes on the wire.
        records=cast("Records", records) if records is not None else b"",
    )


def close_slices(response: FetchResponse) -> None:
    """Close the descriptors a fetch response holds (when it will not be sent after all)."""
    for topic in response.responses:
        for part in topic.partitions:
            if isinstance(part.records, FileSlice):
                part.records.close()


async def handle(ctx: RequestContext, request: FetchRequest) -> FetchResponse:
    wanted = _resolve(ctx, request)
    max_bytes = min(request.max_bytes, ctx.config.fetch_max_bytes) if ctx.version >= 3 else ctx.config.fetch_max_bytes
    deadline = trio.current_time() + max(request.max_wait_ms, 0) / 1000
    while True:
        reads, total, any_error = _read_all(wanted, max_bytes)
        if total >= request.min_bytes or any_error or trio.current_time() >= deadline:
            break
        appended = trio.Event()
        for w in wanted:
            if w.partition is not None:
                w.partition.add_waiter(appended)
        try:
            with trio.move_on_at(deadline):
                await appended.wait()
        finally:
            for w in wanted:
                if w.partition is not None:
                    w.partition.remove_waiter(appended)
    parts = _answers(wanted, reads)
    # Group the partition answers back under their topics, in request order.
    responses: list[FetchResponse.FetchableTopicResponse] = []
    index = 0
    for fetch_topic in request.topics:
        count = len(fetch_topic.partitions)
        first = wanted[index] if count else None
        responses.append(
            FetchResponse.FetchableTopicResponse(
                topic=first.topic_name if first is not None else fetch_topic.topic,
                topic_id=first.topic_id if first is not None else fetch_topic.topic_id,
                partitions=parts[index : index + count],
            )
        )
        index += count
    return FetchResponse(error_code=ErrorCode.NONE, session_id=0, responses=responses)


HANDLER = ApiHandler(ApiKey.FETCH, 4, 17, handle)
