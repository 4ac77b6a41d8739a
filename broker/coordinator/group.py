"""A consumer group's state as the classic group protocol defines it.

States: Empty (no members, maybe committed offsets), PreparingRebalance (waiting for members to
(re)join), CompletingRebalance (joined; waiting for the leader's assignment), Stable, Dead.
Which state may follow which is one table, `VALID_PREVIOUS_STATES` (Kafka's GroupState
`validPreviousStates`), and `Group.transition` is the only way a group changes state: it refuses
a move the table does not allow with `IllegalGroupStateTransition` instead of applying it.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import trio

from broker.coordinator.offsets_records import OffsetCommitValue
from broker.coordinator.subscriptions import topics_of
from broker.protocol.errors import ErrorCode

__all__ = ["VALID_PREVIOUS_STATES", "Group", "GroupState", "IllegalGroupStateTransition", "Member", "Reply"]


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_S = GroupState

# Each state, and the states a group may come to it from. A move the table does not list is a
# bug in the coordinator, refused loudly rather than applied.
VALID_PREVIOUS_STATES: Mapping[GroupState, frozenset[GroupState]] = {
    # A rebalance starts: a member joins (a new one, one rejoining, or one with other protocols)
    # an Empty, Stable or CompletingRebalance group; a member leaves or its session times out in
    # Stable or CompletingRebalance; the leader's assignment cannot be stored (CompletingRebalance).
    # Never from PreparingRebalance itself: a join then waits in the rebalance under way.
    _S.PREPARING_REBALANCE: frozenset({_S.EMPTY, _S.STABLE, _S.COMPLETING_REBALANCE}),
    # The join phase ends (every member rejoined, or the rebalance timeout passed) with members
    # left: the generation is bumped and the leader is to assign.
    _S.COMPLETING_REBALANCE: frozenset({_S.PREPARING_REBALANCE}),
    # The leader's SyncGroup assignment was stored: every member gets its share.
    _S.STABLE: frozenset({_S.COMPLETING_REBALANCE}),
    # The join phase ends with no member left (all left or timed out). And, unlike Kafka (whose
    # group stays Dead when its tombstones fail), a DeleteGroups whose tombstones were not stored
    # undoes its Dead: the group was not deleted, its offsets and metadata are still in the log,
    # and the client was told so. (The Dead meanwhile kept joins off while the tombstones were
    # being written.)
    _S.EMPTY: frozenset({_S.PREPARING_REBALANCE, _S.DEAD}),
    # Deleted (DeleteGroups or offset retention, both of an Empty group only, as the callers
    # check) or unloaded because this broker stopped leading its __consumer_offsets partition,
    # which may happen in any state, Dead included (a group unloaded while being deleted).
    _S.DEAD: frozenset(GroupState),
}


class IllegalGroupStateTransition(RuntimeError):
    """A group was asked to move to a state the table does not allow from its current one."""

    def __init__(self, group_id: str, current: GroupState, target: GroupState) -> None:
        allowed = ", ".join(sorted(s.value for s in VALID_PREVIOUS_STATES[target]))
        super().__init__(f"group {group_id}: cannot move from {current.value} to {target.value} "
                         f"(only from {allowed})")
        self.group_id = group_id
        self.current = current
        self.target = target


class Reply:
    """A response a waiting JoinGroup or SyncGroup request gets later; set exactly once."""

    def __init__(self) -> None:
        self._event = trio.Event()
        self.error = ErrorCode.NONE
        self.value: Any = None

    def set(self, error: ErrorCode, value: Any = None) -> None:
        if not self._event.is_set():
            self.error = error
            self.value = value
            self._event.set()

    @property
    def done(self) -> bool:
        return self._event.is_set()

    async def wait(self) -> None:
        await self._event.wait()


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join: Reply | None = None
    sync: Reply | None = None
    heartbeat_deadline: float = float("inf")

    def metadata_for(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def forget(self, reply: Reply) -> bool:
        """Drop `reply` if it is this member's parked JoinGroup or SyncGroup; True if it was."""
        if self.join is reply:
            self.join = None
            return True
        if self.sync is reply:
            self.sync = None
            return True
        return False

    def supports(self, protocol: str) -> bool:
        return any(name == protocol for name, _ in self.protocols)


@dataclass(slots=True)
class Group:
    group_id: str
    # The state the group is built in (Empty, or as read back from the log); changed afterwards
    # by `transition` only.
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    # Member ids handed out with MEMBER_ID_REQUIRED, valid until that member joins or times out.
    pending: dict[str, float] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    rebalance_deadline: float | None = None
    rebalance_started_empty: bool = False
    rebalance_limit: float | None = None
    offsets: dict[tuple[str, int], OffsetCommitValue] = field(default_factory=dict)
    state_timestamp_ms: int = -1

    def transition(self, state: GroupState, now_ms: int) -> None:
        """Move to `state` at `now_ms` (the state's timestamp, which DescribeGroups reports and
        offset retention of an Empty group counts from).

        Raises IllegalGroupStateTransition, changing nothing, when `VALID_PREVIOUS_STATES` does
        not allow `state` after the current one."""
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise IllegalGroupStateTransition(self.group_id, self.state, state)
        self.state = state
        self.state_timestamp_ms = now_ms

    @property
    def is_empty(self) -> bool:
        return not self.members

    def all_joined(self) -> bool:
        """Every member has rejoined and no member id handed out with MEMBER_ID_REQUIRED is
        still on its way back (Kafka waits for those too, so they land in this generation)."""
        return not self.pending and all(m.join is not None for m in self.members.values())

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def select_protocol(self) -> str | None:
        """The protocol every member supports that most members list first among those."""
        members = list(self.members.values())
        if not members:
            return None
        common = [name for name, _ in members[0].protocols if all(m.supports(name) for m in members)]
        if not common:
            return None
        votes = Counter(next(name for name, _ in m.protocols if name in common) for m in members)
        best = max(votes.values())
        return next(name for name in common if votes[name] == best)

    def can_accept(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Whether a joining member's protocols fit the group (INCONSISTENT_GROUP_PROTOCOL if not)."""
        if not protocols or not protocol_type:
            return False
        if self.is_empty:
            return True
        if protocol_type != self.protocol_type:
            return False
        names = {name for name, _ in protocols}
        return any(all(m.supports(n) for m in self.members.values()) for n in names)

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to (consumer protocol), None when unknown."""
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            found = topics_of(member.metadata_for(self.protocol_name))
            if found is None:
                return None
            topics |= found
        return topics
