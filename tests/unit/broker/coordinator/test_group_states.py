"""The group state table (`VALID_PREVIOUS_STATES`) and `Group.transition`, which checks it: every
move the table lists is made, every other one is refused loudly and changes nothing. The cases
are generated from the table, so a row added or dropped is tested at once."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
import trio
import trio.testing

from broker.config import BrokerConfig
from broker.coordinator.coordinator import GroupCoordinator
from broker.coordinator.group import VALID_PREVIOUS_STATES, Group, GroupState, IllegalGroupStateTransition
from broker.coordinator.offsets_records import OffsetCommitValue
from broker.protocol.errors import ErrorCode, KafkaError

S = GroupState
PAIRS = list(itertools.product(GroupState, GroupState))
LEGAL = [(a, b) for a, b in PAIRS if a in VALID_PREVIOUS_STATES[b]]
ILLEGAL = [(a, b) for a, b in PAIRS if a not in VALID_PREVIOUS_STATES[b]]

# Apache Kafka's GroupState.validPreviousStates (GroupMetadata.scala), for comparison.
KAFKA = {
    S.PREPARING_REBALANCE: {S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY},
    S.COMPLETING_REBALANCE: {S.PREPARING_REBALANCE},
    S.STABLE: {S.COMPLETING_REBALANCE},
    S.EMPTY: {S.PREPARING_REBALANCE},
    S.DEAD: set(GroupState),
}


def _name(pair: tuple[GroupState, GroupState]) -> str:
    return f"{pair[0].value}->{pair[1].value}"


def test_the_table_covers_every_state_and_is_kafkas_but_for_an_undone_deletion() -> None:
    assert set(VALID_PREVIOUS_STATES) == set(GroupState)
    differences = {(a, b) for a, b in PAIRS if (a in VALID_PREVIOUS_STATES[b]) != (a in KAFKA[b])}
    # The only move Kafka lacks: DeleteGroups whose tombstones were not stored puts the group back.
    assert differences == {(S.DEAD, S.EMPTY)}
    assert ILLEGAL, "a table that allows everything checks nothing"


@pytest.mark.parametrize("pair", LEGAL, ids=_name)
def test_a_legal_transition_is_made(pair: tuple[GroupState, GroupState]) -> None:
    current, target = pair
    group = Group("g", state=current, state_timestamp_ms=1)
    group.transition(target, 2)
    assert (group.state, group.state_timestamp_ms) == (target, 2)


@pytest.mark.parametrize("pair", ILLEGAL, ids=_name)
def test_an_illegal_transition_is_refused_and_changes_nothing(pair: tuple[GroupState, GroupState]) -> None:
    current, target = pair
    group = Group("orders-app", state=current, state_timestamp_ms=1)
    with pytest.raises(IllegalGroupStateTransition) as info:
        group.transition(target, 2)
    message = str(info.value)
    assert "orders-app" in message and f"from {current.value} to {target.value}" in message, message
    assert (info.value.group_id, info.value.current, info.value.target) == ("orders-app", current, target)
    assert (group.state, group.state_timestamp_ms) == (current, 1)


def test_nothing_but_transition_changes_a_groups_state() -> None:
    # A group is built in a state (Empty, or as read back from the log) and moved by
    # `transition` only: an assignment anywhere else in the coordinator would bypass the table.
    coordinator = Path(__file__).resolve().parents[4] / "broker" / "coordinator"
    assignment = re.compile(r"\.state\s*=(?!=)")
    found = [(path.name, line.strip()) for path in sorted(coordinator.glob("*.py"))
             for line in path.read_text().splitlines() if assignment.search(line)]
    assert found == [("group.py", "self.state = state"), ("txn_state.py", "self.state = target")]


class RefusingStore:
    """__consumer_offsets whose appends, once `refuse` is set, wait for `release` and then fail
    as a partition short of in-sync replicas does."""

    def __init__(self) -> None:
        self.refuse = False
        self.release = trio.Event()

    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> int:
        if self.refuse:
            await self.release.wait()
            raise KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS, "ISR below min.insync.replicas")
        return 0


async def test_a_deletion_whose_tombstones_are_refused_puts_the_group_back(tmp_path: Path) -> None:
    # The one move beyond Kafka's table (Dead -> Empty), through the coordinator: while the
    # tombstones are written the group is Dead (a join is turned away); refused, it is Empty again
    # with its offsets, through `transition`.
    store = RefusingStore()
    config = BrokerConfig.from_properties({"log.dirs": str(tmp_path), "group.initial.rebalance.delay.ms": "0"})
    c = GroupCoordinator(config, store.append)
    value = OffsetCommitValue(7, "", 1_700_000_000_000)
    await c.commit("g", -1, "", None, {("t", 0): value})
    store.refuse = True
    outcome: list[ErrorCode] = []

    async def delete() -> None:
        try:
            await c.delete_group("g")
        except KafkaError as exc:
            outcome.append(exc.code)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(delete)
        await trio.testing.wait_all_tasks_blocked()
        assert c.groups["g"].state == GroupState.DEAD
        with pytest.raises(KafkaError) as info:
            await c.join("g", "", None, "client", "127.0.0.1", 10_000, 30_000, "consumer", [("range", b"")],
                         require_known_member_id=False)
        assert info.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE
        store.release.set()
    assert outcome == [ErrorCode.COORDINATOR_NOT_AVAILABLE]
    assert c.groups["g"].state == GroupState.EMPTY
    assert c.fetch_offsets("g", None) == {("t", 0): value}
