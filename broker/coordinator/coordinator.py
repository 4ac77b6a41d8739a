"""The group coordinator: membership, rebalances, committed offsets, and their persistence.

Every group lives in memory; every change that must survive a restart (committed offsets, the
group's generation and assignment) is written to `__consumer_offsets` before it is
acknowledged, and read back at start. Timers (session timeouts, rebalance deadlines, the initial
rebalance delay, offset retention) are served by one task that sleeps until the next deadline.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

import trio

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

__all__ = ["GroupCoordinator", "JoinResult", "OFFSETS_TOPIC"]

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"

# Appends (key, value-or-None) records to a partition of __consumer_offsets; raises KafkaError.
AppendRecords = Callable[[int, list[tuple[bytes, bytes | None]]], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class JoinResult:
    generation: int
    protocol_type: str | None
    protocol_name: str | None
    leader: str
    member_id: str
    members: list[tuple[str, str | None, bytes]]  # for the leader only: (id, instance id, metadata)


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class GroupCoordinator:
    def __init__(self, config: BrokerConfig, append: AppendRecords) -> None:
        self._config = config
        self._append = append
        self.groups: dict[str, Group] = {}
        self._wakeup = trio.Event()

    # -- persistence -----------------------------------------------------------------------

    def partition_of(self, group_id: str) -> int:
        return partition_for(group_id, self._config.offsets_topic_num_partitions)

    def load(self, records: Iterable[tuple[bytes | None, bytes | None]]) -> None:
        """Replay `__consumer_offsets` records in log order (later records win)."""
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
                        self.groups.pop(key.group, None)
                        continue
                    meta = decode_group_metadata(value)
                    group = self.groups.setdefault(key.group, Group(key.group))
                    # Members are not restored: they rejoin (their old ids get UNKNOWN_MEMBER_ID).
                    group.generation = meta.generation
                    group.protocol_type = meta.protocol_type or None
                    group.protocol_name = meta.protocol
            except ProtocolError as exc:
                log.warning("skipping an unreadable %s record: %s", OFFSETS_TOPIC, exc)
        for group in self.groups.values():
            group.state = GroupState.EMPTY
        log.info("loaded %d groups and %d offset commits from %s", len(self.groups), loaded, OFFSETS_TOPIC)

    async def _write_group(self, group: Group) -> None:
        value = GroupMetadataValue(
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
        await self._append(self.partition_of(group.group_id),
                           [(GroupMetadataKey(group.group_id).encode(), value.encode())])

    # -- timers ----------------------------------------------------------------------------

    def _poke(self) -> None:
        self._wakeup.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve deadlines until cancelled: session timeouts, rebalance completion, retention."""
        task_status.started()
        retention_check = trio.current_time() + self._config.offsets_retention_check_interval_ms / 1000
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
                deadline = min(deadline, member.heartbeat_deadline)
            for pending_deadline in group.pending.values():
                deadline = min(deadline, pending_deadline)
        return deadline

    async def _fire_deadlines(self, now: float) -> None:
        for group in list(self.groups.values()):
            for member_id, deadline in list(group.pending.items()):
                if deadline <= now:
                    del group.pending[member_id]
            for member in list(group.members.values()):
                if member.heartbeat_deadline <= now and member.join is None:
                    log.info("group %s: member %s missed its session timeout", group.group_id, member.member_id)
                    await self._remove_member(group, member)
            if (group.state == GroupState.PREPARING_REBALANCE and group.rebalance_deadline is not None
                    and group.rebalance_deadline <= now):
                await self._complete_join(group)

    # -- membership ------------------------------------------------------------------------

    def _group(self, group_id: str) -> Group | None:
        group = self.groups.get(group_id)
        return None if group is None or group.state == GroupState.DEAD else group

    def _check_member(self, group: Group, member_id: str, instance_id: str | None) -> Member:
        if instance_id is not None:
            known = group.static_members.get(instance_id)
            if known is not None and known != member_id:
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
        """JoinGroup: returns when the rebalance completes. Raises KafkaError with Kafka's codes."""
        if not group_id:
            raise KafkaError(ErrorCode.INVALID_GROUP_ID, "group id is empty")
        cfg = self._config
        if not cfg.group_min_session_timeout_ms <= session_timeout_ms <= cfg.group_max_session_timeout_ms:
            raise KafkaError(ErrorCode.INVALID_SESSION_TIMEOUT,
                             f"session timeout {session_timeout_ms} ms outside "
                             f"[{cfg.group_min_session_timeout_ms}, {cfg.group_max_session_timeout_ms}]")
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
            if instance_id is not None and instance_id in group.static_members:
                # A static member coming back: its old member id is replaced (and fenced).
                old = group.members.get(group.static_members[instance_id])
                if old is not None:
                    await self._remove_member(group, old, rebalance=False)
            new_id = f"{client_id or 'member'}-{uuid.uuid4()}"
            if require_known_member_id and instance_id is None:
                # KIP-394: the client must come back with this id, so a lost response does not
                # leave an orphan member behind.
                group.pending[new_id] = now + session_timeout_ms / 1000
                self._poke()
                raise _MemberIdRequired(new_id)
            member_id = new_id
        elif member_id not in group.members and member_id not in group.pending:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id!r} is not in group {group_id}")
        elif instance_id is not None and group.static_members.get(instance_id, member_id) != member_id:
            raise KafkaError(ErrorCode.FENCED_INSTANCE_ID, f"instance {instance_id} has a newer member")

        if len(group.members) >= cfg.group_max_size and member_id not in group.members:
            raise KafkaError(ErrorCode.GROUP_MAX_SIZE_REACHED, f"group {group_id} has {len(group.members)} members")

        group.pending.pop(member_id, None)
        reply = Reply()
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
        if member.join is not None:
            member.join.set(ErrorCode.UNKNOWN_MEMBER_ID)  # a duplicate join: the newer one wins
        member.join = reply
        if group.protocol_type is None:
            group.protocol_type = protocol_type

        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE) and not changed \
                and member_id != group.leader_id:
            # A follower rejoining with what it had: answer with the current generation at once.
            member.join = None
            member.heartbeat_deadline = now + member.session_timeout_ms / 1000
            return self._join_result(group, member)
        if group.state == GroupState.PREPARING_REBALANCE:
            if group.rebalance_started_empty and group.rebalance_limit is not None:
                # The initial delay stretches while members keep arriving (up to the limit).
                delay = cfg.group_initial_rebalance_delay_ms / 1000
                group.rebalance_deadline = min(now + delay, group.rebalance_limit)
            await self._maybe_complete_join(group)
        else:
            self._prepare_rebalance(group, f"member {member_id} joined")
            await self._maybe_complete_join(group)
        self._poke()
        try:
            await reply.wait()
        finally:
            if not reply.done:
                # The request was cancelled (connection closed): forget the pending join.
                if member.join is reply:
                    member.join = None
                    member.heartbeat_deadline = trio.current_time() + member.session_timeout_ms / 1000
                    self._poke()
        if reply.error != ErrorCode.NONE:
            raise KafkaError(reply.error)
        result: JoinResult = reply.value
        return result

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
        group.transition(GroupState.PREPARING_REBALANCE, _wall_ms())
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
        now = trio.current_time()
        if group.is_empty:
            group.generation += 1
            group.protocol_name = None
            group.leader_id = None
            group.transition(GroupState.EMPTY, _wall_ms())
            await self._write_group(group)
            return
        group.generation += 1
        group.protocol_name = group.select_protocol()
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        group.transition(GroupState.COMPLETING_REBALANCE, _wall_ms())
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
                   assignments: dict[str, bytes]) -> tuple[str | None, str | None, bytes]:
        """SyncGroup: (protocol type, protocol name, this member's assignment)."""
        group = self._group(group_id)
        if group is None:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"group {group_id} does not exist")
        member = self._check_member(group, member_id, instance_id)
        if generation != group.generation:
            raise KafkaError(ErrorCode.ILLEGAL_GENERATION, f"generation {generation} is not {group.generation}")
        if group.state == GroupState.PREPARING_REBALANCE:
            raise KafkaError(ErrorCode.REBALANCE_IN_PROGRESS)
        if group.state == GroupState.STABLE:
            return group.protocol_type, group.protocol_name, member.assignment
        reply = Reply()
        member.sync = reply
        member.heartbeat_deadline = trio.current_time() + member.session_timeout_ms / 1000
        if member_id == group.leader_id:
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            try:
                await self._write_group(group)
            except KafkaError as exc:
                self._prepare_rebalance(group, f"storing the assignment failed: {exc}")
                raise
            if group.state == GroupState.COMPLETING_REBALANCE and group.generation == generation:
                group.transition(GroupState.STABLE, _wall_ms())
                for m in group.members.values():
                    if m.sync is not None:
                        m.sync.set(ErrorCode.NONE, m.assignment)
                        m.sync = None
        try:
            await reply.wait()
        finally:
            if not reply.done and member.sync is reply:
                member.sync = None
        if reply.error != ErrorCode.NONE:
            raise KafkaError(reply.error)
        return group.protocol_type, group.protocol_name, bytes(reply.value)

    def heartbeat(self, group_id: str, generation: int, member_id: str, instance_id: str | None) -> None:
        group = self._group(group_id)
        if group is None:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"group {group_id} does not exist")
        member = self._check_member(group, member_id, instance_id)
        if generation != group.generation:
            raise KafkaError(ErrorCode.ILLEGAL_GENERATION, f"generation {generation} is not {group.generation}")
        member.heartbeat_deadline = trio.current_time() + member.session_timeout_ms / 1000
        self._poke()
        if group.state == GroupState.PREPARING_REBALANCE:
            raise KafkaError(ErrorCode.REBALANCE_IN_PROGRESS)

    async def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> list[ErrorCode]:
        """LeaveGroup for (member id, instance id) pairs; one error code per member."""
        group = self._group(group_id)
        if group is None:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"group {group_id} does not exist")
        out = []
        for member_id, instance_id in members:
            if not member_id and instance_id is not None:
                member_id = group.static_members.get(instance_id, "")
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
        """OffsetCommit for a whole request; raises KafkaError for the group-level errors."""
        if not group_id:
            raise KafkaError(ErrorCode.INVALID_GROUP_ID, "group id is empty")
        group = self._group(group_id)
        if generation < 0 and not member_id:
            # A commit from outside any generation (assign() users, tools): only for groups
            # that have no live members.
            if group is not None and not group.is_empty:
                raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"group {group_id} has live members")
            if group is None:
                group = self.groups[group_id] = Group(group_id)
        else:
            if group is None:
                raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"group {group_id} does not exist")
            member = self._check_member(group, member_id, instance_id)
            if generation != group.generation:
                raise KafkaError(ErrorCode.ILLEGAL_GENERATION,
                                 f"generation {generation} is not {group.generation}")
            if group.state == GroupState.PREPARING_REBALANCE:
                raise KafkaError(ErrorCode.REBALANCE_IN_PROGRESS)
            member.heartbeat_deadline = trio.current_time() + member.session_timeout_ms / 1000
        records: list[tuple[bytes, bytes | None]] = [
            (OffsetCommitKey(group_id, t, p).encode(), v.encode()) for (t, p), v in offsets.items()
        ]
        if records:
            await self._append(self.partition_of(group_id), records)
        group.offsets.update(offsets)

    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None
                      ) -> dict[tuple[str, int], OffsetCommitValue | None]:
        group = self.groups.get(group_id)
        known = group.offsets if group is not None else {}
        if partitions is None:
            return dict(known)
        return {tp: known.get(tp) for tp in partitions}

    async def delete_offsets(
        self, group_id: str, partitions: list[tuple[str, int]]
    ) -> dict[tuple[str, int], ErrorCode]:
        group = self._group(group_id)
        if group is None:
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"group {group_id} does not exist")
        subscribed = group.subscribed_topics() if not group.is_empty else set()
        if subscribed is None:
            subscribed = set()
        out: dict[tuple[str, int], ErrorCode] = {}
        tombstones: list[tuple[bytes, bytes | None]] = []
        for tp in partitions:
            if tp[0] in subscribed:
                out[tp] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                continue
            out[tp] = ErrorCode.NONE
            if tp in group.offsets:
                tombstones.append((OffsetCommitKey(group_id, *tp).encode(), None))
        if tombstones:
            await self._append(self.partition_of(group_id), tombstones)
            for tp, code in out.items():
                if code == ErrorCode.NONE:
                    group.offsets.pop(tp, None)
        return out

    async def delete_group(self, group_id: str) -> None:
        group = self._group(group_id)
        if group is None:
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"group {group_id} does not exist")
        if not group.is_empty:
            raise KafkaError(ErrorCode.NON_EMPTY_GROUP, f"group {group_id} has {len(group.members)} members")
        group.transition(GroupState.DEAD, _wall_ms())
        records: list[tuple[bytes, bytes | None]] = [
            (OffsetCommitKey(group_id, t, p).encode(), None) for t, p in group.offsets
        ]
        records.append((GroupMetadataKey(group_id).encode(), None))
        try:
            await self._append(self.partition_of(group_id), records)
        except KafkaError:
            group.transition(GroupState.EMPTY, _wall_ms())
            raise
        del self.groups[group_id]

    async def _expire_offsets(self) -> None:
        """Drop offsets of empty groups older than offsets.retention.minutes (Kafka 2.1+ rule)."""
        now = _wall_ms()
        horizon = now - self._config.offsets_retention_minutes * 60_000

        def is_expired(value: OffsetCommitValue) -> bool:
            # An explicit expire time (OffsetCommit v2-v4 retention) wins over the broker's rule.
            if value.expire_timestamp >= 0:
                return value.expire_timestamp < now
            return value.commit_timestamp < horizon

        for group in list(self.groups.values()):
            if group.state != GroupState.EMPTY:
                continue
            expired = [tp for tp, v in group.offsets.items() if is_expired(v)]
            if not expired:
                continue
            records: list[tuple[bytes, bytes | None]] = [
                (OffsetCommitKey(group.group_id, t, p).encode(), None) for t, p in expired
            ]
            try:
                await self._append(self.partition_of(group.group_id), records)
            except KafkaError as exc:
                log.warning("expiring offsets of group %s failed: %s", group.group_id, exc)
                continue
            for tp in expired:
                group.offsets.pop(tp, None)
            log.info("group %s: expired %d committed offsets", group.group_id, len(expired))


class _MemberIdRequired(KafkaError):
    def __init__(self, member_id: str) -> None:
        super().__init__(ErrorCode.MEMBER_ID_REQUIRED, "rejoin with the member id given")
        self.member_id = member_id


MemberIdRequired = _MemberIdRequired
