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

Fetch sessions (KIP-227, from v7): a full fetch with session epoch 0 creates a session in the
broker's cache (broker/server/fetch_sessions.py, which states the semantics and bounds) and is
answered with its id; an incremental fetch updates the session from its partitions and forgotten
topics, then reads, waits on and answers only the session's partitions that changed, so the work
of a round is proportional to what changed, not to the partitions followed.

Every answer carries the partition's last stable offset. A consumer's fetch with
``isolation_level`` 1 (read_committed) reads only below it and is answered the aborted
transactions its records overlap (broker/storage/txn_index.py: index lookups, no record is read),
an empty list when it has no records; a read_uncommitted one gets null, as Kafka answers.

With an authorizer, as Kafka's KafkaApis: a follower's fetch needs ClusterAction on the cluster, a
consumer's Read on each topic; a partition refused is answered TOPIC_AUTHORIZATION_FAILED (a
consumer's partition of an unknown topic id is UNKNOWN_TOPIC_ID first, as in Kafka) and is never
read, nor is a refused follower's fetch offset recorded. The decision is made once per topic per
request, and again at every round of a session (a session's partition is resolved again each time
it is read), so an ACL removed during a session stops the next read of the topic.
"""

from __future__ import annotations

import errno
import logging
import random
import uuid
from collections.abc import Awaitable, Callable
from typing import cast

import trio

from broker.log_limits import limiter
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.messages import FetchRequest, FetchResponse, Records
from broker.replication.partition import Partition, monotonic_ms
from broker.server import request_metrics
from broker.server.context import RequestContext
from broker.server.fetch_sessions import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    UNKNOWN_MAX,
    CachedPartition,
    FetchSession,
    key_of,
    next_epoch,
)
from broker.server.handlers.base import ApiHandler
from broker.storage import ReadResult
from broker.storage.file_slice import FileSlice
from broker.storage.handles import OUT_OF_FILES
from security.acl import Operation, ResourceType

PartitionData = FetchResponse.PartitionData
READ_COMMITTED = 1  # isolation_level: stop at the last stable offset
# The partition hosted under a name and index now (raises KafkaError when there is none).
Lookup = Callable[[str, int], Partition]

log = logging.getLogger(__name__)
_limited = limiter(log)

# Where the pins of an answer start among its partitions with data: ``rotation(n)`` in [0, n).
rotation: Callable[[int], int] = random.randrange
# A slice's segment went between the read and the slice: read again.
_VANISHED = frozenset({errno.ENOENT, errno.EBADF})


class Wanted:
    """One requested partition, resolved once, read on every pass."""

    __slots__ = ("topic_name", "topic_id", "request", "partition", "error", "read_error", "read_max_bytes",
                 "min_one_batch", "follower", "read_committed", "read_upper_bound")

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
        self.read_committed = False  # a consumer's isolation_level 1: read up to the last stable offset
        self.read_upper_bound = -1  # read_committed: no offset of the latest read reaches it

    def read(self) -> ReadResult:
        assert self.partition is not None
        if self.follower:
            return self.partition.read_for_follower(self.request.fetch_offset, self.read_max_bytes,
                                                    min_one_batch=self.min_one_batch)
        result = self.partition.read(self.request.fetch_offset, self.read_max_bytes, min_one_batch=self.min_one_batch,
                                     read_committed=self.read_committed)
        if self.read_committed:
            # The aborted transactions of a read lie below the first indexed batch after it (as
            # Kafka bounds them; a few more entries than the read needs tell the consumer nothing
            # wrong) and below the last stable offset.
            bound = self.partition.last_stable_offset
            self.read_upper_bound = bound if result.segment is None else min(bound, result.upper_bound_offset)
        return result


class Access:
    """Who may fetch what in one request: a follower (``replica_id`` >= 0) needs ClusterAction on
    the cluster, a consumer Read on each topic; each decided once for the request. It also
    carries the request's isolation level (``read_committed``: a consumer's level 1)."""

    __slots__ = ("_ctx", "_follower", "_cluster", "_topics", "read_committed")

    def __init__(self, ctx: RequestContext, replica_id: int, isolation_level: int = 0) -> None:
        self._ctx = ctx
        self._follower = replica_id >= 0
        self.read_committed = replica_id < 0 and isolation_level == READ_COMMITTED
        self._cluster: bool | None = None
        self._topics: dict[str, bool] = {}

    def may_fetch(self, topic: str | None) -> bool:
        """``topic`` None: a consumer's topic id this broker does not know (answered
        UNKNOWN_TOPIC_ID, not refused, as Kafka answers it)."""
        if self._ctx.services.acls is None:
            return True
        if self._follower:
            if self._cluster is None:
                self._cluster = self._ctx.authorize_cluster(Operation.CLUSTER_ACTION)
            return self._cluster
        if topic is None:
            return True
        allowed = self._topics.get(topic)
        if allowed is None:
            allowed = self._topics[topic] = self._ctx.authorize(Operation.READ, ResourceType.TOPIC, topic)
        return allowed


def replica_id_of(request: FetchRequest, version: int) -> int:
    """The fetching replica's broker id; negative for a consumer."""
    return request.replica_state.replica_id if version >= 15 else request.replica_id


def _topic_name(ctx: RequestContext, replica_id: int, fetch_topic: FetchRequest.FetchTopic | FetchRequest.ForgottenTopic
                ) -> tuple[str | None, uuid.UUID]:
    """The name and id of a requested topic; None for the name when it is unknown. A follower's
    by the replica manager's own names and ids (a follower may fetch before this broker's
    metadata lists the topic); a consumer's by the controller's metadata."""
    if replica_id >= 0:
        if ctx.version >= 13:
            return ctx.services.replicas.name_of(fetch_topic.topic_id), fetch_topic.topic_id
        return fetch_topic.topic, fetch_topic.topic_id
    controller = ctx.services.controller
    info = (controller.topic_by_id(fetch_topic.topic_id) if ctx.version >= 13
            else controller.topics().get(fetch_topic.topic))
    if info is None:
        return None, fetch_topic.topic_id
    return info.name, info.topic_id


def _resolve_one(ctx: RequestContext, access: Access, replica_id: int, name: str | None, topic_id: uuid.UUID,
                 fp: FetchRequest.FetchPartition, *, timestamp: int | None, requested: str = "") -> Wanted:
    """One partition of a fetch, resolved against what this broker hosts now (``requested``: the
    name to answer an unknown topic under, before v13). A follower's fetch offset is recorded
    when ``timestamp`` is given (the request named the partition: that is the follower's log end
    offset now); otherwise its right to fetch is only checked. A partition ``access`` refuses is
    answered TOPIC_AUTHORIZATION_FAILED, and nothing else is looked at."""
    partition: Partition | None = None
    error = ErrorCode.NONE
    if not access.may_fetch(name if name is not None else (requested or None)):
        error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
    elif name is None:
        error = ErrorCode.UNKNOWN_TOPIC_ID if ctx.version >= 13 else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    else:
        try:
            partition = ctx.services.replicas.get(name, fp.partition)
            partition.check_leader_epoch(fp.current_leader_epoch)
            if replica_id >= 0 and timestamp is not None:
                partition.update_follower_fetch(replica_id, fp.fetch_offset, timestamp)
            elif not partition.is_leader or (replica_id >= 0 and replica_id not in partition.followers):
                raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        except KafkaError as exc:
            error = exc.code
            partition = None
        if partition is not None:
            topic_id = partition.topic_id
    w = Wanted(name if name is not None else requested, topic_id, fp, partition, error)
    w.follower = replica_id >= 0
    w.read_committed = access.read_committed
    return w


def _resolve(ctx: RequestContext, access: Access, request: FetchRequest, replica_id: int) -> list[Wanted]:
    """Every partition the request names, in its order."""
    timestamp = monotonic_ms()
    wanted: list[Wanted] = []
    for fetch_topic in request.topics:
        name, topic_id = _topic_name(ctx, replica_id, fetch_topic)
        requested = fetch_topic.topic if ctx.version < 13 else ""
        for fp in fetch_topic.partitions:
            wanted.append(_resolve_one(ctx, access, replica_id, name, topic_id, fp, timestamp=timestamp,
                                       requested=requested))
    return wanted


def read_all(wanted: list[Wanted], max_bytes: int, lookup: Lookup) -> tuple[list[ReadResult | None], int, bool]:
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


def answers(wanted: list[Wanted], reads: list[ReadResult | None], lookup: Lookup) -> list[PartitionData]:
    """The partition answers, each record set a FileSlice of its segment file (the server
    sends it from the file and closes it; see :func:`close_slices`). No await may come between
    the read and this call: the log could change in between."""
    slices: list[FileSlice | None] = [None] * len(wanted)
    try:
        _cut_slices(wanted, reads, slices, lookup)
        request_metrics.count_fetched(wanted, slices)
        return [answer(w, piece) for w, piece in zip(wanted, slices, strict=True)]
    except BaseException:
        for piece in slices:
            if piece is not None:
                piece.close()
        raise


def _cut_slices(wanted: list[Wanted], reads: list[ReadResult | None], slices: list[FileSlice | None],
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
            if exc.errno in OUT_OF_FILES:
                return  # the rest would fail alike: answered without records, fetched again
            continue
        if piece is not None:
            slices[i] = piece
            answered = True


def _open_slice(w: Wanted, result: ReadResult, lookup: Lookup, *, over_budget: bool) -> FileSlice | None:
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


def _hosted(w: Wanted, lookup: Lookup) -> Partition | None:
    try:
        return lookup(w.topic_name, w.request.partition)
    except KafkaError:
        return None


def _read_failed(w: Wanted, exc: OSError, lookup: Lookup) -> ErrorCode:
    """The error code for a partition whose read or slice failed with ``exc``."""
    if _hosted(w, lookup) is not w.partition:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # deleted meanwhile: its files went with it
    _limited.error("fetch read failed", "fetch of %s-%d at offset %d answered KAFKA_STORAGE_ERROR: %s",
                   w.topic_name, w.request.partition, w.request.fetch_offset, exc)
    return ErrorCode.KAFKA_STORAGE_ERROR


def answer(w: Wanted, records: FileSlice | None) -> PartitionData:
    if w.partition is None:
        # Empty records, not null: librdkafka fails to parse the whole answer at a null record
        # set (Kafka's partitionResponse answers an error with empty records too).
        return PartitionData(partition_index=w.request.partition, error_code=w.error,
                             high_watermark=-1, last_stable_offset=-1, log_start_offset=-1, records=b"")
    aborted: list[FetchResponse.AbortedTransaction] | None = None
    if w.read_committed:
        # Kafka's answer to a read_committed fetch: the aborted transactions its records
        # overlap (index lookups only), an empty list when it has no records.
        aborted = [] if records is None else [
            FetchResponse.AbortedTransaction(producer_id=t.producer_id, first_offset=t.first_offset)
            for t in w.partition.log.aborted_transactions(w.request.fetch_offset, w.read_upper_bound)]
    return PartitionData(
        partition_index=w.request.partition,
        error_code=w.read_error,
        high_watermark=w.partition.high_watermark,
        last_stable_offset=w.partition.last_stable_offset,
        log_start_offset=w.partition.log.log_start_offset,
        aborted_transactions=aborted,
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


async def _wait_appended(wanted: list[Wanted]) -> None:
    """The long poll of a full fetch: until an append to (or a high watermark move of) one of
    its partitions."""
    appended = trio.Event()
    for w in wanted:
        if w.partition is not None:
            w.partition.add_waiter(appended)
    try:
        await appended.wait()
    finally:
        for w in wanted:
            if w.partition is not None:
                w.partition.remove_waiter(appended)


async def _poll(request: FetchRequest, max_bytes: int, lookup: Lookup, pick: Callable[[], list[Wanted]],
                wait: Callable[[list[Wanted]], Awaitable[None]]) -> tuple[list[Wanted], list[ReadResult | None]]:
    """Read what ``pick`` names until ``min_bytes`` are found, an error is, or ``max_wait_ms``
    passes, waiting with ``wait`` in between; the partitions read last and what was found."""
    deadline = trio.current_time() + max(request.max_wait_ms, 0) / 1000
    while True:
        wanted = pick()
        reads, total, any_error = read_all(wanted, max_bytes, lookup)
        if total >= request.min_bytes or any_error or trio.current_time() >= deadline:
            return wanted, reads
        with trio.move_on_at(deadline):
            await wait(wanted)


def _group(answered: list[tuple[Wanted, PartitionData]]) -> list[FetchResponse.FetchableTopicResponse]:
    """Partition answers under their topics, in the order the topics first come."""
    by_topic: dict[tuple[str, uuid.UUID], list[PartitionData]] = {}
    for w, part in answered:
        by_topic.setdefault((w.topic_name, w.topic_id), []).append(part)
    return [FetchResponse.FetchableTopicResponse(topic=name, topic_id=topic_id, partitions=parts)
            for (name, topic_id), parts in by_topic.items()]


def _max_bytes(ctx: RequestContext, request: FetchRequest) -> int:
    if ctx.version >= 3:
        return min(request.max_bytes, ctx.config.fetch_max_bytes)
    return ctx.config.fetch_max_bytes


def _worth_reading_again(w: Wanted, result: ReadResult | None) -> bool:
    """Whether a session reads this partition again next time although nothing told it of a
    change: it had records (answered until the client moves on, as Kafka answers them), an
    error, or it was not read (the answer's byte limits were spent first)."""
    return w.partition is None or w.read_error != ErrorCode.NONE or result is None or result.length > 0


def _included(part: PartitionData, cached: CachedPartition) -> bool:
    """Whether an incremental answer carries the partition (Kafka's maybeUpdateResponseData)."""
    return (bool(part.records) or part.error_code != ErrorCode.NONE or part.high_watermark != cached.high_watermark
            or part.log_start_offset != cached.log_start_offset or part.last_stable_offset != cached.last_stable_offset)


def _hosted_now(ctx: RequestContext, name: str, index: int) -> Partition | None:
    try:
        return ctx.services.replicas.get(name, index) if name else None
    except KafkaError:
        return None


async def _full(ctx: RequestContext, access: Access, request: FetchRequest, replica_id: int, *,
                create: bool) -> FetchResponse:
    """A full fetch: every partition the request names is read and answered; with ``create`` a
    session is made of them when the cache has room (its id answered; 0 otherwise)."""
    lookup = ctx.services.replicas.get
    resolved = _resolve(ctx, access, request, replica_id)
    wanted, reads = await _poll(request, _max_bytes(ctx, request), lookup, lambda: resolved, _wait_appended)
    parts = answers(wanted, reads, lookup)
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
    session = _new_session(ctx, replica_id, wanted, reads, parts) if create else None
    session_id = session.id if session is not None else INVALID_SESSION_ID
    return FetchResponse(error_code=ErrorCode.NONE, session_id=session_id, responses=responses)


def _new_session(ctx: RequestContext, replica_id: int, wanted: list[Wanted], reads: list[ReadResult | None],
                 parts: list[PartitionData]) -> FetchSession | None:
    cache = ctx.services.fetch_sessions
    if cache is None:
        return None
    session = cache.create(monotonic_ms(), replica_id, len(wanted))
    if session is None:
        return None
    for w, result, part in zip(wanted, reads, parts, strict=True):
        cached = CachedPartition(w.topic_name, w.topic_id, w.request, part.high_watermark, part.log_start_offset,
                                 part.last_stable_offset)
        session.put(cached, _hosted_now(ctx, w.topic_name, w.request.partition),
                    pending=_worth_reading_again(w, result))
    if session.unknown > UNKNOWN_MAX:
        cache.remove(session.id)  # names from a peer: no session holds many it cannot resolve
        return None
    return session


def _session_error(code: ErrorCode) -> FetchResponse:
    return FetchResponse(error_code=code, session_id=INVALID_SESSION_ID, responses=[])


def _update_session(ctx: RequestContext, access: Access, session: FetchSession, request: FetchRequest,
                    replica_id: int) -> None:
    """Add or update the request's partitions in the session, remove its forgotten topics'."""
    timestamp = monotonic_ms()
    for fetch_topic in request.topics:
        name, topic_id = _topic_name(ctx, replica_id, fetch_topic)
        requested = fetch_topic.topic if ctx.version < 13 else ""
        for fp in fetch_topic.partitions:
            w = _resolve_one(ctx, access, replica_id, name, topic_id, fp, timestamp=timestamp, requested=requested)
            session.put(CachedPartition(w.topic_name, w.topic_id, fp), _hosted_now(ctx, w.topic_name, fp.partition))
    for forgotten in request.forgotten_topics_data:
        name = forgotten.topic if ctx.version < 13 else session.names.get(forgotten.topic_id, "")
        for index in forgotten.partitions:
            session.forget(key_of(name, forgotten.topic_id, index))


def _pending(ctx: RequestContext, access: Access, session: FetchSession, replica_id: int) -> list[Wanted]:
    """The session's partitions worth reading, resolved against what this broker hosts now."""
    wanted = []
    for key in session.pending:
        cached = session.partitions[key]
        hosted = _hosted_now(ctx, cached.topic, cached.request.partition)
        session.watch(cached, hosted)  # the hosted partition may be new (a topic made again) or gone
        name = cached.topic if cached.topic else None
        wanted.append(_resolve_one(ctx, access, replica_id, name, cached.topic_id, cached.request, timestamp=None,
                                   requested=cached.topic))
    return wanted


async def _incremental(ctx: RequestContext, access: Access, request: FetchRequest, replica_id: int) -> FetchResponse:
    """An incremental fetch (see the module): reads, waits on and answers the session's changed
    partitions only."""
    cache = ctx.services.fetch_sessions
    session = cache.get(request.session_id) if cache is not None else None
    if cache is None or session is None or session.replica_id != replica_id:
        return _session_error(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
    if session.epoch != request.session_epoch:
        return _session_error(ErrorCode.INVALID_FETCH_SESSION_EPOCH)
    _update_session(ctx, access, session, request, replica_id)
    if session.unknown > UNKNOWN_MAX or cache.over_budget():
        cache.remove(session.id)
        return _session_error(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)  # the client starts over: full
    if not session.partitions:
        cache.remove(session.id)  # every partition forgotten: as Kafka, no session is left
        return FetchResponse(error_code=ErrorCode.NONE, session_id=INVALID_SESSION_ID, responses=[])
    session.epoch = expected = next_epoch(request.session_epoch)
    session.last_used_ms = monotonic_ms()
    lookup = ctx.services.replicas.get

    async def wait(_: list[Wanted]) -> None:
        await session.wait_changed()

    wanted, reads = await _poll(request, _max_bytes(ctx, request), lookup,
                                lambda: _pending(ctx, access, session, replica_id), wait)
    parts = answers(wanted, reads, lookup)
    if session.epoch != expected or cache.get(session.id) is not session:
        # Another request of this session came meanwhile (a duplicate), or it was evicted.
        for part in parts:
            if isinstance(part.records, FileSlice):
                part.records.close()
        return _session_error(ErrorCode.INVALID_FETCH_SESSION_EPOCH)
    answered: list[tuple[Wanted, PartitionData]] = []
    for w, result, part in zip(wanted, reads, parts, strict=True):
        key = key_of(w.topic_name, w.topic_id, w.request.partition)
        cached = session.partitions[key]
        again = _worth_reading_again(w, result)
        if _included(part, cached):
            cached.high_watermark, cached.log_start_offset = part.high_watermark, part.log_start_offset
            cached.last_stable_offset = part.last_stable_offset
            answered.append((w, part))
        session.pending.pop(key, None)
        if again:
            session.pending[key] = None  # to the end: the others come first next time (Kafka rotates so)
    return FetchResponse(error_code=ErrorCode.NONE, session_id=session.id, responses=_group(answered))


async def handle(ctx: RequestContext, request: FetchRequest) -> FetchResponse:
    replica_id = replica_id_of(request, ctx.version)
    request_metrics.fetch_from(follower=replica_id >= 0)
    access = Access(ctx, replica_id, request.isolation_level if ctx.version >= 4 else 0)
    if ctx.version < 7 or ctx.services.fetch_sessions is None:
        return await _full(ctx, access, request, replica_id, create=False)
    if request.session_epoch in (INITIAL_EPOCH, FINAL_EPOCH):
        cache = ctx.services.fetch_sessions
        if request.session_id != INVALID_SESSION_ID:
            old = cache.get(request.session_id)
            if old is not None and old.replica_id == replica_id:  # nobody closes another's session
                cache.remove(old.id)
        return await _full(ctx, access, request, replica_id, create=request.session_epoch == INITIAL_EPOCH)
    return await _incremental(ctx, access, request, replica_id)


HANDLER = ApiHandler(ApiKey.FETCH, 4, 17, handle)
