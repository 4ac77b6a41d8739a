"""Followers: one fetcher per source broker, copying its partitions' batches as bytes.

Kafka's ReplicaFetcherThread/AbstractFetcherThread, with ``num.replica.fetchers`` = 1: a task per
leader broker, in the replica manager's nursery, with one connection (broker/client) to the
leader's inter-broker listener. For each partition it follows:

1. **Truncation first** (KIP-101/279), never by the high watermark alone: it asks the leader
   (OffsetForLeaderEpoch, our replica id) for the end offset of our latest leader epoch and
   truncates to min(that, our log end); when the leader answers with an older epoch than ours, we
   truncate to our own end of that epoch and ask again. What is cut goes to quarantine
   (broker/storage/truncation.py), in a worker thread.
2. **Fetch** with our replica id from our log end offset (``replica.fetch.max.bytes`` per
   partition, ``replica.fetch.wait.max.ms``, ``replica.fetch.min.bytes``); the leader's batches
   are appended as they are (``Log.append_as_follower``: no decoding, no offset patching). Our
   high watermark becomes min(the leader's, our log end).

Fetches go through an incremental fetch session (KIP-227; the leader's side is
broker/server/fetch_sessions.py), as Kafka's FetchSessionHandler: the first fetch on a connection
is full (epoch 0, every fetchable partition) and opens a session; later ones name only the
partitions whose fetch state changed (their fetch offset moved: an append, a truncation, the
leader's log start applied; or they became fetchable) and forget the ones that stopped being
fetchable (truncating, backing off, removed). A round's work is proportional to what changed:
the fetcher keeps the changed partitions (``_dirty``), those to truncate and the backoffs (a
heap), and never walks every partition it follows except to build a full fetch. A session
error (FETCH_SESSION_ID_NOT_FOUND: evicted, or the leader restarted; INVALID_FETCH_SESSION_EPOCH)
or a new connection starts over with a full fetch; a leader that keeps no session for us
(session id 0) gets full fetches every round, as before sessions.

Errors back off ``replica.fetch.backoff.ms`` (through broker/retry.py for the connection; per
partition for a partition's error), so a dead leader is never spun on. OFFSET_OUT_OF_RANGE below
the leader's log start empties our log and starts at the leader's log start (Kafka's
truncateFullyAndStartAt); above it, truncation by epoch runs again. A partition whose leader
fences our epoch waits for the controller's next LeaderAndIsr. An append the disk refuses (full,
failing) is reported to the broker's DirHealth as a leader's is (broker/replication/dir_health.py):
in ZooKeeper mode its log dir goes offline, with every replica in it.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import trio

from broker import metrics
from broker.client.connection import BrokerConnection, ClientError, open_connection
from broker.client.fetch import whole_batches
from broker.clock import now_ms
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.messages import (
    FetchRequest,
    FetchResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from broker.replication.dir_health import DirHealth
from broker.replication.partition import Partition
from broker.retry import Backoff, retry, worth_reporting
from broker.storage.epoch_cache import UNDEFINED_EPOCH, UNDEFINED_OFFSET

if TYPE_CHECKING:
    from broker.client.connection import ClientSecurity

__all__ = ["Fetcher", "FetcherSettings"]

log = logging.getLogger(__name__)

Key = tuple[str, int]
# A partition's fetch state as the leader's session holds it: fetch offset, leader epoch, log start.
FetchState = tuple[int, int, int]
INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
_EPOCH_MAX = 2**31 - 1
# Kafka's replica.fetch.response.max.bytes default: the bound of one whole fetch answer.
RESPONSE_MAX_BYTES = 10 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class FetcherSettings:
    broker_id: int
    max_bytes: int = 1048576  # replica.fetch.max.bytes
    wait_max_ms: int = 500  # replica.fetch.wait.max.ms
    min_bytes: int = 1  # replica.fetch.min.bytes
    backoff_ms: int = 1000  # replica.fetch.backoff.ms
    socket_timeout_ms: int = 30000  # replica.socket.timeout.ms
    # TLS and SASL toward the leaders' inter-broker listener (security.client.inter_broker_security);
    # None: PLAINTEXT.
    security: ClientSecurity | None = None

    @property
    def backoff(self) -> Backoff:
        seconds = max(self.backoff_ms, 1) / 1000
        return Backoff(seconds, seconds)


@dataclass(slots=True, eq=False)
class _Following:
    partition: Partition
    needs_truncation: bool = True
    delayed_until: float = -math.inf  # trio time before which this partition is not fetched
    last_error: ErrorCode = ErrorCode.NONE
    sent: FetchState | None = None  # what the leader's session holds for it; None: not in it

    @property
    def key(self) -> Key:
        return (self.partition.topic, self.partition.index)

    def state(self) -> FetchState:
        p = self.partition
        return (p.log.log_end_offset, p.leader_epoch, p.log.log_start_offset)

    def fetchable(self, now: float) -> bool:
        return not self.needs_truncation and self.delayed_until <= now


@dataclass(slots=True)
class _Session:
    """Our side of the fetch session with the leader (Kafka's FetchSessionHandler)."""

    id: int = INVALID_SESSION_ID
    epoch: int = INITIAL_EPOCH  # of the next request: INITIAL asks for a full fetch
    members: dict[Key, uuid.UUID] = field(default_factory=dict)  # what the leader's session holds

    def restart(self, *, close: bool) -> None:
        """Next fetch full; ``close``: naming the old session so the leader drops it."""
        if not close:
            self.id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self.members.clear()


class Fetcher:
    """Fetches the partitions this broker follows from one leader broker."""

    def __init__(self, settings: FetcherSettings, source_id: int, host: str, port: int, *,
                 health: DirHealth | None = None) -> None:
        self.settings = settings
        # The broker's one record of failing log dirs (the replica manager's); its own without one.
        self._health = health if health is not None else DirHealth()
        self.source_id = source_id
        self.host = host
        self.port = port
        self._partitions: dict[Key, _Following] = {}
        # What the next round looks at, so that it never walks every partition (see the module).
        self._dirty: dict[Key, None] = {}  # fetch state changed since the last request
        self._truncating: dict[Key, None] = {}
        self._delays: list[tuple[float, int, Key]] = []  # (until, tie-breaker, key), a heap
        self._tie = itertools.count()
        self._session = _Session()
        self._names: dict[uuid.UUID, str] = {}  # topic names by id, for answers by id (v13+)
        self._changed = trio.Event()
        # Held while a truncation runs in a worker thread: a partition is removed (to lead it,
        # or to stop it) only between truncations, never while its log is being cut.
        self._busy = trio.Lock()
        self._scope = trio.CancelScope()
        self.connected = False

    def __repr__(self) -> str:
        return f"Fetcher(from broker {self.source_id} at {self.host}:{self.port}, {len(self._partitions)} partitions)"

    # -- the replica manager's side -----------------------------------------------------------

    def add(self, partition: Partition) -> None:
        """Follow `partition` from this fetcher's broker: truncate by epoch, then fetch."""
        key = (partition.topic, partition.index)
        self._partitions[key] = _Following(partition)
        self._names[partition.topic_id] = partition.topic
        self._truncating[key] = None
        self._dirty[key] = None
        self._wake()

    async def remove(self, key: Key) -> Partition | None:
        """Stop following `key`; returns once no truncation of it is under way."""
        async with self._busy:
            following = self._partitions.pop(key, None)
        self._dirty[key] = None  # forgotten by the leader's session with the next fetch
        self._truncating.pop(key, None)
        return following.partition if following is not None else None

    def partitions(self) -> list[Key]:
        return list(self._partitions)

    def follows(self, key: Key) -> bool:
        return key in self._partitions

    def stop(self) -> None:
        self._scope.cancel()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    # -- the task -------------------------------------------------------------------------

    async def run(self) -> None:
        """Fetch until stopped; a lost or refused connection is retried after the backoff."""
        def failed(exc: Exception, n: int) -> None:
            self.connected = False
            if not isinstance(exc, (ClientError, KafkaError, OSError)):
                # A defect here must not stop replication of every other partition: logged in
                # full, then the fetcher starts over after the backoff, as Kafka's does.
                log.error("replica fetcher from broker %d failed", self.source_id, exc_info=exc)
            elif worth_reporting(n):
                log.warning("replica fetcher from broker %d (%s:%d): %s; retrying every %d ms (failure %d)",
                            self.source_id, self.host, self.port, exc, self.settings.backoff_ms, n)

        with self._scope:
            await retry(self._connected, retriable=lambda exc: True,
                        backoff=self.settings.backoff, on_failure=failed, deadline=math.inf)

    async def _connected(self) -> None:
        async with open_connection(self.host, self.port, client_id=f"broker-{self.settings.broker_id}-fetcher",
                                   request_timeout_s=self.settings.socket_timeout_ms / 1000,
                                   security=self.settings.security) as conn:
            self.connected = True
            self._session.restart(close=True)  # a new connection: full, closing the old session
            log.info("replica fetcher connected to broker %d at %s:%d", self.source_id, self.host, self.port)
            while True:
                await self._one_round(conn)

    async def _one_round(self, conn: BrokerConnection) -> None:
        now = trio.current_time()
        while self._delays and self._delays[0][0] <= now:
            _, _, key = heapq.heappop(self._delays)
            self._dirty[key] = None  # its backoff ended: fetchable again (or truncated first)
        to_truncate = [f for key in list(self._truncating) if (f := self._partitions.get(key)) is not None
                       and f.needs_truncation and f.delayed_until <= now]
        if to_truncate:
            async with self._busy:
                await self._truncate(conn, [f for f in to_truncate if self._current(f)])
            for f in to_truncate:
                if not f.needs_truncation:
                    self._truncating.pop(f.key, None)
                    self._dirty[f.key] = None
            return
        if self._session.epoch == INITIAL_EPOCH:
            ready = [f for f in self._partitions.values() if f.fetchable(now)]
            forget: list[Key] = []
        else:
            ready, forget = self._changes(now)
        if not ready and not forget and not self._session.members:
            later = self._delays[0][0] if self._delays else math.inf
            with trio.move_on_at(later):
                await self._changed.wait()
            return
        await self._fetch(conn, ready, forget)

    def _changes(self, now: float) -> tuple[list[_Following], list[Key]]:
        """For an incremental fetch: the changed partitions to send, the ones to forget."""
        ready: list[_Following] = []
        forget: list[Key] = []
        members = self._session.members
        for key in self._dirty:
            f = self._partitions.get(key)
            if f is not None and f.fetchable(now):
                if key not in members or f.sent != f.state():
                    ready.append(f)
            elif key in members:
                forget.append(key)
        return ready, forget

    def _current(self, following: _Following) -> bool:
        p = following.partition
        return self._partitions.get((p.topic, p.index)) is following

    def _delay(self, following: _Following, code: ErrorCode, what: str) -> None:
        p = following.partition
        following.delayed_until = trio.current_time() + self.settings.backoff_ms / 1000
        heapq.heappush(self._delays, (following.delayed_until, next(self._tie), following.key))
        self._dirty[following.key] = None  # forgotten by the session while it backs off
        if code != following.last_error:
            log.warning("%s-%d: %s from leader %d answered %s; retrying every %d ms", p.topic, p.index, what,
                        self.source_id, code.name, self.settings.backoff_ms)
        following.last_error = code

    # -- truncation (KIP-279) ---------------------------------------------------------------

    async def _truncate(self, conn: BrokerConnection, todo: list[_Following]) -> None:
        asks: list[tuple[_Following, int]] = []
        for f in todo:
            partition_log = f.partition.log
            epoch = partition_log.epochs.latest_epoch
            if epoch == UNDEFINED_EPOCH:
                # Nothing we hold carries an epoch: an empty log needs no truncation; otherwise
                # (batches without epochs) Kafka's fallback, the high watermark.
                if partition_log.log_end_offset > partition_log.high_watermark:
                    await self._cut(f, partition_log.high_watermark, "no leader epoch: truncated to the high watermark")
                f.needs_truncation = False
                continue
            asks.append((f, epoch))
        if not asks:
            return
        by_topic: dict[str, list[OffsetForLeaderEpochRequest.OffsetForLeaderPartition]] = {}
        for f, epoch in asks:
            by_topic.setdefault(f.partition.topic, []).append(OffsetForLeaderEpochRequest.OffsetForLeaderPartition(
                partition=f.partition.index, current_leader_epoch=f.partition.leader_epoch, leader_epoch=epoch))
        request = OffsetForLeaderEpochRequest(
            replica_id=self.settings.broker_id,
            topics=[OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic=t, partitions=ps)
                    for t, ps in by_topic.items()])
        response: OffsetForLeaderEpochResponse = await conn.request(request)
        answers = {(t.topic, p.partition): p for t in response.topics for p in t.partitions}
        for f, epoch in asks:
            p = f.partition
            answer = answers.get((p.topic, p.index))
            if not self._current(f):
                continue
            if answer is None:
                self._delay(f, ErrorCode.UNKNOWN_SERVER_ERROR, "OffsetForLeaderEpoch (no answer for it)")
                continue
            code = ErrorCode(answer.error_code)
            if code != ErrorCode.NONE:
                self._delay(f, code, "OffsetForLeaderEpoch")
                continue
            await self._truncate_one(f, epoch, answer.leader_epoch, answer.end_offset)

    async def _truncate_one(self, f: _Following, asked: int, leader_epoch: int, leader_end: int) -> None:
        """Kafka's getOffsetTruncationState: where to cut, and whether to ask again."""
        partition_log = f.partition.log
        end = partition_log.log_end_offset
        done = True
        if leader_epoch == UNDEFINED_EPOCH or leader_end == UNDEFINED_OFFSET:
            target = min(partition_log.high_watermark, end)
            why = "the leader knows no epoch up to ours: truncated to the high watermark"
        elif leader_epoch == asked:
            target = min(leader_end, end)
            why = f"the leader's epoch {leader_epoch} ends at {leader_end}"
        else:
            own_epoch, own_end = partition_log.end_offset_for_epoch(leader_epoch)
            if own_end == UNDEFINED_OFFSET:
                target = min(leader_end, end)
                why = f"the leader's epoch {leader_epoch} ends at {leader_end}; we hold no epoch up to it"
            elif own_epoch != leader_epoch:
                target, done = min(own_end, end), False
                why = f"we do not hold the leader's epoch {leader_epoch}: cut to our end of epoch {own_epoch}"
            else:
                target = min(leader_end, own_end)
                why = f"the leader's epoch {leader_epoch} ends at {leader_end}, ours at {own_end}"
        if target < end:
            await self._cut(f, target, why)
        f.needs_truncation = not done
        f.last_error = ErrorCode.NONE

    async def _cut(self, f: _Following, offset: int, why: str, *, fully: bool = False) -> None:
        """Truncate (or, `fully`, empty and restart at `offset`): planned and finished here,
        the quarantine's copies and fsyncs in a worker thread."""
        p = f.partition
        log.info("%s-%d: truncating from %d to %d (%s)", p.topic, p.index, p.log.log_end_offset, offset, why)
        plan = p.log.plan_truncation(offset, reason=why, fully=fully)
        if plan is None:
            return
        try:
            await trio.to_thread.run_sync(plan.run)
        finally:
            if plan.done:
                p.log.finish_truncation(plan)

    # -- fetching ---------------------------------------------------------------------------

    def _request(self, ready: list[_Following], forget: list[Key]) -> FetchRequest:
        me = self.settings.broker_id
        by_topic: dict[str, list[_Following]] = {}
        for f in ready:
            by_topic.setdefault(f.partition.topic, []).append(f)
        forgotten: dict[str, list[int]] = {}
        for topic, index in forget:
            forgotten.setdefault(topic, []).append(index)
        members = self._session.members
        return FetchRequest(
            replica_id=me,
            replica_state=FetchRequest.ReplicaState(replica_id=me, replica_epoch=-1),
            max_wait_ms=self.settings.wait_max_ms,
            min_bytes=self.settings.min_bytes,
            max_bytes=max(RESPONSE_MAX_BYTES, self.settings.max_bytes),
            isolation_level=0,
            session_id=self._session.id,
            session_epoch=self._session.epoch,
            topics=[FetchRequest.FetchTopic(
                topic=topic, topic_id=fs[0].partition.topic_id,
                partitions=[FetchRequest.FetchPartition(
                    partition=f.partition.index, current_leader_epoch=f.partition.leader_epoch,
                    fetch_offset=f.partition.log.log_end_offset, last_fetched_epoch=f.partition.log.epochs.latest_epoch,
                    log_start_offset=f.partition.log.log_start_offset, partition_max_bytes=self.settings.max_bytes)
                    for f in fs]) for topic, fs in by_topic.items()],
            forgotten_topics_data=[FetchRequest.ForgottenTopic(
                topic=topic, topic_id=members[(topic, indexes[0])], partitions=indexes)
                for topic, indexes in forgotten.items()])

    async def _fetch(self, conn: BrokerConnection, ready: list[_Following], forget: list[Key]) -> None:
        session = self._session
        full = session.epoch == INITIAL_EPOCH
        request = self._request(ready, forget)
        sent = {f.key: (f, f.state()) for f in ready}
        self._dirty.clear()  # what changed is in this request; a failed one starts the session over
        kind = "full" if full else "incremental"
        metrics.REPLICA_FETCH_REQUESTS.labels(kind).inc()
        metrics.REPLICA_FETCH_PARTITIONS.labels(kind).inc(len(ready))
        try:
            response: FetchResponse = await conn.request(request)
        except BaseException:
            session.restart(close=True)
            raise
        code = ErrorCode(response.error_code)
        if code in (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH):
            # Evicted, or the leader restarted, or an epoch went astray: start over with a full fetch.
            log.info("fetch session %d with broker %d: %s; starting over with a full fetch", session.id,
                     self.source_id, code.name)
            session.restart(close=code == ErrorCode.INVALID_FETCH_SESSION_EPOCH)
            return
        if code != ErrorCode.NONE:
            session.restart(close=True)
            raise KafkaError(code, f"fetch from broker {self.source_id}")
        self._session_answered(response.session_id, full, sent, forget)
        out_of_range: list[tuple[_Following, int]] = []
        for topic in response.responses:
            name = topic.topic or self._names.get(topic.topic_id, "")
            for answer in topic.partitions:
                f = self._partitions.get((name, answer.partition_index))
                # Removed (or re-added) while the fetch was out, or moved here since it was sent.
                if f is None or f.sent is None or f.partition.log.log_end_offset != f.sent[0]:
                    continue
                code = ErrorCode(answer.error_code)
                if code == ErrorCode.NONE:
                    self._apply(f, answer)
                elif code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    out_of_range.append((f, answer.log_start_offset))
                else:
                    self._delay(f, code, "fetch")
        for f, leader_start in out_of_range:
            async with self._busy:
                if self._current(f):
                    await self._out_of_range(f, leader_start)

    def _session_answered(self, session_id: int, full: bool, sent: dict[Key, tuple[_Following, FetchState]],
                          forget: list[Key]) -> None:
        """The leader answered: note what its session holds now."""
        session = self._session
        members = session.members
        if session_id == INVALID_SESSION_ID:
            # No session (no room in the leader's cache, or every partition forgotten): every
            # fetch is full; what the answer carries was fetched from what we sent.
            session.restart(close=False)
            for f, state in sent.values():
                f.sent = state
            return
        if full:
            members.clear()
            session.id = session_id
        for key in forget:
            members.pop(key, None)
        for key, (f, state) in sent.items():
            f.sent = state
            members[key] = f.partition.topic_id
        session.epoch = 1 if session.epoch == _EPOCH_MAX else session.epoch + 1

    def _apply(self, f: _Following, answer: FetchResponse.PartitionData) -> None:
        p = f.partition
        partition_log = p.log
        data = whole_batches(answer.records) if answer.records else b""
        try:
            if data:
                partition_log.append_as_follower(data, now_ms=now_ms())
        except KafkaError as exc:
            # Not where we stand (the leader changed its log under us): find out by epoch again.
            log.warning("%s-%d: follower append refused (%s); truncating by leader epoch again",
                        p.topic, p.index, exc)
            self._truncate_again(f)
            return
        except OSError as exc:
            # A follower's write failure is its log dir's, as a leader's is (Kafka's follower
            # append reports it to the LogDirFailureChannel): in ZooKeeper mode the dir goes
            # offline and the replica manager stops this partition; until then it backs off.
            error = self._health.failed(partition_log.directory.parent, exc,
                                        f"appending to {p.topic}-{p.index} as a follower")
            self._delay(f, error.code, f"appending what the leader sent ({exc})")
            return
        f.last_error = ErrorCode.NONE
        p.follow_leader_offsets(answer.high_watermark, answer.log_start_offset)
        if f.state() != f.sent:
            self._dirty[f.key] = None  # the next fetch tells the leader

    async def _out_of_range(self, f: _Following, leader_start: int) -> None:
        p = f.partition
        if leader_start >= 0 and p.log.log_end_offset < leader_start:
            why = (f"fetch offset {p.log.log_end_offset} is below the leader's log start {leader_start}: "
                   f"the log starts over there")
            log.warning("%s-%d: %s", p.topic, p.index, why)
            await self._cut(f, leader_start, why, fully=True)
            self._dirty[f.key] = None
        else:
            self._truncate_again(f)

    def _truncate_again(self, f: _Following) -> None:
        f.needs_truncation = True
        self._truncating[f.key] = None
        self._dirty[f.key] = None  # forgotten by the session meanwhile
