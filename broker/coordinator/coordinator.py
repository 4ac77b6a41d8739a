"""The group coordinator: membership, rebalances, committed offsets, and their persistence.

Every group lives in memory; every change that must survive a restart (committed offsets, the
group's generation, members and assignment) is written to `__consumer_offsets` before it is
acknowledged, and read back at start. Timers (session timeouts, rebalance deadlines, the initial
rebalance delay, offset retention) are served by one task that sleeps until the next deadline
and is woken early when a deadline moves.

State transitions, as Kafka's classic protocol has them:

    Empty ──join──▶ PreparingRebalance ──all joined / rebalance timeout──▶ CompletingRebalance
      ▲                    ▲    │ (nobody left)                               │ leader's SyncGroup
      │                    │    ▼                                             ▼
      └──── last member ───┴── Empty          join, leave, session timeout ◀── Stable
    any ──DeleteGroups (empty only) / retention of an empty group without offsets──▶ Dead
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

import trio

from broker.clock import now_ms
from broker.config import BrokerConfig
from broker.coordinator.group import Group, GroupState, Member, Reply
from broker.coordinator.offsets_records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_group_metadata,
    decode_key,
    decode_offset_commit,
    partition_for,
)
from broker.protocol.errors import ErrorCode, KafkaError, ProtocolError

__all__ = ["GroupCoordinator", "JoinResult", "MemberIdRequired", "OFFSETS_TOPIC"]

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"

# Appends (key, value-or-None) records to a partition of __consumer_offsets; raises KafkaError.
AppendRecords = Callable[[int, list[tuple[bytes, bytes | None]]], Awaitable[None]]

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
    """Every consumer group of this broker (it coordinates all of them: one broker, one cluster).

    All methods run on the broker's trio thread; `load` may run in a worker thread before `run`.
    Errors are raised as KafkaError carrying the code Kafka answers with.
    """

    def __init__(self, config: BrokerConfig, append: AppendRecords) -> None:
        self._config = config
        self._append = append
        self.groups: dict[str, Group] = {}
        self._wakeup = trio.Event()
        # Protocol metadata one member may carry: its subscription must fit in the group's
        # record in __consumer_offsets, which is bounded by message.max.bytes.
        self._max_member_metadata = config.message_max_bytes

    # -- persistence -----------------------------------------------------------------------

    def partition_of(self, group_id: str) -> int:
        return partition_for(group_id, self._config.offsets_topic_num_partitions)

    async def _store(self, group_id: str, records: list[tuple[bytes, bytes | None]]) -> None:
        """Append to the group's partition; disk errors become KAFKA_STORAGE_ERROR."""
        try:
            await self._append(self.partition_of(group_id), records)
        except OSError as exc:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, str(exc)) from exc

    def load(self, records: Iterable[tuple[bytes | None, bytes | None]]) -> None:
        """Replay `__consumer_offsets` records in log order (later records win).

        Groups come back as they were last written: with members (Stable, each member's session
        timer restarting when `run` starts) or without (Empty). Unreadable records are skipped
        with a warning, never fatal.
        """
        loaded = 0
        for key_bytes, value in records:
            if key_bytes is None:
                continue
            try:
                key = decode_key(key_bytes)
                if isinstance(key, OffsetCommitKey):
                    group = self.groups.setdefault(key.group, Group(key.group))
                    tp = (key.topic, key.partition)
                    if value is None:
                        group.offsets.pop(tp, None)
                    else:
                        group.offsets[tp] = decode_offset_commit(value)
                    loaded += 1
                elif isinstance(key, GroupMetadataKey):
                    if value is None:
                        self._forget_metadata(key.group)
                    else:
                        self._restore(key.group, decode_group_metadata(value))
            except ProtocolError as exc:
                log.warning("skipping an unreadable %s record: %s", OFFSETS_TOPIC, exc)
        for group_id, group in list(self.groups.items()):
            if group.protocol_type is None and not group.offsets and not group.members:
                del self.groups[group_id]  # a simple group whose offsets were all deleted
        log.info("loaded %d groups and %d offset commits from %s", len(self.groups), loaded, OFFSETS_TOPIC)

    def _forget_metadata(self, group_id: str) -> None:
        group = self.groups.get(group_id)
        if group is None:
            return
        if not group.offsets:
            del self.groups[group_id]
            return
        self.groups[group_id] = Group(group_id, offsets=group.offsets)

    def _restore(self, group_id: str, meta: GroupMetadataValue) -> None:
        old = self.groups.get(group_id)
        group = Group(group_id, offsets=old.offsets if old is not None else {})
        self.groups[group_id] = group
        group.generation = meta.generation
        group.protocol_type = meta.protocol_type or None
        group.protocol_name = meta.protocol
        group.state_timestamp_ms = meta.current_state_timestamp
        for m in meta.members:
            protocols = [(meta.protocol, m.subscription)] if meta.protocol is not None else []
            rebalance_timeout = m.rebalance_timeout if m.rebalance_timeout >= 0 else m.session_timeout
            group.members[m.member_id] = Member(
                m.member_id, m.group_instance_id, m.client_id, m.client_host, m.session_timeout,
                rebalance_timeout, meta.protocol_type, protocols, m.assignment)
            if m.group_instance_id is not None:
                group.static_members[m.group_instance_id] = m.member_id
        if group.members:
            group.leader_id = meta.leader if meta.leader in group.members else next(iter(group.members))
            group.state = GroupState.STABLE
        else:
            group.state = GroupState.EMPTY

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
        logged: memory stays authoritative, and a restart merely sees the previous generation."""
        try:
            await self._write_group(group)
        except KafkaError as exc:
            log.warning("group %s: storing its metadata failed: %s", group.group_id, exc)

    # -- timers ----------------------------------------------------------------------------

    def _poke(self) -> None:
        self._wakeup.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve deadlines until cancelled: session timeouts, rebalance completion, retention."""
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
        cfg = self._config
        if not cfg.group_min_session_timeout_ms <= session_timeout_ms <= cfg.group_max_session_timeout_ms:
            raise KafkaError(ErrorCode.INVALID_SESSION_TIMEOUT,
                             f"session timeout {session_timeout_ms} ms outside "
                             f"[{cfg.group_min_session_timeout_ms}, {cfg.group_max_session_timeout_ms}]")
        metadata_size = sum(len(name) + len(metadata) for name, metadata in protocols)
        if metadata_size > self._max_member_metadata:
            log.warning("group %s: refusing a member with %d bytes of protocol metadata (limit %d)",
                        group_id, metadata_size, self._max_member_metadata)
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
        try:
            await reply.wait()
        finally:
            if not reply.done and member.join is reply:
                # The request was cancelled (connection closed): forget the pending join, and
                # let the session timer decide about the member.
                member.join = None
                member.heartbeat_deadline = trio.current_time() + member.session_timeout_ms / 1000
                self._poke()
        if reply.error != ErrorCode.NONE:
            raise KafkaError(reply.error)
        result: JoinResult = reply.value
        return result

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
        try:
            await reply.wait()
        finally:
            if not reply.done and member.sync is reply:
                member.sync = None
                member.heartbeat_deadline = trio.current_time() + member.session_timeout_ms / 1000
                self._poke()
        if reply.error != ErrorCode.NONE:
            raise KafkaError(reply.error)
        return group.protocol_type, group.protocol_name, bytes(reply.value)

    def heartbeat(self, group_id: str, generation: int, member_id: str, instance_id: str | None) -> None:
        """Heartbeat: refreshes the member's session; REBALANCE_IN_PROGRESS tells it to rejoin."""
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
        records: list[tuple[bytes, bytes | None]] = [
            (OffsetCommitKey(group_id, t, p).encode(), v.encode()) for (t, p), v in offsets.items()
        ]
        if records:
            try:
                await self._store(group_id, records)
            except KafkaError as exc:
                raise _mapped(exc, _OFFSET_WRITE_ERRORS) from exc
        group.offsets.update(offsets)

    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None
                      ) -> dict[tuple[str, int], OffsetCommitValue | None]:
        """Committed offsets (None where nothing is committed); every one when `partitions` is None."""
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
        for tp in partitions:
            if subscribed is None or tp[0] in subscribed:
                out[tp] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                continue
            out[tp] = ErrorCode.NONE
            if tp in group.offsets:
                tombstones.append((OffsetCommitKey(group_id, *tp).encode(), None))
        if tombstones:
            try:
                await self._store(group_id, tombstones)
            except KafkaError as exc:
                raise _mapped(exc, _GROUP_WRITE_ERRORS) from exc
            for tp, code in out.items():
                if code == ErrorCode.NONE:
                    group.offsets.pop(tp, None)
        return out

    async def delete_group(self, group_id: str) -> None:
        """DeleteGroups for one group: tombstones for its offsets and its metadata."""
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
            group.transition(GroupState.EMPTY, now_ms())
            raise _mapped(exc, _GROUP_WRITE_ERRORS) from exc
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
        for tp, value in group.offsets.items():
            if topics is not None and tp[0] in topics:
                continue
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
            drop_group = group.state == GroupState.EMPTY and len(expired) == len(group.offsets)
            records: list[tuple[bytes, bytes | None]] = [
                (OffsetCommitKey(group.group_id, t, p).encode(), None) for t, p in expired
            ]
            if drop_group:
                records.append((GroupMetadataKey(group.group_id).encode(), None))
            if not records:
                continue
            try:
                await self._store(group.group_id, records)
            except KafkaError as exc:
                log.warning("expiring offsets of group %s failed: %s", group.group_id, exc)
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
