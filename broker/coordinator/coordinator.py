"""The group coordinator: membership, rebalances, committed offsets, and their persistence.

Every group lives in memory; every change that must survive a restart (committed offsets, the
group's generation, members and assignment) is written to `__consumer_offsets` before it is
acknowledged, and read back at start. A group lives in one partition of that topic, and the
broker leading that partition coordinates it: groups are loaded when this broker becomes a
partition's leader and dropped when it stops (Kafka's GroupMetadataManager load and unload).
Timers (session timeouts, rebalance deadlines, the initial rebalance delay, offset retention)
are served by one task that sleeps until the next deadline and is woken early when a deadline
moves.

State transitions, as Kafka's classic protocol has them (the table that `Group.transition`
checks, with the reason for each, is `VALID_PREVIOUS_STATES` in group.py):

    Empty ──join──▶ PreparingRebalance ──all joined / rebalance timeout──▶ CompletingRebalance
      ▲                    ▲    │ (nobody left)                               │ leader's SyncGroup
      │                    │    ▼                                             ▼
      └──── last member ───┴── Empty          join, leave, session timeout ◀── Stable
    any ──DeleteGroups (empty only) / retention of an empty group without offsets──▶ Dead
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import trio

from broker.clock import now_ms
from broker.config import BrokerConfig
from broker.coordinator.group import Group, GroupState, Member, Reply
from broker.coordinator.loader import GroupLoader, LoggedRecords, OffsetsLogSink, PendingTxnOffsets, supersedes
from broker.coordinator.offsets_records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    partition_for,
)
from broker.protocol.errors import ErrorCode, KafkaError

__all__ = ["GroupCoordinator", "JoinResult", "MemberIdRequired", "OFFSETS_TOPIC", "OffsetsLog"]

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"

# Appends (key, value-or-None) records to a partition of __consumer_offsets and returns the log
# offset of the first (the others follow it) once the ISR has them; raises KafkaError.
AppendRecords = Callable[[int, list[tuple[bytes, bytes | None]]], Awaitable[int]]
# The same in two steps: appends at the call (writes land in the order they were made; a refusal
# raises KafkaError there) and returns what to await for the ISR (raises KafkaError).
WriteRecords = Callable[[int, list[tuple[bytes, bytes | None]]], Awaitable[int]]
# Appends records as a transactional batch of (producer id, epoch); the same answer.
AppendTxnRecords = Callable[[int, list[tuple[bytes, bytes | None]], int, int], Awaitable[int]]


def _commit_records(group_id: str, offsets: Mapping[tuple[str, int], OffsetCommitValue],
                    ) -> list[tuple[bytes, bytes | None]]:
    """The `__consumer_offsets` records of a commit of `offsets`, in their order."""
    return [(OffsetCommitKey(group_id, t, p).encode(), v.encode()) for (t, p), v in offsets.items()]


def _written_from(offsets: Mapping[tuple[str, int], OffsetCommitValue], first: int,
                  ) -> dict[tuple[str, int], OffsetCommitValue]:
    """`offsets` as written by `_commit_records` from log offset `first` on: each value knows
    its record's offset (what decides between a plain and a transactional commit)."""
    return {tp: value.written_at(at) for at, (tp, value) in enumerate(offsets.items(), first)}


class ReplayPartition(Protocol):
    """Feeds every record of one partition, up to its log end when called, to the sink with
    its offset (in worker threads, chunk by chunk, oldest first; transactional batches and
    markers apart) while `still_wanted()` is true; raises KafkaError or OSError when the
    partition cannot be read. broker.coordinator.offsets_store implements it (replay_log)."""

    def __call__(self, partition: int, sink: OffsetsLogSink, still_wanted: Callable[[], bool]) -> Awaitable[None]: ...

# A load that failed (the disk, a partition deleted meanwhile) is retried while still leader.
_LOAD_RETRY_BACKOFF_S = 1.0
_LOAD_RETRY_BACKOFF_MAX_S = 30.0


class OffsetsLog(Protocol):
    """`__consumer_offsets` as the coordinator uses it (broker.coordinator.offsets_store)."""

    def write(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> Awaitable[int]: ...

    async def append_txn(self, partition: int, records: list[tuple[bytes, bytes | None]], producer_id: int,
                         producer_epoch: int) -> int: ...

    async def replay_log(self, partition: int, sink: OffsetsLogSink, still_wanted: Callable[[], bool]) -> None: ...

    def partition_count(self) -> int | None: ...


@dataclass(slots=True)
class _Led:
    """A `__consumer_offsets` partition this broker leads: its epoch, and whether its groups
    are still being loaded."""

    epoch: int
    loading: bool = True
    started: bool = False
    loaded: trio.Event = field(default_factory=trio.Event)
    tried: trio.Event = field(default_factory=trio.Event)  # the first attempt ended, loaded or not
    # Markers written while loading, (producer id, commit): past the end the load reads, so
    # they decide its pending transactional offsets once it is read.
    markers: list[tuple[int, bool]] = field(default_factory=list)


# What a failed write of the group's metadata becomes in a JoinGroup/SyncGroup response, and what
# a failed offset write becomes in an OffsetCommit response: the mappings Kafka's coordinator
# applies, so clients take the action they already know (find the coordinator again, retry, or
# give up on a commit that can never fit).
_GROUP_WRITE_ERRORS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.REBALANCE_IN_PROGRESS,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.INVALID_FETCH_SIZE: ErrorCode.UNKNOWN_SERVER_ERROR,
}
_OFFSET_WRITE_ERRORS = {
    **_GROUP_WRITE_ERRORS,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.INVALID_FETCH_SIZE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
}


@dataclass(frozen=True, slots=True)
class JoinResult:
    generation: int
    protocol_type: str | None
    protocol_name: str | None
    leader: str
    member_id: str
    members: list[tuple[str, str | None, bytes]]  # for the leader only: (id, instance id, metadata)
    # KIP-814: a static leader that came back keeps the group's assignment; it gets the members
    # for its own bookkeeping but must not compute a new assignment (JoinGroup v9+).
    skip_assignment: bool = False


class MemberIdRequired(KafkaError):
    """JoinGroup v4+ with an empty member id: the client must rejoin with `member_id` (KIP-394)."""

    def __init__(self, member_id: str) -> None:
        super().__init__(ErrorCode.MEMBER_ID_REQUIRED, "rejoin with the member id given")
        self.member_id = member_id


def _mapped(exc: KafkaError, table: dict[ErrorCode, ErrorCode]) -> KafkaError:
    code = table.get(exc.code, exc.code)
    return exc if code == exc.code else KafkaError(code, f"writing to {OFFSETS_TOPIC} failed: {exc}")


class GroupCoordinator:
    """The consumer groups kept in the `__consumer_offsets` partitions this broker leads.

    Made with `replay`, it leads no partition until told (:meth:`on_became_leader`, a
    :class:`~broker.coordinator.leadership.LeadershipListener`): it then loads that partition's
    groups and follows its leadership, as Kafka's GroupCoordinator does; a request for a group
    of a partition led elsewhere answers NOT_COORDINATOR. Made without, it leads every partition
    (tests; :meth:`load` replays the whole topic).

    All methods run on the broker's trio thread; `load` may run in a worker thread before `run`.
    Errors are raised as KafkaError carrying the code Kafka answers with.
    """

    @classmethod
    def over(cls, config: BrokerConfig, store: OffsetsLog) -> GroupCoordinator:
        """A coordinator of the partitions this broker leads, kept in `store` (the broker's
        :class:`~broker.coordinator.offsets_store.OffsetsStore`)."""
        return cls(config, store.write, store.replay_log, store.partition_count, write=store.write,
                   append_txn=store.append_txn)

    def __init__(self, config: BrokerConfig, append: AppendRecords, replay: ReplayPartition | None = None,
                 topic_partitions: Callable[[], int | None] | None = None, *,
                 write: WriteRecords | None = None, append_txn: AppendTxnRecords | None = None) -> None:
        self._config = config
        self._append = append
        self._write = write  # None: writes nobody waits for are awaited in place too
        # None (tests' in-memory stores): transactional offsets are written plainly at COMMIT.
        self._append_txn = append_txn
        self._replay = replay
        self._topic_partitions = topic_partitions  # the partition count of __consumer_offsets, if it exists
        # Partition -> leadership state; None: this coordinator leads every partition.
        self._led: dict[int, _Led] | None = None if replay is None else {}
        self._nursery: trio.Nursery | None = None
        self.groups: dict[str, Group] = {}  # the groups of loaded partitions only
        # Transactional offset commits not yet decided: producer id -> group -> offsets. Written
        # to the group's partition at once (transactional batches of the producer), they become
        # committed offsets when the producer's COMMIT marker reaches that partition, unless a
        # plain commit of the same partition was written after them (loader.supersedes).
        self._txn_offsets: PendingTxnOffsets = {}
        # Plain commits appended and waiting for the ISR, per group: partition -> how many (Kafka's
        # pendingOffsetCommits). OffsetFetch with require_stable answers them UNSTABLE_OFFSET_COMMIT
        # too, so a reader that must see every commit made before it asked waits for them.
        self._replicating: dict[str, dict[tuple[str, int], int]] = {}
        self._wakeup = trio.Event()

    def reconfigure(self, config: BrokerConfig) -> None:
        """Dynamic broker configs changed (ZkMetadata.on_broker_config): the next request reads
        the effective config, message.max.bytes among it (Kafka's DynamicLogConfig)."""
        self._config = config

    # -- persistence -----------------------------------------------------------------------

    def partition_of(self, group_id: str) -> int:
        return partition_for(group_id, self._partition_count())

    def _partition_count(self) -> int:
        # The topic's own count once it exists (Kafka reads it from the topic too): a topic made
        # under another offsets.topic.num.partitions keeps its groups where they were written.
        count = self._topic_partitions() if self._topic_partitions is not None else None
        return count if count else self._config.offsets_topic_num_partitions

    async def _store(self, group_id: str, records: list[tuple[bytes, bytes | None]]) -> int:
        """Append to the group's partition; the log offset of the first record. Disk errors
        become KAFKA_STORAGE_ERROR."""
        try:
            return await self._append(self.partition_of(group_id), records)
        except OSError as exc:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, str(exc)) from exc

    def load(self, records: LoggedRecords) -> None:
        """Replay `__consumer_offsets` records in log order (later records win), for a
        coordinator that leads every partition (made without `replay`): tests, and a broker
        that reads the whole topic before it serves."""
        loader = GroupLoader()
        loader.apply(records)
        # Maybe in a worker thread: members' session timers start when `run` does.
        for group_id, group in loader.finish().items():
            self.groups.setdefault(group_id, group)
        log.info("loaded %d groups and %d offset commits from %s", len(self.groups), loader.offsets_loaded,
                 OFFSETS_TOPIC)

    def _install(self, groups: dict[str, Group], partition: int) -> None:
        """Take loaded groups on the trio thread; restored members' session timers start now."""
        now = trio.current_time()
        for group_id, group in groups.items():
            if self.partition_of(group_id) != partition:
                # Written under another partition count: this broker could never be asked for
                # it here (FindCoordinator names the partition of the current count).
                log.warning("group %s found in %s-%d but belongs to partition %d; not loaded", group_id,
                            OFFSETS_TOPIC, partition, self.partition_of(group_id))
                continue
            for member in group.members.values():
                member.heartbeat_deadline = now + member.session_timeout_ms / 1000
            # Nothing of a loading partition is created meanwhile (its groups' requests are
            # refused), so what is here already came from the same log: keep it.
            self.groups.setdefault(group_id, group)
        self._poke()

    # -- leadership of __consumer_offsets partitions (Kafka's onElection / onResignation) ----

    def on_became_leader(self, topic: str, partition: int, leader_epoch: int) -> None:
        """This broker leads `partition` of `__consumer_offsets`: load its groups and offsets.

        Until the load finishes, requests for its groups answer COORDINATOR_LOAD_IN_PROGRESS
        (a heartbeat is answered NONE, as Kafka does). Returns at once; the load runs in the
        coordinator's task tree (queued until :meth:`run` starts) with the reading in worker
        threads. Already leading it (loaded or loading): only the epoch moves."""
        if topic != OFFSETS_TOPIC or self._led is None:
            return
        led = self._led.get(partition)
        if led is not None:
            if leader_epoch > led.epoch:
                led.epoch = leader_epoch
            return
        led = self._led[partition] = _Led(leader_epoch)
        log.info("%s-%d: leader in epoch %d; loading its groups", OFFSETS_TOPIC, partition, leader_epoch)
        if self._nursery is not None:
            led.started = True
            self._nursery.start_soon(self._load, partition, led)

    def on_resigned(self, topic: str, partition: int, leader_epoch: int | None) -> None:
        """This broker no longer leads `partition`: its groups leave memory (a load under way
        is abandoned), members waiting in JoinGroup or SyncGroup get NOT_COORDINATOR, and every
        later request for them too, so their clients find the new coordinator."""
        if topic != OFFSETS_TOPIC or self._led is None:
            return
        led = self._led.get(partition)
        if led is None or (leader_epoch is not None and leader_epoch < led.epoch):
            return  # not led here, or a stale notice from before our own election
        del self._led[partition]
        led.loaded.set()  # nobody waits for a load that will never be taken
        led.tried.set()
        unloaded = 0
        self._forget_txn_offsets(partition)  # the new leader replays them from the log
        for group_id, group in list(self.groups.items()):
            if self.partition_of(group_id) != partition:
                continue
            del self.groups[group_id]
            unloaded += 1
            group.transition(GroupState.DEAD, now_ms())
            group.pending.clear()
            for member in group.members.values():
                for waiting in (member.join, member.sync):
                    if waiting is not None:
                        waiting.set(ErrorCode.NOT_COORDINATOR)
                member.join = member.sync = None
        self._poke()
        log.info("%s-%d: no longer leader%s; unloaded %d groups", OFFSETS_TOPIC, partition,
                 "" if leader_epoch is None else f" (epoch {leader_epoch})", unloaded)

    def _forget_txn_offsets(self, partition: int) -> None:
        for producer_id, by_group in list(self._txn_offsets.items()):
            for group_id in [g for g in by_group if self.partition_of(g) == partition]:
                del by_group[group_id]
            if not by_group:
                del self._txn_offsets[producer_id]

    async def _load(self, partition: int, led: _Led) -> None:
        """Replay the partition into a fresh GroupLoader and take its groups, unless this broker
        stopped leading the partition meanwhile. A failed read is retried (backing off) while
        the partition stays led here: its groups answer COORDINATOR_LOAD_IN_PROGRESS until then."""
        assert self._replay is not None and self._led is not None
        backoff = _LOAD_RETRY_BACKOFF_S
        while True:
            if self._led.get(partition) is not led:
                return
            loader = GroupLoader()
            started = trio.current_time()
            try:
                await self._replay(partition, loader, lambda: self._led is not None
                                   and self._led.get(partition) is led)
            except (KafkaError, OSError) as exc:
                led.tried.set()
                if self._led.get(partition) is not led:
                    return
                log.error("%s-%d: loading its groups failed (%s); retrying in %.0f s", OFFSETS_TOPIC, partition,
                          exc, backoff)
                await trio.sleep(backoff)
                backoff = min(backoff * 2, _LOAD_RETRY_BACKOFF_MAX_S)
                continue
            break
        if self._led.get(partition) is not led:
            log.info("%s-%d: load abandoned (no longer leader)", OFFSETS_TOPIC, partition)
            return
        for producer_id, commit in led.markers:
            loader.end_txn(producer_id, commit)
        groups = loader.finish()
        self._install(groups, partition)
        self._forget_txn_offsets(partition)  # the log says what is pending, nothing older
        for producer_id, by_group in loader.pending.items():  # no marker yet: still pending
            self._txn_offsets.setdefault(producer_id, {}).update(by_group)
        led.loading = False
        led.loaded.set()
        led.tried.set()
        log.info("%s-%d: loaded %d groups and %d offset commits in %d ms (epoch %d)", OFFSETS_TOPIC, partition,
                 len(groups), loader.offsets_loaded, int((trio.current_time() - started) * 1000), led.epoch)

    async def wait_loaded(self) -> None:
        """Return once every partition led now has been loaded (or resigned)."""
        if self._led is None:
            return
        for led in list(self._led.values()):
            await led.loaded.wait()

    def led_partitions(self) -> dict[int, bool]:
        """Partition -> loaded, for the partitions this coordinator leads (None: all, loaded)."""
        if self._led is None:
            return {p: True for p in range(self._partition_count())}
        return {p: not led.loading for p, led in self._led.items()}

    @property
    def is_loading(self) -> bool:
        return self._led is not None and any(led.loading for led in self._led.values())

    def coordinator_error(self, group_id: str) -> ErrorCode:
        """NONE when this broker coordinates `group_id` now; NOT_COORDINATOR when it does not
        lead the group's partition; COORDINATOR_LOAD_IN_PROGRESS while it loads it."""
        if self._led is None:
            return ErrorCode.NONE
        led = self._led.get(self.partition_of(group_id))
        if led is None:
            return ErrorCode.NOT_COORDINATOR
        return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if led.loading else ErrorCode.NONE

    def _check_coordinator(self, group_id: str) -> None:
        code = self.coordinator_error(group_id)
        if code == ErrorCode.NOT_COORDINATOR:
            raise KafkaError(code, f"this broker does not lead {OFFSETS_TOPIC}-{self.partition_of(group_id)}, "
                                   f"where group {group_id} is kept")
        if code != ErrorCode.NONE:
            raise KafkaError(code, f"{OFFSETS_TOPIC}-{self.partition_of(group_id)} is being loaded")

    def _group_value(self, group: Group) -> GroupMetadataValue:
        return GroupMetadataValue(
            protocol_type=group.protocol_type or "",
            generation=group.generation,
            protocol=group.protocol_name,
            leader=group.leader_id,
            current_state_timestamp=group.state_timestamp_ms,
            members=tuple(
                MemberMetadata(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                               m.rebalance_timeout_ms, m.session_timeout_ms,
                               m.metadata_for(group.protocol_name), m.assignment)
                for m in group.members.values()
            ),
        )

    async def _write_group(self, group: Group) -> None:
        """Persist the group's metadata; raises KafkaError with the code for Join/SyncGroup."""
        record = (GroupMetadataKey(group.group_id).encode(), self._group_value(group).encode())
        try:
            await self._store(group.group_id, [record])
        except KafkaError as exc:
            raise _mapped(exc, _GROUP_WRITE_ERRORS) from exc

    async def _write_group_quietly(self, group: Group) -> None:
        """Persist a transition nobody waits for (a group emptied by timeouts). A failure is
        logged: memory stays authoritative, and a restart merely sees the previous generation.
        Written now; the wait for the ISR is left to a task of its own, so the timer task that
        made the transition goes on serving every other group's deadlines meanwhile."""
        record = (GroupMetadataKey(group.group_id).encode(), self._group_value(group).encode())
        await self._store_quietly(group.group_id, [record], f"group {group.group_id}: storing its metadata")

    async def _store_quietly(self, group_id: str, records: list[tuple[bytes, bytes | None]], what: str) -> bool:
        """Append now and wait for the ISR in the background (in place without a two-step
        store or when `run` is not running); False when the append itself was refused."""
        partition = self.partition_of(group_id)
        if self._write is None or self._nursery is None:
            try:
                await self._append(partition, records)
            except (KafkaError, OSError) as exc:
                log.warning("%s failed: %s", what, exc)
                return False
            return True
        try:
            committed = self._write(partition, records)
        except (KafkaError, OSError) as exc:
            log.warning("%s failed: %s", what, exc)
            return False

        async def confirm() -> None:
            try:
                await committed
            except (KafkaError, OSError) as exc:
                log.warning("%s failed: %s", what, exc)

        self._nursery.start_soon(confirm)
        return True

    # -- timers ----------------------------------------------------------------------------

    def _poke(self) -> None:
        self._wakeup.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve deadlines until cancelled: session timeouts, rebalance completion, retention;
        own the loads of partitions this broker comes to lead. Partitions it was made leader of
        before `run` (a standalone broker leads all from the start) are loaded before `run`
        reports started (once tried: one that fails is retried while the broker serves), so
        such a broker serves its groups from its first request."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                if self._led is not None:
                    initial = [led for led in self._led.values() if not led.started]
                    for partition, led in self._led.items():
                        if not led.started:
                            led.started = True
                            nursery.start_soon(self._load, partition, led)
                    # One attempt each: a partition that cannot be read is retried while the
                    # broker serves (its groups answer COORDINATOR_LOAD_IN_PROGRESS meanwhile).
                    for led in initial:
                        await led.tried.wait()
                await self._serve_deadlines(task_status)
            finally:
                self._nursery = None

    async def _serve_deadlines(self, task_status: trio.TaskStatus[None]) -> None:
        now = trio.current_time()
        for group in self.groups.values():
            for member in group.members.values():  # members restored by `load`
                if member.heartbeat_deadline == float("inf"):
                    member.heartbeat_deadline = now + member.session_timeout_ms / 1000
        task_status.started()
        retention_check = now + self._config.offsets_retention_check_interval_ms / 1000
        while True:
            now = trio.current_time()
            if now >= retention_check:
                await self._expire_offsets()
                retention_check = now + self._config.offsets_retention_check_interval_ms / 1000
            await self._fire_deadlines(now)
            self._wakeup = trio.Event()
            with trio.move_on_at(min(self._next_deadline(), retention_check)):
                await self._wakeup.wait()

    def _next_deadline(self) -> float:
        deadline = float("inf")
        for group in self.groups.values():
            if group.rebalance_deadline is not None:
                deadline = min(deadline, group.rebalance_deadline)
            for member in group.members.values():
                if member.join is None and member.sync is None:
                    deadline = min(deadline, member.heartbeat_deadline)
            for pending_deadline in group.pending.values():
                deadline = min(deadline, pending_deadline)
        return deadline

    async def _fire_deadlines(self, now: float) -> None:
        for group in list(self.groups.values()):
            expired_pending = [m for m, deadline in group.pending.items() if deadline <= now]
            for member_id in expired_pending:
                del group.pending[member_id]
            for member in list(group.members.values()):
                # A member parked in JoinGroup or SyncGroup is not expected to heartbeat; the
                # rebalance deadline (or the leader's own session) bounds its wait instead.
                if member.heartbeat_deadline <= now and member.join is None and member.sync is None:
                    log.info("group %s: member %s missed its session timeout", group.group_id, member.member_id)
                    await self._remove_member(group, member)
            if group.state == GroupState.PREPARING_REBALANCE:
                if group.rebalance_deadline is not None and group.rebalance_deadline <= now:
                    await self._complete_join(group)
                elif expired_pending:
                    await self._maybe_complete_join(group)

    # -- membership ------------------------------------------------------------------------

    def _group(self, group_id: str) -> Group | None:
        group = self.groups.get(group_id)
        return None if group is None or group.state == GroupState.DEAD else group

    def _check_member(self, group: Group, member_id: str, instance_id: str | None) -> Member:
        if instance_id is not None:
            known = group.static_members.get(instance_id)
            if known is None:
                raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"instance {instance_id} is not in the group")
            if known != member_id:
                raise KafkaError(ErrorCode.FENCED_INSTANCE_ID, f"instance {instance_id} has a newer member")
        member = group.members.get(member_id)
        if member is None:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id!r} is not in group {group.group_id}")
        return member

    async def join(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        require_known_member_id: bool,
    ) -> JoinResult:
        """JoinGroup: returns when the rebalance completes. Raises KafkaError with Kafka's codes
        (MemberIdRequired carries the id a v4+ client must come back with)."""
        if not group_id:
            raise KafkaError(ErrorCode.INVALID_GROUP_ID, "group id is empty")
        self._check_coordinator(group_id)
        cfg = self._config
        if not cfg.group_min_session_timeout_ms <= session_timeout_ms <= cfg.group_max_session_timeout_ms:
            raise KafkaError(ErrorCode.INVALID_SESSION_TIMEOUT,
                             f"session timeout {session_timeout_ms} ms outside "
                             f"[{cfg.group_min_session_timeout_ms}, {cfg.group_max_session_timeout_ms}]")
        # Protocol metadata one member may carry: its subscription must fit in the group's
        # record in __consumer_offsets, which is bounded by message.max.bytes (dynamic).
        metadata_size = sum(len(name) + len(metadata) for name, metadata in protocols)
        if metadata_size > cfg.message_max_bytes:
            log.warning("group %s: refusing a member with %d bytes of protocol metadata (limit %d)",
                        group_id, metadata_size, cfg.message_max_bytes)
            raise KafkaError(ErrorCode.INVALID_REQUEST, "protocol metadata larger than message.max.bytes")
        if rebalance_timeout_ms <= 0:
            rebalance_timeout_ms = session_timeout_ms
        group = self.groups.get(group_id)
        if group is not None and group.state == GroupState.DEAD:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"group {group_id} is being deleted")
        if group is None:
            group = self.groups[group_id] = Group(group_id)
        if not group.can_accept(protocol_type, protocols):
            raise KafkaError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                             "the member's protocols do not match the group's")
        now = trio.current_time()

        if not member_id:
            new_id = f"{instance_id or client_id or 'member'}-{uuid.uuid4()}"
            if instance_id is not None:
                old_id = group.static_members.get(instance_id)
                if old_id is not None and old_id in group.members:
                    return await self._rejoin_static(group, group.members[old_id], new_id, client_id,
                                                     client_host, session_timeout_ms, rebalance_timeout_ms,
                                                     protocols)
            elif require_known_member_id:
                # KIP-394: the client must come back with this id, so a lost response does not
                # leave an orphan member behind.
                group.pending[new_id] = now + session_timeout_ms / 1000
                self._poke()
                raise MemberIdRequired(new_id)
            member_id = new_id
        elif member_id in group.pending:
            pass
        else:
            if instance_id is not None and group.static_members.get(instance_id, member_id) != member_id:
                raise KafkaError(ErrorCode.FENCED_INSTANCE_ID, f"instance {instance_id} has a newer member")
            if member_id not in group.members:
                raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id!r} is not in group {group_id}")

        if len(group.members) >= cfg.group_max_size and member_id not in group.members:
            group.pending.pop(member_id, None)
            raise KafkaError(ErrorCode.GROUP_MAX_SIZE_REACHED, f"group {group_id} has {len(group.members)} members")

        group.pending.pop(member_id, None)
        member = group.members.get(member_id)
        if member is None:
            member = Member(member_id, instance_id, client_id, client_host, session_timeout_ms,
                            rebalance_timeout_ms, protocol_type, protocols)
            group.members[member_id] = member
            if instance_id is not None:
                group.static_members[instance_id] = member_id
            changed = True
        else:
            changed = member.protocols != protocols
            member.protocols = protocols
            member.session_timeout_ms = session_timeout_ms
            member.rebalance_timeout_ms = rebalance_timeout_ms
        if group.protocol_type is None:
            group.protocol_type = protocol_type

        if not changed and (
            group.state == GroupState.COMPLETING_REBALANCE
            or (group.state == GroupState.STABLE and member_id != group.leader_id)
        ):
            # A member asking again for what it already has (a lost JoinGroup response, or a
            # follower rejoining unchanged): answer with the current generation, no rebalance.
            if member.join is not None:
                member.join.set(ErrorCode.UNKNOWN_MEMBER_ID)
                member.join = None
            member.heartbeat_deadline = now + member.session_timeout_ms / 1000
            self._poke()
            return self._join_result(group, member)
        return await self._await_join(group, member)

    async def _await_join(self, group: Group, member: Member) -> JoinResult:
        """Park the member's JoinGroup until the join phase completes."""
        if member.join is not None:
            member.join.set(ErrorCode.UNKNOWN_MEMBER_ID)  # a duplicate join: the newer one wins
        reply = Reply()
        member.join = reply
        if group.state == GroupState.PREPARING_REBALANCE:
            if group.rebalance_started_empty and group.rebalance_limit is not None:
                # The initial delay stretches while members keep arriving (up to the limit).
                delay = self._config.group_initial_rebalance_delay_ms / 1000
                group.rebalance_deadline = min(trio.current_time() + delay, group.rebalance_limit)
        else:
            self._prepare_rebalance(group, f"member {member.member_id} joined")
        await self._maybe_complete_join(group)
        self._poke()
        result: JoinResult = await self._wait_reply(member, reply)
        return result

    async def _wait_reply(self, member: Member, reply: Reply) -> Any:
        """The value of the member's parked JoinGroup or SyncGroup `reply` once it is set.

        Error handling: a reply set with an error raises KafkaError of it. A request cancelled
        while it waits (its connection closed) is forgotten, and the session timer decides
        about the member from then on.
        """
        try:
            await reply.wait()
        finally:
            if not reply.done and member.forget(reply):
                member.heartbeat_deadline = trio.current_time() + member.session_timeout_ms / 1000
                self._poke()
        if reply.error != ErrorCode.NONE:
            raise KafkaError(reply.error)
        return reply.value

    async def _rejoin_static(self, group: Group, old: Member, new_id: str, client_id: str, client_host: str,
                             session_timeout_ms: int, rebalance_timeout_ms: int,
                             protocols: list[tuple[str, bytes]]) -> JoinResult:
        """A static member back with an empty member id (KIP-345): it takes over the old
        member's place and assignment under a new id, and the old id is fenced."""
        instance_id = old.group_instance_id
        assert instance_id is not None
        log.info("group %s: static member %s replaces %s", group.group_id, new_id, old.member_id)
        was_leader = group.leader_id == old.member_id
        new = Member(new_id, instance_id, client_id, client_host, session_timeout_ms, rebalance_timeout_ms,
                     old.protocol_type, protocols, old.assignment)
        new.heartbeat_deadline = trio.current_time() + session_timeout_ms / 1000

        def swap(out: Member, into: Member) -> None:
            group.members = {into.member_id if mid == out.member_id else mid: into if mid == out.member_id else m
                             for mid, m in group.members.items()}
            group.static_members[instance_id] = into.member_id
            if group.leader_id == out.member_id:
                group.leader_id = into.member_id

        swap(old, new)
        for pending in (old.join, old.sync):
            if pending is not None:
                pending.set(ErrorCode.FENCED_INSTANCE_ID)
        old.join = old.sync = None

        if group.state == GroupState.STABLE and group.select_protocol() == group.protocol_name:
            # Nothing about the group changes but a member id: persist that, no rebalance.
            try:
                await self._write_group(group)
            except KafkaError:
                swap(new, old)
                raise
            self._poke()
            result = self._join_result(group, new)
            return JoinResult(result.generation, result.protocol_type, result.protocol_name, result.leader,
                              new_id, result.members if was_leader else [], skip_assignment=was_leader)
        # CompletingRebalance: the leader may be assigning to the old id, so start over.
        return await self._await_join(group, new)

    def _join_result(self, group: Group, member: Member) -> JoinResult:
        members = []
        if member.member_id == group.leader_id:
            members = [(m.member_id, m.group_instance_id, m.metadata_for(group.protocol_name))
                       for m in group.members.values()]
        return JoinResult(group.generation, group.protocol_type, group.protocol_name, group.leader_id or "",
                          member.member_id, members)

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        log.info("group %s: preparing to rebalance (%s)", group.group_id, reason)
        for member in group.members.values():
            if member.sync is not None:
                member.sync.set(ErrorCode.REBALANCE_IN_PROGRESS)
                member.sync = None
        now = trio.current_time()
        was_empty = group.state == GroupState.EMPTY
        group.transition(GroupState.PREPARING_REBALANCE, now_ms())
        timeout = group.max_rebalance_timeout_ms() / 1000
        if was_empty:
            group.rebalance_started_empty = True
            group.rebalance_limit = now + timeout
            group.rebalance_deadline = min(now + self._config.group_initial_rebalance_delay_ms / 1000,
                                           group.rebalance_limit)
        else:
            group.rebalance_started_empty = False
            group.rebalance_limit = None
            group.rebalance_deadline = now + timeout
        self._poke()

    async def _maybe_complete_join(self, group: Group) -> None:
        if group.state != GroupState.PREPARING_REBALANCE:
            return
        if group.rebalance_started_empty and group.rebalance_deadline is not None \
                and trio.current_time() < group.rebalance_deadline:
            return  # still inside the initial delay
        if group.all_joined():
            await self._complete_join(group)

    async def _complete_join(self, group: Group) -> None:
        for member in list(group.members.values()):
            if member.join is None:
                log.info("group %s: member %s did not rejoin in time", group.group_id, member.member_id)
                await self._remove_member(group, member, rebalance=False)
        group.rebalance_deadline = None
        group.rebalance_started_empty = False
        group.pending.clear()
        now = trio.current_time()
        group.generation += 1
        if group.is_empty:
            group.protocol_name = None
            group.leader_id = None
            group.transition(GroupState.EMPTY, now_ms())
            await self._write_group_quietly(group)
            return
        group.protocol_name = group.select_protocol()
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        group.transition(GroupState.COMPLETING_REBALANCE, now_ms())
        log.info("group %s: generation %d with %d members, protocol %s", group.group_id, group.generation,
                 len(group.members), group.protocol_name)
        for member in group.members.values():
            member.assignment = b""
            member.heartbeat_deadline = now + member.session_timeout_ms / 1000
            if member.join is not None:
                member.join.set(ErrorCode.NONE, self._join_result(group, member))
                member.join = None
        self._poke()

    async def _remove_member(self, group: Group, member: Member, *, rebalance: bool = True) -> None:
        group.members.pop(member.member_id, None)
        if member.group_instance_id is not None and \
                group.static_members.get(member.group_instance_id) == member.member_id:
            del group.static_members[member.group_instance_id]
        for pending in (member.join, member.sync):
            if pending is not None:
                pending.set(ErrorCode.UNKNOWN_MEMBER_ID)
        member.join = member.sync = None
        if not rebalance:
            return
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, f"member {member.member_id} left")
            await self._maybe_complete_join(group)
        elif group.state == GroupState.PREPARING_REBALANCE:
            await self._maybe_complete_join(group)

    async def sync(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
                   assignments: dict[str, bytes], protocol_type: str | None = None,
                   protocol_name: str | None = None) -> tuple[str | None, str | None, bytes]:
        """SyncGroup: (protocol type, protocol name, this member's assignment).

        The leader's assignment is stored before any member gets its share; a store failure
        restarts the rebalance and the leader gets the mapped error.
        """
        self._check_coordinator(group_id)
        group = self._group(group_id)
        if group is None:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"group {group_id} does not exist")
        member = self._check_member(group, member_id, instance_id)
        if generation != group.generation:
            raise KafkaError(ErrorCode.ILLEGAL_GENERATION, f"generation {generation} is not {group.generation}")
        # SyncGroup v5 names the protocol the member thinks it is in.
        if (protocol_type is not None and protocol_type != group.protocol_type) or \
                (protocol_name is not None and protocol_name != group.protocol_name):
            raise KafkaError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "the group uses another protocol")
        if group.state == GroupState.PREPARING_REBALANCE:
            raise KafkaError(ErrorCode.REBALANCE_IN_PROGRESS)
        member.heartbeat_deadline = trio.current_time() + member.session_timeout_ms / 1000
        if group.state == GroupState.STABLE:
            return group.protocol_type, group.protocol_name, member.assignment
        if member.sync is not None:
            member.sync.set(ErrorCode.REBALANCE_IN_PROGRESS)  # a duplicate sync: the newer one waits
        reply = Reply()
        member.sync = reply
        if member_id == group.leader_id:
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            try:
                await self._write_group(group)
            except KafkaError as exc:
                if group.state == GroupState.COMPLETING_REBALANCE and group.generation == generation:
                    self._prepare_rebalance(group, f"storing the assignment failed: {exc}")
                raise
            if group.state == GroupState.COMPLETING_REBALANCE and group.generation == generation:
                group.transition(GroupState.STABLE, now_ms())
                deadline = trio.current_time()
                for m in group.members.values():
                    if m.sync is not None:
                        m.sync.set(ErrorCode.NONE, m.assignment)
                        m.sync = None
                    m.heartbeat_deadline = deadline + m.session_timeout_ms / 1000
                self._poke()
        assignment = await self._wait_reply(member, reply)
        return group.protocol_type, group.protocol_name, bytes(assignment)

    def heartbeat(self, group_id: str, generation: int, member_id: str, instance_id: str | None) -> None:
        """Heartbeat: refreshes the member's session; REBALANCE_IN_PROGRESS tells it to rejoin."""
        code = self.coordinator_error(group_id)
        if group_id and code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            return  # the group is still loading: Kafka answers the heartbeat blindly
        self._check_coordinator(group_id)
        group = self._group(group_id)
        if group is None or group.state == GroupState.EMPTY:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"group {group_id} has no members")
        member = self._check_member(group, member_id, instance_id)
        if generation != group.generation:
            raise KafkaError(ErrorCode.ILLEGAL_GENERATION, f"generation {generation} is not {group.generation}")
        # The deadline only moves later, so the timer task need not wake (it rechecks when the
        # old deadline comes): heartbeats cost no scan of the groups.
        member.heartbeat_deadline = trio.current_time() + member.session_timeout_ms / 1000
        if group.state == GroupState.PREPARING_REBALANCE:
            raise KafkaError(ErrorCode.REBALANCE_IN_PROGRESS)

    async def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> list[ErrorCode]:
        """LeaveGroup for (member id, instance id) pairs; one error code per member."""
        self._check_coordinator(group_id)
        group = self._group(group_id)
        if group is None:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"group {group_id} does not exist")
        out = []
        for member_id, instance_id in members:
            if instance_id is None and member_id in group.pending:
                del group.pending[member_id]  # it never finished joining
                await self._maybe_complete_join(group)
                out.append(ErrorCode.NONE)
                continue
            if not member_id and instance_id is not None:
                member_id = group.static_members.get(instance_id, "")  # removal by instance id (KIP-345)
            try:
                member = self._check_member(group, member_id, instance_id)
            except KafkaError as exc:
                out.append(exc.code)
                continue
            log.info("group %s: member %s left", group_id, member_id)
            await self._remove_member(group, member)
            out.append(ErrorCode.NONE)
        return out

    # -- offsets ---------------------------------------------------------------------------

    async def commit(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
                     offsets: dict[tuple[str, int], OffsetCommitValue]) -> None:
        """OffsetCommit for a whole request; raises KafkaError for the group-level errors.

        As Kafka: a commit without a generation is accepted only while the group is Empty; a
        member's commit needs its current generation, and is refused (REBALANCE_IN_PROGRESS)
        only while the group waits for the leader's assignment. Commits during
        PreparingRebalance are taken, so a consumer can commit what it revokes.
        """
        if not group_id:
            raise KafkaError(ErrorCode.INVALID_GROUP_ID, "group id is empty")
        self._check_coordinator(group_id)
        group = self.groups.get(group_id)
        if group is not None and group.state == GroupState.DEAD:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"group {group_id} is being deleted")
        if generation < 0 and (group is None or group.state == GroupState.EMPTY):
            # From outside any generation (assign() users, tools, the AdminClient).
            if group is None:
                if not offsets:
                    return  # nothing valid to commit: do not leave an empty group behind
                group = self.groups[group_id] = Group(group_id)
        elif generation >= 0 or member_id or instance_id is not None:
            if group is None:
                # Kafka's answer to a member of a group that does not exist (any more).
                raise KafkaError(ErrorCode.ILLEGAL_GENERATION, f"group {group_id} does not exist")
            member = self._check_member(group, member_id, instance_id)
            if generation != group.generation:
                raise KafkaError(ErrorCode.ILLEGAL_GENERATION,
                                 f"generation {generation} is not {group.generation}")
            if group.state == GroupState.COMPLETING_REBALANCE:
                raise KafkaError(ErrorCode.REBALANCE_IN_PROGRESS)
            member.heartbeat_deadline = trio.current_time() + member.session_timeout_ms / 1000
        else:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"group {group_id} has live members")
        if not offsets:
            return
        replicating = self._replicating.setdefault(group_id, {})
        for tp in offsets:
            replicating[tp] = replicating.get(tp, 0) + 1
        try:
            first = await self._store(group_id, _commit_records(group_id, offsets))
        except KafkaError as exc:
            raise _mapped(exc, _OFFSET_WRITE_ERRORS) from exc
        finally:
            for tp in offsets:
                if (left := replicating.get(tp, 1) - 1) > 0:
                    replicating[tp] = left
                else:
                    replicating.pop(tp, None)
            if not replicating and self._replicating.get(group_id) is replicating:
                del self._replicating[group_id]
        for tp, value in _written_from(offsets, first).items():
            # A transaction decided while this write waited for the ISR may have committed an
            # offset written after it: the later record stays (Kafka's onOffsetCommitAppend).
            if supersedes(value, group.offsets.get(tp)):
                group.offsets[tp] = value

    async def txn_commit(self, group_id: str, producer_id: int, producer_epoch: int, generation: int,
                         member_id: str, instance_id: str | None,
                         offsets: dict[tuple[str, int], OffsetCommitValue]) -> None:
        """TxnOffsetCommit: offsets written to the group's partition at once as a transactional
        batch of the producer, visible to OffsetFetch only once its COMMIT marker reaches that
        partition (:meth:`complete_txn`), as Kafka's: a coordinator that moves (a leader change,
        a SIGKILL) before the marker finds them in the log and waits for the marker too.

        A member's generation is checked as OffsetCommit checks it (KIP-447); a commit from
        outside any generation (-1) is taken as Kafka takes it."""
        if not group_id:
            raise KafkaError(ErrorCode.INVALID_GROUP_ID, "group id is empty")
        self._check_coordinator(group_id)
        # As Kafka's doTxnCommitOffsets: a group that does not exist is an empty one; a member
        # named must be in it, a generation given must be its own.
        group = self.groups.get(group_id) or Group(group_id)
        if group.state == GroupState.DEAD:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"group {group_id} is being deleted")
        if member_id or instance_id is not None:
            self._check_member(group, member_id, instance_id)
        if generation >= 0 and generation != group.generation:
            raise KafkaError(ErrorCode.ILLEGAL_GENERATION, f"generation {generation} is not {group.generation}")
        if offsets and self._append_txn is not None:
            try:
                first = await self._append_txn(self.partition_of(group_id), _commit_records(group_id, offsets),
                                               producer_id, producer_epoch)
            except OSError as exc:
                raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, str(exc)) from exc
            except KafkaError as exc:
                raise _mapped(exc, _OFFSET_WRITE_ERRORS) from exc
            # Resigned meanwhile: the new leader holds them (from the log), not this broker.
            self._check_coordinator(group_id)
            offsets = _written_from(offsets, first)
        self._txn_offsets.setdefault(producer_id, {}).setdefault(group_id, {}).update(offsets)

    async def complete_txn(self, producer_id: int, partition: int, commit: bool) -> None:
        """A marker for `producer_id` was written to `partition` of `__consumer_offsets`: its
        held offsets for that partition's groups are committed (COMMIT) or dropped (ABORT). The
        marker in the log is the commit; a coordinator without a transactional store writes them
        now (raises KafkaError when it cannot: the marker is retried)."""
        led = self._led.get(partition) if self._led is not None else None
        if led is not None and led.loading:
            led.markers.append((producer_id, commit))
            return
        held = self._txn_offsets.get(producer_id, {})
        for group_id in [g for g in held if self.partition_of(g) == partition]:
            offsets = held[group_id]
            if commit and offsets:
                if self._append_txn is None:
                    first = await self._store(group_id, _commit_records(group_id, offsets))
                    offsets = _written_from(offsets, first)
                group = self.groups.get(group_id)
                if group is None:
                    group = self.groups[group_id] = Group(group_id)
                for tp, value in offsets.items():
                    # A plain OffsetCommit written after the TxnOffsetCommit keeps its offset.
                    if supersedes(value, group.offsets.get(tp)):
                        group.offsets[tp] = value
                    else:
                        log.info("group %s: the transactional commit of %s-%d by producer %d is older than "
                                 "the committed offset (record %d < %d); the committed one stays", group_id,
                                 tp[0], tp[1], producer_id, value.record_offset, group.offsets[tp].record_offset)
            held.pop(group_id, None)
        if not held:
            self._txn_offsets.pop(producer_id, None)

    def _drop_pending_txn_offsets(self, group_id: str, partitions: list[tuple[str, int]]) -> None:
        """Tombstones for `partitions` were written: what transactions hold for them goes too,
        as the load drops it (Kafka's replay of an offset tombstone)."""
        for by_group in self._txn_offsets.values():
            held = by_group.get(group_id, {})
            for tp in partitions:
                held.pop(tp, None)

    def pending_txn_offsets(self, group_id: str) -> set[tuple[str, int]]:
        """The group's partitions with a transactional offset commit not yet decided (OffsetFetch
        with require_stable answers them UNSTABLE_OFFSET_COMMIT, KIP-447)."""
        return {tp for by_group in self._txn_offsets.values() for tp in by_group.get(group_id, {})}

    def unstable_offsets(self, group_id: str) -> set[tuple[str, int]]:
        """The group's partitions whose committed offset may still change by a commit already
        made: a transactional one not yet decided, or a plain one appended and not yet
        replicated (Kafka's hasPendingOffsetCommitsForTopicPartition). OffsetFetch with
        require_stable answers them UNSTABLE_OFFSET_COMMIT."""
        return self.pending_txn_offsets(group_id) | set(self._replicating.get(group_id, {}))

    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None
                      ) -> dict[tuple[str, int], OffsetCommitValue | None]:
        """Committed offsets (None where nothing is committed); every one when `partitions` is None.
        Raises KafkaError (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS) for a group kept elsewhere."""
        self._check_coordinator(group_id)
        group = self.groups.get(group_id)
        known = group.offsets if group is not None and group.state != GroupState.DEAD else {}
        if partitions is None:
            return dict(known)
        return {tp: known.get(tp) for tp in partitions}

    async def delete_offsets(
        self, group_id: str, partitions: list[tuple[str, int]]
    ) -> dict[tuple[str, int], ErrorCode]:
        """OffsetDelete: GROUP_SUBSCRIBED_TO_TOPIC per partition of a topic the live group
        consumes (assumed for every topic when its subscriptions are unknown); NON_EMPTY_GROUP
        for a live group that does not use the consumer protocol."""
        self._check_coordinator(group_id)
        group = self._group(group_id)
        if group is None:
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"group {group_id} does not exist")
        if group.is_empty:
            subscribed: set[str] | None = set()
        elif group.protocol_type != "consumer":
            raise KafkaError(ErrorCode.NON_EMPTY_GROUP, f"group {group_id} has members")
        else:
            subscribed = group.subscribed_topics()
        out: dict[tuple[str, int], ErrorCode] = {}
        tombstones: list[tuple[bytes, bytes | None]] = []
        pending = self.pending_txn_offsets(group_id)
        for tp in partitions:
            if subscribed is None or tp[0] in subscribed:
                out[tp] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                continue
            out[tp] = ErrorCode.NONE
            if tp in group.offsets or tp in pending:  # a load drops a transaction's offset at it too
                tombstones.append((OffsetCommitKey(group_id, *tp).encode(), None))
        if tombstones:
            try:
                await self._store(group_id, tombstones)
            except KafkaError as exc:
                raise _mapped(exc, _GROUP_WRITE_ERRORS) from exc
            deleted = [tp for tp, code in out.items() if code == ErrorCode.NONE]
            for tp in deleted:
                group.offsets.pop(tp, None)
            self._drop_pending_txn_offsets(group_id, deleted)
        return out

    async def delete_group(self, group_id: str) -> None:
        """DeleteGroups for one group: tombstones for its offsets and its metadata."""
        self._check_coordinator(group_id)
        group = self._group(group_id)
        if group is None:
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"group {group_id} does not exist")
        if group.state != GroupState.EMPTY:
            raise KafkaError(ErrorCode.NON_EMPTY_GROUP, f"group {group_id} has {len(group.members)} members")
        group.transition(GroupState.DEAD, now_ms())
        records: list[tuple[bytes, bytes | None]] = [
            (OffsetCommitKey(group_id, t, p).encode(), None) for t, p in group.offsets
        ]
        records.append((GroupMetadataKey(group_id).encode(), None))
        try:
            await self._store(group_id, records)
        except KafkaError as exc:
            if self.groups.get(group_id) is group:  # an unloaded group stays Dead
                group.transition(GroupState.EMPTY, now_ms())
            raise _mapped(exc, _GROUP_WRITE_ERRORS) from exc
        self._drop_pending_txn_offsets(group_id, list(group.offsets))
        if self.groups.get(group_id) is group:  # not unloaded (and maybe reloaded) meanwhile
            del self.groups[group_id]

    def _expired(self, group: Group, now: int) -> list[tuple[str, int]]:
        """The offsets Kafka's retention rule (KIP-211) removes from this group now."""
        retention = self._config.offsets_retention_minutes * 60_000
        if group.protocol_type is None:
            base = None  # a simple consumer's group: each offset ages from its own commit
            topics = None
        elif group.state == GroupState.EMPTY:
            # Offsets age from the moment the group became empty.
            base = group.state_timestamp_ms if group.state_timestamp_ms >= 0 else None
            topics = None
        elif group.state == GroupState.STABLE and group.protocol_type == "consumer":
            # A live consumer group keeps what it subscribes to; other topics' offsets age.
            base = None
            topics = group.subscribed_topics()
            if topics is None:
                return []
        else:
            return []
        out = []
        pending = self.pending_txn_offsets(group.group_id)
        for tp, value in group.offsets.items():
            if (topics is not None and tp[0] in topics) or tp in pending:
                continue  # a transaction may still commit an offset for it (Kafka keeps it too)
            if value.expire_timestamp >= 0:  # an explicit expiry (OffsetCommit v2-v4) wins
                if value.expire_timestamp <= now:
                    out.append(tp)
            elif (base if base is not None else value.commit_timestamp) + retention <= now:
                out.append(tp)
        return out

    async def _expire_offsets(self) -> None:
        """Drop offsets past offsets.retention.minutes; an empty group left with no offsets
        is deleted too (Dead, with a tombstone for its metadata), as Kafka does."""
        now = now_ms()
        for group in list(self.groups.values()):
            if group.state == GroupState.DEAD:
                continue
            expired = self._expired(group, now)
            # Not while a transaction holds offsets for it (Kafka keeps such a group).
            drop_group = group.state == GroupState.EMPTY and len(expired) == len(group.offsets) \
                and not self.pending_txn_offsets(group.group_id)
            records: list[tuple[bytes, bytes | None]] = [
                (OffsetCommitKey(group.group_id, t, p).encode(), None) for t, p in expired
            ]
            if drop_group:
                records.append((GroupMetadataKey(group.group_id).encode(), None))
            if not records:
                continue
            # Memory follows once the tombstones are in the leader's log; should they not reach
            # the ISR, the offsets come back with the next leader and expire there (as Kafka).
            if not await self._store_quietly(group.group_id, records,
                                             f"expiring offsets of group {group.group_id}"):
                continue
            for tp in expired:
                group.offsets.pop(tp, None)
            if expired:
                log.info("group %s: expired %d committed offsets", group.group_id, len(expired))
            if drop_group and self.groups.get(group.group_id) is group and group.state == GroupState.EMPTY \
                    and not group.offsets:
                group.transition(GroupState.DEAD, now)
                del self.groups[group.group_id]
                log.info("group %s: removed (empty, no offsets left)", group.group_id)
