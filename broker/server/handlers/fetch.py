"""Fetch: whole record batches for consumers, with Kafka's long-poll and size limits.

A fetch that finds fewer than ``min_bytes`` waits up to ``max_wait_ms`` for appends to any of
its partitions, then reads again. Limits follow KIP-74: ``partition_max_bytes`` per partition and
``max_bytes`` for the response, except that the first batch of the first partition with data is
returned whole even if it is larger, so a consumer is never stuck behind a big batch.

Record data is never read into memory here: the answer carries each partition's batches as a
FileSlice (a descriptor, a position and a length), which the connection sends from the file.

Each slice keeps its segment's descriptor pinned until it is sent (so retention or compaction
cannot close or swap the file under a length already encoded), and pinned descriptors come from a
broker-wide budget (``broker.storage.handles``): a fetch of hundreds of partitions must not take
every descriptor the process may open. A partition whose slice gets no pin is answered with no
records this time (error NONE, its high watermark and log start as usual), exactly as a partition
past ``fetch.max.bytes`` is, and the client fetches it again. Two rules keep that from stalling
anyone:

- *No livelock*: the first partition with data to be pinned may go over the budget, so an answer
  carries data whenever any partition has some (as KIP-74 returns the first batch even above
  ``fetch.max.bytes``). A connection has one answer in flight, so this costs at most one
  descriptor per connection.
- *No starvation*: pins are handed out from a random partition on, not in request order. The byte
  limits still follow request order (KIP-74: clients rotate their partition lists, as librdkafka
  and the Java consumer do), but the pin budget is shared by every connection and can bind far
  below ``fetch.max.bytes``; without fetch sessions (whose partition order Kafka rotates) the
  broker cannot tell which partitions a client saw last, and a random start gives each partition
  with data the same chance, for clients that do not rotate too.

An OSError while reading or opening a slice answers that partition, not the connection: a segment
that vanished between the read and the slice (retention, compaction, a topic deleted by a worker
thread) is read once more from the log as it is now, which answers its data, OFFSET_OUT_OF_RANGE
(retention moved the log start past the fetch offset, as Kafka answers) or the error of a
partition no longer hosted; any other failure (EIO, EMFILE, a file removed behind the log's back)
is KAFKA_STORAGE_ERROR, as Kafka answers an IOException, logged through the repeat limiter.

A fetch with a replica id (``replica_id`` up to v14, ``replica_state.replica_id`` from v15) is a
follower's, as in Kafka's ReplicaManager.fetchMessages: it reads up to the log end (not the high
watermark), its fetch offset becomes the follower's log end offset on the leader (which may move
the high watermark, wake acks=all produces and add the follower to the ISR), and it is refused
with NOT_LEADER_OR_FOLLOWER when this broker does not lead the partition or the replica is not
one of its assigned replicas, FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH when its
``current_leader_epoch`` is older / newer than the leader's. A consumer's fetch from a replica that
does not lead is NOT_LEADER_OR_FOLLOWER too.

Fetch sessions (KIP-227) are not kept: the response's session id 0 tells clients to send full
fetch requests, which every client supports.
"""

from __future__ import annotations

import errno
import logging
import random
import uuid
from collections.abc import Callable
from typing import cast

import trio

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.messages import FetchRequest, FetchResponse, Records
from broker.replication.partition import Partition, monotonic_ms
from broker.server.context import RequestContext
from broker.server.handlers.base import ApiHandler
from broker.server.log_limits import limiter
from broker.storage import ReadResult
from broker.storage.file_slice import FileSlice

PartitionData = FetchResponse.PartitionData
# The partition hosted under a name and index now (raises KafkaError when there is none).
Lookup = Callable[[str, int], Partition]

log = logging.getLogger(__name__)
_limited = limiter(log)

# Where the pins of an answer start among its partitions with data: ``rotation(n)`` in [0, n).
rotation: Callable[[int], int] = random.randrange
# A slice's segment went between the read and the slice: read again.
_VANISHED = frozenset({errno.ENOENT, errno.EBADF})
_OUT_OF_FILES = frozenset({errno.EMFILE, errno.ENFILE})


class _Wanted:
    """One requested partition, resolved once, read on every pass."""

    __slots__ = ("topic_name", "topic_id", "request", "partition", "error", "read_error", "read_max_bytes",
                 "min_one_batch", "follower")

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
        self.read_max_bytes = 0  # the limits of the latest read, to read again alike
        self.min_one_batch = False
        self.follower = False  # a follower's fetch: read up to the log end

    def read(self) -> ReadResult:
        assert self.partition is not None
        read = self.partition.read_for_follower if self.follower else self.partition.read
        return read(self.request.fetch_offset, self.read_max_bytes, min_one_batch=self.min_one_batch)


def replica_id_of(request: FetchRequest, version: int) -> int:
    """The fetching replica's broker id; negative for a consumer."""
    return request.replica_state.replica_id if version >= 15 else request.replica_id


def _resolve_follower(ctx: RequestContext, request: FetchRequest, replica_id: int) -> list[_Wanted]:
    """A follower's fetch: partitions by the replica manager's own names and ids (a follower
    may fetch before this broker's metadata lists the topic), each fetch offset recorded."""
    replicas = ctx.services.replicas
    by_id = ctx.version >= 13
    timestamp = monotonic_ms()
    wanted: list[_Wanted] = []
    for fetch_topic in request.topics:
        name = replicas.name_of(fetch_topic.topic_id) if by_id else fetch_topic.topic
        for fp in fetch_topic.partitions:
            partition: Partition | None = None
            error = ErrorCode.NONE
            if name is None:
                error = ErrorCode.UNKNOWN_TOPIC_ID
            else:
                try:
                    partition = replicas.get(name, fp.partition)
                    partition.check_leader_epoch(fp.current_leader_epoch)
                    partition.update_follower_fetch(replica_id, fp.fetch_offset, timestamp)
                except KafkaError as exc:
                    error = exc.code
                    partition = None
            topic_id = partition.topic_id if partition is not None else fetch_topic.topic_id
            w = _Wanted(name or "", topic_id, fp, partition, error)
            w.follower = True
            wanted.append(w)
    return wanted


def _resolve(ctx: RequestContext, request: FetchRequest) -> list[_Wanted]:
    replica_id = replica_id_of(request, ctx.version)
    if replica_id >= 0:
        return _resolve_follower(ctx, request, replica_id)
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
                    if not partition.is_leader:
                        raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
                except KafkaError as exc:
                    error = exc.code
                    partition = None
            wanted.append(_Wanted(name, topic_id, fp, partition, error))
    return wanted


def _read_all(wanted: list[_Wanted], max_bytes: int, lookup: Lookup) -> tuple[list[ReadResult | None], int, bool]:
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
        w.read_max_bytes, w.min_one_batch = max(budget, 0), total == 0
        try:
            if budget > 0 or total == 0:
                result = w.read()
                total += result.length
        except KafkaError as exc:
            w.read_error = exc.code
            any_error = True
        except OSError as exc:  # reading batch headers (EIO, EMFILE, a file gone): this partition only
            w.read_error = _read_failed(w, exc, lookup)
            any_error = True
        out.append(result)
    return out, total, any_error


def _answers(wanted: list[_Wanted], reads: list[ReadResult | None], lookup: Lookup) -> list[PartitionData]:
    """The partition answers, each record set a FileSlice of its segment file (the server
    sends it from the file and closes it; see :func:`close_slices`). No await may come between
    the read and this call: the log could change in between."""
    slices: list[FileSlice | None] = [None] * len(wanted)
    try:
        _cut_slices(wanted, reads, slices, lookup)
        return [_answer(w, piece) for w, piece in zip(wanted, slices, strict=True)]
    except BaseException:
        for piece in slices:
            if piece is not None:
                piece.close()
        raise


def _cut_slices(wanted: list[_Wanted], reads: list[ReadResult | None], slices: list[FileSlice | None],
                lookup: Lookup) -> None:
    """Fill ``slices`` with a pinned slice for each partition that has data and gets a pin (see
    the module's docstring): from a random one on, the first over the budget if it must be."""
    with_data = [i for i, result in enumerate(reads) if result is not None and result.length > 0]
    if not with_data:
        return
    start = rotation(len(with_data))
    answered = False
    for i in with_data[start:] + with_data[:start]:
        w = wanted[i]
        result = reads[i]
        assert result is not None
        try:
            piece = _open_slice(w, result, lookup, over_budget=not answered)
        except KafkaError as exc:  # read again after the segment vanished: the log's answer now
            w.read_error = exc.code
            continue
        except OSError as exc:
            w.read_error = _read_failed(w, exc, lookup)
            if exc.errno in _OUT_OF_FILES:
                return  # the rest would fail alike: answered without records, fetched again
            continue
        if piece is not None:
            slices[i] = piece
            answered = True


def _open_slice(w: _Wanted, result: ReadResult, lookup: Lookup, *, over_budget: bool) -> FileSlice | None:
    """The read's slice; None when the budget is spent (never when ``over_budget``) or when a
    read made again finds no data. Raises KafkaError (the answer of a read made again) or
    OSError."""
    try:
        return result.open_slice(within_budget=not over_budget)
    except OSError as exc:
        if exc.errno not in _VANISHED:
            raise
    # The segment was deleted or replaced between the read and now (retention, the cleaner, a
    # topic deleted in a worker thread): read once more from the log as it is now. A second
    # failure is a storage error.
    if w.partition is None or _hosted(w, lookup) is not w.partition:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    again = w.read()
    return again.open_slice(within_budget=not over_budget)


def _hosted(w: _Wanted, lookup: Lookup) -> Partition | None:
    try:
        return lookup(w.topic_name, w.request.partition)
    except KafkaError:
        return None


def _read_failed(w: _Wanted, exc: OSError, lookup: Lookup) -> ErrorCode:
    """The error code for a partition whose read or slice failed with ``exc``."""
    if _hosted(w, lookup) is not w.partition:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # deleted meanwhile: its files went with it
    _limited.error("fetch read failed", "fetch of %s-%d at offset %d answered KAFKA_STORAGE_ERROR: %s",
                   w.topic_name, w.request.partition, w.request.fetch_offset, exc)
    return ErrorCode.KAFKA_STORAGE_ERROR


def _answer(w: _Wanted, records: FileSlice | None) -> PartitionData:
    if w.partition is None:
        return PartitionData(partition_index=w.request.partition, error_code=w.error,
                             high_watermark=-1, last_stable_offset=-1, log_start_offset=-1)
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
    lookup = ctx.services.replicas.get
    max_bytes = min(request.max_bytes, ctx.config.fetch_max_bytes) if ctx.version >= 3 else ctx.config.fetch_max_bytes
    deadline = trio.current_time() + max(request.max_wait_ms, 0) / 1000
    while True:
        reads, total, any_error = _read_all(wanted, max_bytes, lookup)
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
    parts = _answers(wanted, reads, lookup)
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
