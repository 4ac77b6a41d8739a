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

Errors back off ``replica.fetch.backoff.ms`` (through broker/retry.py for the connection; per
partition for a partition's error), so a dead leader is never spun on. OFFSET_OUT_OF_RANGE below
the leader's log start empties our log and starts at the leader's log start (Kafka's
truncateFullyAndStartAt); above it, truncation by epoch runs again. A partition whose leader
fences our epoch waits for the controller's next LeaderAndIsr.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import trio

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
from broker.replication.partition import Partition
from broker.retry import Backoff, retry, worth_reporting
from broker.storage.epoch_cache import UNDEFINED_EPOCH, UNDEFINED_OFFSET

__all__ = ["Fetcher", "FetcherSettings"]

log = logging.getLogger(__name__)

Key = tuple[str, int]
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


class Fetcher:
    """Fetches the partitions this broker follows from one leader broker."""

    def __init__(self, settings: FetcherSettings, source_id: int, host: str, port: int) -> None:
        self.settings = settings
        self.source_id = source_id
        self.host = host
        self.port = port
        self._partitions: dict[Key, _Following] = {}
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
        self._partitions[(partition.topic, partition.index)] = _Following(partition)
        self._wake()

    async def remove(self, key: Key) -> Partition | None:
        """Stop following `key`; returns once no truncation of it is under way."""
        async with self._busy:
            following = self._partitions.pop(key, None)
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
                                   request_timeout_s=self.settings.socket_timeout_ms / 1000) as conn:
            self.connected = True
            log.info("replica fetcher connected to broker %d at %s:%d", self.source_id, self.host, self.port)
            while True:
                await self._one_round(conn)

    async def _one_round(self, conn: BrokerConnection) -> None:
        now = trio.current_time()
        to_truncate = [f for f in self._partitions.values() if f.needs_truncation and f.delayed_until <= now]
        if to_truncate:
            async with self._busy:
                await self._truncate(conn, [f for f in to_truncate if self._current(f)])
            return
        ready = [f for f in self._partitions.values() if not f.needs_truncation and f.delayed_until <= now]
        if not ready:
            later = [f.delayed_until for f in self._partitions.values()]
            with trio.move_on_at(min(later) if later else math.inf):
                await self._changed.wait()
            return
        await self._fetch(conn, ready)

    def _current(self, following: _Following) -> bool:
        p = following.partition
        return self._partitions.get((p.topic, p.index)) is following

    def _delay(self, following: _Following, code: ErrorCode, what: str) -> None:
        p = following.partition
        following.delayed_until = trio.current_time() + self.settings.backoff_ms / 1000
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

    async def _fetch(self, conn: BrokerConnection, ready: list[_Following]) -> None:
        me = self.settings.broker_id
        by_topic: dict[str, list[_Following]] = {}
        for f in ready:
            by_topic.setdefault(f.partition.topic, []).append(f)
        request = FetchRequest(
            replica_id=me,
            replica_state=FetchRequest.ReplicaState(replica_id=me, replica_epoch=-1),
            max_wait_ms=self.settings.wait_max_ms,
            min_bytes=self.settings.min_bytes,
            max_bytes=max(RESPONSE_MAX_BYTES, self.settings.max_bytes),
            isolation_level=0,
            session_id=0,
            session_epoch=-1,  # no fetch session (KIP-227): full requests
            topics=[FetchRequest.FetchTopic(
                topic=topic, topic_id=fs[0].partition.topic_id,
                partitions=[FetchRequest.FetchPartition(
                    partition=f.partition.index, current_leader_epoch=f.partition.leader_epoch,
                    fetch_offset=f.partition.log.log_end_offset, last_fetched_epoch=f.partition.log.epochs.latest_epoch,
                    log_start_offset=f.partition.log.log_start_offset, partition_max_bytes=self.settings.max_bytes)
                    for f in fs]) for topic, fs in by_topic.items()])
        sent = {(f.partition.topic, f.partition.index): (f, f.partition.log.log_end_offset) for f in ready}
        by_id = {fs[0].partition.topic_id: topic for topic, fs in by_topic.items()}
        response: FetchResponse = await conn.request(request)
        if response.error_code != ErrorCode.NONE:
            raise KafkaError(ErrorCode(response.error_code), f"fetch from broker {self.source_id}")
        out_of_range: list[tuple[_Following, int]] = []
        for topic in response.responses:
            name = topic.topic or by_id.get(topic.topic_id, "")
            for answer in topic.partitions:
                entry = sent.get((name, answer.partition_index))
                if entry is None or not self._current(entry[0]):
                    continue  # removed (or re-added) while the fetch was out
                f, fetch_offset = entry
                if f.partition.log.log_end_offset != fetch_offset:
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
            f.needs_truncation = True
            return
        except OSError as exc:
            self._delay(f, ErrorCode.KAFKA_STORAGE_ERROR, f"appending what the leader sent ({exc})")
            return
        f.last_error = ErrorCode.NONE
        hw = min(answer.high_watermark, partition_log.log_end_offset)
        if hw > partition_log.high_watermark:
            partition_log.high_watermark = hw
        leader_start = answer.log_start_offset
        if partition_log.log_start_offset < leader_start <= partition_log.high_watermark:
            partition_log.delete_records_before(leader_start)  # the leader's retention moved it

    async def _out_of_range(self, f: _Following, leader_start: int) -> None:
        p = f.partition
        if leader_start >= 0 and p.log.log_end_offset < leader_start:
            why = (f"fetch offset {p.log.log_end_offset} is below the leader's log start {leader_start}: "
                   f"the log starts over there")
            log.warning("%s-%d: %s", p.topic, p.index, why)
            await self._cut(f, leader_start, why, fully=True)
        else:
            f.needs_truncation = True
