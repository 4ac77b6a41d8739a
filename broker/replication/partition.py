"""A partition replica hosted by this broker: its log, its role, and as leader its ISR and
high watermark (Kafka's Partition.scala).

As leader it tracks each follower's log end offset and the last time it was caught up (Kafka's
``lastCaughtUpTimeMs``), moves the high watermark to the smallest log end offset in the ISR
(never backwards), asks the controller to shrink or expand the ISR through an
:class:`~broker.replication.isr.IsrChannel` (KIP-497: while a change is in flight the high
watermark counts the maximal ISR, the union of the old and the new), and wakes ``acks=all``
produces waiting for the high watermark to pass their batches. A standalone broker leads an ISR
of one: the high watermark follows the log end offset after each append, nothing waits.

As follower it holds the leader's id and epoch; its log is written by the fetcher
(broker/replication/fetcher.py), and its high watermark and log start follow the leader's
(``follow_leader_offsets``), the high watermark capped by its own log end.

Fetches that found too little data wait on the partitions they asked for: they register a
``trio.Event`` here, set by every append and every move of the high watermark.

Incremental fetch sessions (KIP-227, broker/server/fetch_sessions.py) are this partition's
*watchers*: told of every append, high watermark move and role change, so that a session reads
only the partitions that changed. A follower's session names only the partitions whose fetch
offset moved, so an idle partition hears nothing from a live follower; its session's latest
request time stands for the follower's fetch of it: when an append moves the log end away from
a follower that stood at it, the follower was caught up until its session's latest request
(Kafka's rule, "fetched at or past the leader's log end of its previous fetch", applied when the
log end moves rather than when the follower's next fetch of the partition comes).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import trio

from broker import metrics
from broker.controller.model import PartitionInfo
from broker.protocol.control_records import ControlType
from broker.protocol.errors import ErrorCode, KafkaError
from broker.replication.dir_health import DirHealth
from broker.replication.isr import IsrChannel
from broker.storage import AppendResult, Log, ReadResult
from broker.storage.producer_state import VerificationGuard
from broker.storage.truncation import Truncation

__all__ = ["FetchWatcher", "FollowerState", "Partition", "monotonic_ms"]

log = logging.getLogger(__name__)

ZERO_UUID = uuid.UUID(int=0)
# Codes with which the controller refuses an ISR change because this leader's view is stale:
# no retry until its next LeaderAndIsr (Kafka's handling of AlterPartition errors).
_STALE = frozenset({ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.INVALID_UPDATE_VERSION})

Spawn = Callable[[Callable[[], Coroutine[Any, Any, None]]], None]


def monotonic_ms() -> int:
    """The clock of followers' fetch times and ISR lag: trio's (monotonic; a wall-clock step
    must not push every follower out of the ISR, and tests run it on a fake clock)."""
    return int(trio.current_time() * 1000)


class FetchWatcher(Protocol):
    """A fetch session holding this partition (broker/server/fetch_sessions.py)."""

    @property
    def replica_id(self) -> int:
        """The follower whose session it is; negative for a consumer's."""

    @property
    def last_fetch_ms(self) -> int:
        """When the session's latest request came (monotonic_ms)."""

    def touched(self, partition: Partition) -> None:
        """The partition changed: read it for the session's next answer."""


@dataclass(slots=True)
class FollowerState:
    """What the leader knows of one follower (Kafka's Replica state)."""

    log_end_offset: int = -1  # unknown until its first fetch in this leader epoch
    last_caught_up_ms: int = 0
    last_fetch_leader_end: int = -1  # the leader's log end at the follower's previous fetch
    last_fetch_ms: int = 0


class Partition:
    def __init__(self, topic: str, index: int, log: Log, *, leader_epoch: int, is_leader: bool,
                 health: DirHealth | None = None, broker_id: int = 0, topic_id: uuid.UUID = ZERO_UUID,
                 replicas: Sequence[int] | None = None, isr: Sequence[int] | None = None,
                 leader_id: int | None = None, partition_epoch: int = 0) -> None:
        self.topic = topic
        self.topic_id = topic_id
        self._health = health if health is not None else DirHealth()
        self.index = index
        self.log = log
        self.broker_id = broker_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.is_leader = is_leader
        self.leader_id: int | None = broker_id if is_leader else leader_id
        self.replicas: tuple[int, ...] = tuple(replicas) if replicas is not None else (broker_id,)
        self.isr: tuple[int, ...] = tuple(isr) if isr is not None else (broker_id,)
        self.followers: dict[int, FollowerState] = {}
        self.leader_epoch_start_offset = log.log_end_offset
        # An ISR change sent to the controller and not answered yet (KIP-497), and whether the
        # controller refused one as stale (then nothing is tried until the next LeaderAndIsr).
        self.pending_isr: tuple[int, ...] | None = None
        self.isr_change_refused = False
        self.isr_channel: IsrChannel | None = None
        self.spawn: Spawn | None = None  # runs an ISR change in the replica manager's nursery
        self._generation = 0  # bumped by every role or epoch change: stale answers are dropped
        self._demotions = 0  # times this replica stopped leading: acks=all waits end with it
        self._waiters: set[trio.Event] = set()
        self._watchers: set[FetchWatcher] = set()
        # Set when the high watermark, ISR or role changes; made only when an acks=all produce
        # waits, so a standalone append allocates nothing for it.
        self._changed: trio.Event | None = None
        # A failback's cut as leader (truncate_for_failback): where the log was cut, and the
        # replicas not yet seen fetching at or below it, whose logs may still hold the cut tail.
        self.failback_cut = -1
        self.failback_pending: set[int] = set()
        self._failback_cutting = False
        if is_leader:
            self._reset_followers(0)
            if self.maximal_isr == (broker_id,):
                log.high_watermark = log.log_end_offset

    def __repr__(self) -> str:
        role = "leader" if self.is_leader else f"follower of {self.leader_id}"
        return f"Partition({self.topic}-{self.index}, epoch={self.leader_epoch}, {role}, isr={list(self.isr)})"

    @property
    def high_watermark(self) -> int:
        return int(self.log.high_watermark)

    @property
    def under_replicated(self) -> bool:
        return self.is_leader and len(self.isr) < len(self.replicas)

    @property
    def under_min_isr(self) -> bool:
        return self.is_leader and len(self.isr) < self.log.config.min_insync_replicas

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The ISR the high watermark counts: with a change in flight, the old and new together."""
        if self.pending_isr is None:
            return self.isr
        return tuple(sorted(set(self.isr) | set(self.pending_isr)))

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """Fence a client that has newer or older metadata than ours (KIP-320).

        -1 means the client does not know the epoch and skips the check.
        """
        if current_leader_epoch == -1 or current_leader_epoch == self.leader_epoch:
            return
        if current_leader_epoch > self.leader_epoch:
            raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH)
        raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH)

    # -- role changes ----------------------------------------------------------------------

    def make_leader(self, info: PartitionInfo, now_ms: int) -> None:
        """Lead with the controller's state: its epoch, replicas and ISR (Kafka's makeLeader).
        The high watermark stays where it was and moves as followers report their offsets."""
        new_epoch = info.leader_epoch != self.leader_epoch or not self.is_leader
        self.leader_epoch = info.leader_epoch
        self.partition_epoch = info.partition_epoch
        self.replicas = tuple(info.replicas)
        self.isr = tuple(info.isr)
        self.pending_isr = None
        self.isr_change_refused = False
        if new_epoch:
            self.leader_epoch_start_offset = self.log.log_end_offset
            self._reset_followers(now_ms)
        else:
            self.followers = {r: self.followers.get(r, FollowerState()) for r in self.replicas if r != self.broker_id}
        # A failback's pending replicas stay (still leading the same log), while they are replicas.
        self.failback_pending &= set(self.followers)
        self.is_leader = True
        self.leader_id = self.broker_id
        self._generation += 1
        self.log.high_watermark = min(self.log.high_watermark, self.log.log_end_offset)
        self.maybe_increment_high_watermark()
        self._signal()
        self._touch()

    def make_follower(self, info: PartitionInfo) -> None:
        """Follow ``info.leader`` (Kafka's makeFollower): produces are refused from now on and
        every acks=all produce still waiting is answered NOT_LEADER_OR_FOLLOWER."""
        self.leader_epoch = info.leader_epoch
        self.partition_epoch = info.partition_epoch
        self.replicas = tuple(info.replicas)
        self.isr = tuple(info.isr)
        self.make_offline(info.leader if info.leader >= 0 else None)

    def make_offline(self, leader_id: int | None = None) -> None:
        """Stop leading (a follower, or a replica the controller stopped)."""
        if self.is_leader:
            self._demotions += 1
        self.is_leader = False
        self.failback_pending = set()
        self.leader_id = leader_id
        self.pending_isr = None
        self.followers = {}
        self._generation += 1
        self._signal()
        self._touch()

    def _reset_followers(self, now_ms: int) -> None:
        # Followers in the ISR count as caught up now, the others never were (Kafka's
        # resetReplicaState on becoming leader); their log ends are unknown until they fetch.
        self.followers = {r: FollowerState(last_caught_up_ms=now_ms if r in self.isr else 0)
                          for r in self.replicas if r != self.broker_id}

    # -- the leader's append and the high watermark -----------------------------------------

    def start_txn_verification(self, producer_id: int) -> VerificationGuard | None:
        """The guard of a verification of the producer's transaction with its coordinator
        (KIP-890); None when its transaction is open here already (nothing to verify)."""
        return self.log.producers.start_verification(producer_id)

    def drop_txn_verification(self, producer_id: int, guard: VerificationGuard) -> None:
        """The verification failed: its guard goes."""
        self.log.producers.drop_verification(producer_id, guard)

    def append(self, records: bytes | bytearray | memoryview, *, now_ms: int,
               transactional: bool = False, coordinator: bool = False,
               verification: VerificationGuard | None = None) -> AppendResult:
        """Append a produce request's batches as leader; wakes waiting fetches.

        Raises KafkaError from the log (corrupt batch, too large, sequence errors),
        NOT_LEADER_OR_FOLLOWER when this replica does not lead, KAFKA_STORAGE_ERROR when the
        disk refuses the write (full, failing): the log keeps none of a failed batch.
        """
        if not self.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        root = self.log.directory.parent
        end = self.log.log_end_offset
        try:
            result = self.log.append_as_leader(records, leader_epoch=self.leader_epoch, now_ms=now_ms,
                                               transactional=transactional, coordinator=coordinator,
                                               verification=verification)
        except OSError as exc:
            raise self._health.failed(root, exc, f"appending to {self.topic}-{self.index}") from exc
        self._health.succeeded(root)
        self._credit_caught_up(end)
        if not result.duplicate and not self.maybe_increment_high_watermark():
            self._wake()  # the high watermark stayed (followers must fetch it): wake long polls anyway
        return result

    def append_copied(self, records: bytes | bytearray | memoryview, *, now_ms: int) -> AppendResult | None:
        """Append a link-mode mirror's batches (LinkAppend) as leader: their own offsets, stamped
        with this leader's epoch (``Log.append_copied``); wakes waiting fetches. None when every
        batch was already here (a retried request).

        Raises as :meth:`append`: KafkaError from the log (INVALID_RECORD for a batch that
        straddles the log end), NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR."""
        if not self.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        self.check_failback_done()
        root = self.log.directory.parent
        end = self.log.log_end_offset
        try:
            result = self.log.append_copied(records, leader_epoch=self.leader_epoch, now_ms=now_ms)
        except OSError as exc:
            raise self._health.failed(root, exc, f"appending to {self.topic}-{self.index}") from exc
        self._health.succeeded(root)
        self._credit_caught_up(end)
        if result is not None and not self.maybe_increment_high_watermark():
            self._wake()
        return result

    def append_marker(self, control_type: ControlType, *, producer_id: int, producer_epoch: int,
                      coordinator_epoch: int, now_ms: int) -> AppendResult:
        """Write a transaction marker as leader (``Log.append_marker``); wakes waiting fetches.
        Raises as :meth:`append`."""
        if not self.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        root = self.log.directory.parent
        end = self.log.log_end_offset
        try:
            result = self.log.append_marker(control_type, producer_id=producer_id, producer_epoch=producer_epoch,
                                            coordinator_epoch=coordinator_epoch, leader_epoch=self.leader_epoch,
                                            now_ms=now_ms)
        except OSError as exc:
            raise self._health.failed(root, exc, f"appending to {self.topic}-{self.index}") from exc
        self._health.succeeded(root)
        self._credit_caught_up(end)
        if not self.maybe_increment_high_watermark():
            self._wake()
        return result

    def _credit_caught_up(self, previous_end: int) -> None:
        """The log end moved from ``previous_end``: a follower that stood there, in a session
        whose latest request came after it last named this partition, was caught up until that
        request (see the module). Without a session its own fetches say it, as before."""
        if previous_end == self.log.log_end_offset or not self._watchers:
            return
        for watcher in self._watchers:
            state = self.followers.get(watcher.replica_id)
            if state is not None and state.log_end_offset == previous_end:
                state.last_caught_up_ms = max(state.last_caught_up_ms, watcher.last_fetch_ms)

    def maybe_increment_high_watermark(self) -> bool:
        """Move the high watermark to the smallest log end offset of the maximal ISR, if that is
        higher (Kafka's maybeIncrementLeaderHW); True when it moved."""
        if not self.is_leader:
            return False
        new = self.log.log_end_offset
        if self.pending_isr is not None or len(self.isr) > 1:  # an ISR of one: the log end itself
            for replica in self.maximal_isr:
                if replica != self.broker_id:
                    state = self.followers.get(replica)
                    new = min(new, state.log_end_offset if state is not None else -1)
        if new <= self.log.high_watermark:
            return False
        self.log.high_watermark = new
        self._wake()
        self._signal()
        self._maybe_expand_all()
        return True

    def _maybe_expand_all(self) -> None:
        """Followers out of the ISR may have caught up with the new high watermark: with fetch
        sessions a follower that stands still names the partition no more, so its next fetch
        would not tell (Kafka checks on every fetch of every session partition)."""
        if self._can_change_isr():
            for replica in self.followers:
                if replica not in self.isr:
                    self.maybe_expand_isr(replica)

    def check_enough_replicas_reach_offset(self, required_offset: int) -> ErrorCode | None:
        """Whether an acks=all append whose last batch ends at ``required_offset`` is answered now
        (Kafka's checkEnoughReplicasReachOffset): NOT_LEADER_OR_FOLLOWER when this replica does
        not lead; once the high watermark reached it, NONE, or NOT_ENOUGH_REPLICAS_AFTER_APPEND
        with an ISR below min.insync.replicas; None while it has not."""
        if not self.is_leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self.high_watermark >= required_offset:
            if len(self.isr) < self.log.config.min_insync_replicas:
                return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
            return ErrorCode.NONE
        return None

    async def wait_for_high_watermark(self, required_offset: int) -> ErrorCode:
        """Wait until :meth:`check_enough_replicas_reach_offset` answers, as Kafka's
        DelayedProduce: NONE, NOT_ENOUGH_REPLICAS_AFTER_APPEND, NOT_LEADER_OR_FOLLOWER (also when
        this replica stopped leading meanwhile, even if it leads again). The caller bounds the
        wait (a cancel scope)."""
        demotions = self._demotions
        while True:
            if self._demotions != demotions:
                return ErrorCode.NOT_LEADER_OR_FOLLOWER
            code = self.check_enough_replicas_reach_offset(required_offset)
            if code is not None:
                return code
            if self._changed is None:
                self._changed = trio.Event()
            await self._changed.wait()

    def _signal(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    # -- failback (broker/server/handlers/link_truncate.py) ---------------------------------

    async def truncate_for_failback(self, offset: int, reason: str) -> Truncation | None:
        """As leader, cut the log at ``offset`` (a failback: what is cut was acknowledged, and is
        quarantined as the failover's RPO); None when nothing was past it.

        The followers follow by their normal truncation: each fetches past the new log end, is
        answered OFFSET_OUT_OF_RANGE, asks OffsetForLeaderEpoch, and cuts at ``offset``. Until
        each assigned replica has been seen fetching at or below ``offset`` (:attr:`failback_pending`),
        copies are refused (:meth:`append_copied`, NOT_ENOUGH_REPLICAS, which a mirror retries):
        a follower that still holds the cut tail would take copied batches past it for its own
        and keep the tail. Not kept across a restart of this leader: a new leader that still holds
        the tail serves it, and the mirror then fails the partition (the copy is not the source's
        log) until failback runs again."""
        if not self.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if self._failback_cutting:
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"{self.topic}-{self.index}: another failback is cutting "
                                                          f"this log: run the failback again")
        self._failback_cutting = True  # set before any await: copies are refused from here
        try:
            self.failback_cut = offset
            # A follower may hold offsets past the cut when it says so, or when the log reached
            # past it at its last fetch (it may have taken them since), or when it has not
            # fetched in this leader epoch (unknown: offline, or about to fetch in full).
            self.failback_pending = {r for r, state in self.followers.items()
                                     if state.log_end_offset < 0 or state.log_end_offset > offset
                                     or state.last_fetch_leader_end > offset}
            plan = self.log.plan_truncation(offset, reason=reason, failback=True)
            if plan is None:
                return None
            try:
                await trio.to_thread.run_sync(plan.run)
            finally:
                if plan.done:
                    self.log.finish_truncation(plan)
                    # The epoch's records past the cut are gone: the high watermark can reach the
                    # new end, and a client's "latest" must not wait for offsets that left the log.
                    self.leader_epoch_start_offset = min(self.leader_epoch_start_offset, self.log.log_end_offset)
            self._signal()
            self._wake()
            return plan.cut
        finally:
            self._failback_cutting = False

    async def wait_failback_followed(self) -> None:
        """Until every assigned replica has cut its log at the failback's offset (or this replica
        stopped leading). The caller bounds the wait (a cancel scope)."""
        while self.is_leader and self.failback_pending:
            if self._changed is None:
                self._changed = trio.Event()
            await self._changed.wait()

    def check_failback_done(self) -> None:
        """Raises KafkaError(NOT_ENOUGH_REPLICAS) while a failback's cut is under way or not yet
        followed by every replica (see :meth:`truncate_for_failback`)."""
        if self._failback_cutting or self.failback_pending:
            waiting = ", ".join(map(str, sorted(self.failback_pending))) or "none"
            raise KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS,
                             f"{self.topic}-{self.index} was cut at offset {self.failback_cut} for a failback; "
                             f"copies wait until every replica has cut its log too (waiting for: {waiting})")

    # -- followers' fetches (on the leader) ------------------------------------------------

    def update_follower_fetch(self, replica_id: int, fetch_offset: int, now_ms: int) -> None:
        """A follower fetched from ``fetch_offset``: that is its log end offset now (Kafka's
        updateFollowerFetchState). May expand the ISR and move the high watermark.

        Raises KafkaError(NOT_LEADER_OR_FOLLOWER) when this replica does not lead or
        ``replica_id`` is not one of the partition's assigned replicas."""
        if not self.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {self.broker_id} does not lead "
                                                              f"{self.topic}-{self.index}")
        state = self.followers.get(replica_id)
        if state is None:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"replica {replica_id} is not an assigned replica of {self.topic}-{self.index} "
                             f"({list(self.replicas)})")
        leader_end = self.log.log_end_offset
        if replica_id in self.failback_pending and fetch_offset <= self.failback_cut:
            self.failback_pending.discard(replica_id)  # it holds nothing past the cut now
            self._signal()
        if not self.log.log_start_offset <= fetch_offset <= leader_end:
            return  # answered OFFSET_OUT_OF_RANGE by the read: not a position to record (as Kafka)
        if fetch_offset >= leader_end:
            state.last_caught_up_ms = max(state.last_caught_up_ms, now_ms)
        elif fetch_offset >= state.last_fetch_leader_end:
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        state.log_end_offset = fetch_offset
        state.last_fetch_leader_end = leader_end
        state.last_fetch_ms = now_ms
        self.maybe_expand_isr(replica_id)
        self.maybe_increment_high_watermark()

    # -- the follower's offsets ------------------------------------------------------------

    def follow_leader_offsets(self, leader_high_watermark: int, leader_log_start: int) -> None:
        """As follower, after appending what a fetch brought (Kafka's ReplicaFetcherThread,
        processPartitionData): the high watermark follows the leader's, capped by this log's end
        and never backwards; the log start follows the leader's (its retention, DeleteRecords)
        once the high watermark covers it. Raises as ``Log.delete_records_before``."""
        partition_log = self.log
        high_watermark = min(leader_high_watermark, partition_log.log_end_offset)
        if high_watermark > partition_log.high_watermark:
            partition_log.high_watermark = high_watermark
        if partition_log.log_start_offset < leader_log_start <= partition_log.high_watermark:
            partition_log.delete_records_before(leader_log_start)

    @property
    def last_stable_offset(self) -> int:
        return self.log.last_stable_offset

    def read(self, fetch_offset: int, max_bytes: int, *, min_one_batch: bool,
             read_committed: bool = False) -> ReadResult:
        """Read batches for a consumer: never past the high watermark, nor, ``read_committed``
        (isolation_level 1), past the last stable offset."""
        bound = self.log.last_stable_offset if read_committed else self.log.high_watermark
        return self.log.read(fetch_offset, max_bytes, upper_bound=bound, min_one_batch=min_one_batch)

    def read_for_follower(self, fetch_offset: int, max_bytes: int, *, min_one_batch: bool) -> ReadResult:
        """Read for a follower: up to the log end, past the high watermark."""
        return self.log.read(fetch_offset, max_bytes, min_one_batch=min_one_batch)

    # -- ISR changes ---------------------------------------------------------------------

    def _can_change_isr(self) -> bool:
        return (self.is_leader and self.isr_channel is not None and self.spawn is not None
                and self.pending_isr is None and not self.isr_change_refused)

    def maybe_expand_isr(self, replica_id: int) -> None:
        """Add a follower caught up to the high watermark within this leader epoch."""
        if replica_id in self.isr or not self._can_change_isr():
            return
        state = self.followers[replica_id]
        end = state.log_end_offset
        if end >= self.log.high_watermark and end >= self.leader_epoch_start_offset:
            self._alter_isr(tuple(sorted((*self.isr, replica_id))), f"replica {replica_id} caught up to {end}")

    def out_of_sync_replicas(self, now_ms: int, max_lag_ms: int) -> list[int]:
        """ISR followers behind the log end and not caught up for ``max_lag_ms`` (Kafka's
        getOutOfSyncReplicas)."""
        end = self.log.log_end_offset
        out = []
        for replica in self.isr:
            state = self.followers.get(replica)
            if replica == self.broker_id or state is None:
                continue
            if state.log_end_offset != end and now_ms - state.last_caught_up_ms > max_lag_ms:
                out.append(replica)
        return out

    def maybe_shrink_isr(self, now_ms: int, max_lag_ms: int) -> None:
        if not self._can_change_isr():
            return
        lagging = self.out_of_sync_replicas(now_ms, max_lag_ms)
        if lagging:
            new_isr = tuple(r for r in self.isr if r not in lagging)
            details = ", ".join(f"{r} (log end {self.followers[r].log_end_offset}, caught up "
                                f"{now_ms - self.followers[r].last_caught_up_ms} ms ago)" for r in lagging)
            self._alter_isr(new_isr, f"out of sync past replica.lag.time.max.ms={max_lag_ms}: {details}; "
                                     f"leader log end {self.log.log_end_offset}")

    def _alter_isr(self, new_isr: tuple[int, ...], why: str) -> None:
        assert self.spawn is not None and self.isr_channel is not None
        self.pending_isr = new_isr
        generation = self._generation
        channel = self.isr_channel
        log.info("%s-%d: ISR %s -> %s (%s)", self.topic, self.index, list(self.isr), list(new_isr), why)

        async def send() -> None:
            try:
                written = await channel.alter_partition(self.topic, self.topic_id, self.index, self.leader_epoch,
                                                        new_isr, self.partition_epoch)
            except KafkaError as exc:
                if generation != self._generation:
                    return
                self.pending_isr = None
                if exc.code in _STALE:
                    self.isr_change_refused = True
                    log.warning("%s-%d: the controller refused ISR %s (%s): waiting for its next LeaderAndIsr",
                                self.topic, self.index, list(new_isr), exc)
                else:
                    log.warning("%s-%d: ISR change to %s failed (%s); tried again at the next check",
                                self.topic, self.index, list(new_isr), exc)
                self._signal()
                return
            except Exception as exc:  # noqa: BLE001 - a lost controller connection: try again later
                if generation == self._generation:
                    self.pending_isr = None
                    log.warning("%s-%d: ISR change to %s failed (%s); tried again at the next check",
                                self.topic, self.index, list(new_isr), exc)
                    self._signal()
                return
            if generation != self._generation:
                return  # the role or epoch changed meanwhile: the LeaderAndIsr state rules
            if len(written.isr) < len(self.isr):
                metrics.ISR_SHRINKS.inc()
            elif len(written.isr) > len(self.isr):
                metrics.ISR_EXPANDS.inc()
            self.isr = tuple(written.isr)
            self.partition_epoch = written.partition_epoch
            self.pending_isr = None
            if not self.maybe_increment_high_watermark():
                self._maybe_expand_all()  # one change at a time: another follower may be waiting
            self._signal()

        self.spawn(send)

    # -- long polls ------------------------------------------------------------------------

    async def wait_flushed(self, result: AppendResult) -> None:
        """When `result`'s append reached flush.messages, return once it is fsynced.

        Kafka's append flushes inline, so a produce at flush.messages is acknowledged after
        the fsync. Here the fsync runs in a worker thread (broker/storage/flusher.py) while the
        event loop serves everyone else; only this request waits. Raises KAFKA_STORAGE_ERROR
        when the disk refuses (the records are in the log, as after a Kafka flush failure)."""
        scheduler = self.log.scheduler
        if not result.needs_flush or scheduler is None:
            return
        root = self.log.directory.parent
        try:
            await scheduler.flush(self.log, result.last_offset + 1)
        except OSError as exc:
            raise self._health.failed(root, exc, f"flushing {self.topic}-{self.index}") from exc

    def add_waiter(self, event: trio.Event) -> None:
        self._waiters.add(event)

    def remove_waiter(self, event: trio.Event) -> None:
        self._waiters.discard(event)

    def wake_fetches(self) -> None:
        """Wake long polls waiting on this partition and tell its fetch sessions (the follower's
        fetcher appended; retention moved the log start)."""
        self._wake()

    def delete_records_before(self, offset: int) -> None:
        """Move the log start up to ``offset`` (DeleteRecords, a LinkAppend's source log start)
        and tell the fetch sessions, which answer a partition only when something about it
        changed: followers follow the leader's log start. Raises as ``Log.delete_records_before``."""
        self.log.delete_records_before(offset)
        self._wake()

    def watch(self, watcher: FetchWatcher) -> None:
        """Tell ``watcher`` of every append, high watermark move and role change from now on."""
        self._watchers.add(watcher)

    def unwatch(self, watcher: FetchWatcher) -> None:
        self._watchers.discard(watcher)

    def _wake(self) -> None:
        if self._waiters:
            for event in self._waiters:
                event.set()
            self._waiters.clear()
        self._touch()

    def _touch(self) -> None:
        for watcher in self._watchers:
            watcher.touched(self)
