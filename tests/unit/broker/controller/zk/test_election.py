"""Leader election and ISR changes as Kafka's ZooKeeper-mode controller makes them."""

from __future__ import annotations

from broker.controller.zk.election import (
    NO_LEADER,
    LeaderAndIsr,
    elect_controlled_shutdown,
    elect_offline,
    elect_preferred,
    initial_leader_and_isr,
    on_broker_loss,
    remove_from_isr,
)


def test_new_partition_first_live_replica_leads() -> None:
    assert initial_leader_and_isr([2, 1, 3], {1, 2, 3}) == LeaderAndIsr(2, 0, (2, 1, 3))
    assert initial_leader_and_isr([2, 1, 3], {1, 3}) == LeaderAndIsr(1, 0, (1, 3))
    assert initial_leader_and_isr([2], {1}) is None


def test_offline_election_takes_first_live_isr_member_in_assignment_order() -> None:
    state = LeaderAndIsr(1, 4, (3, 2, 1))
    assert elect_offline([1, 2, 3], state, {2, 3}, unclean=False) == LeaderAndIsr(2, 5, (3, 2))


def test_offline_election_never_picks_outside_isr_unless_unclean() -> None:
    state = LeaderAndIsr(1, 4, (1,))
    assert elect_offline([1, 2, 3], state, {2, 3}, unclean=False) is None
    assert elect_offline([1, 2, 3], state, {2, 3}, unclean=True) == LeaderAndIsr(2, 5, (2,))


def test_preferred_election() -> None:
    state = LeaderAndIsr(2, 1, (1, 2))
    assert elect_preferred([1, 2], state, {1, 2}) == LeaderAndIsr(1, 2, (1, 2))
    assert elect_preferred([1, 2], LeaderAndIsr(2, 1, (2,)), {1, 2}) is None  # not in ISR
    assert elect_preferred([1, 2], LeaderAndIsr(1, 1, (1, 2)), {1, 2}) is None  # already leads


def test_controlled_shutdown_moves_leader_and_shrinks_isr() -> None:
    state = LeaderAndIsr(1, 0, (1, 2, 3))
    assert elect_controlled_shutdown([1, 2, 3], state, {1, 2, 3}, {1}) == LeaderAndIsr(2, 1, (2, 3))
    assert elect_controlled_shutdown([1], LeaderAndIsr(1, 0, (1,)), {1}, {1}) is None


def test_broker_loss_follower_leaves_isr() -> None:
    state = LeaderAndIsr(1, 3, (1, 2, 3))
    assert on_broker_loss([1, 2, 3], state, {1, 2}, unclean=False) == LeaderAndIsr(1, 4, (1, 2))
    assert on_broker_loss([1, 2, 3], state, {1, 2, 3}, unclean=False) is None


def test_broker_loss_leader_replaced_from_isr() -> None:
    state = LeaderAndIsr(1, 3, (1, 2, 3))
    assert on_broker_loss([1, 2, 3], state, {2, 3}, unclean=False) == LeaderAndIsr(2, 4, (2, 3))


def test_last_isr_member_lost_goes_offline_and_keeps_isr() -> None:
    state = LeaderAndIsr(1, 3, (1,))
    lost = on_broker_loss([1, 2], state, {2}, unclean=False)
    assert lost == LeaderAndIsr(NO_LEADER, 4, (1,))
    # When it returns it is the one clean leader again.
    assert elect_offline([1, 2], lost, {1, 2}, unclean=False) == LeaderAndIsr(1, 5, (1,))


def test_remove_from_isr_never_empties() -> None:
    assert remove_from_isr(LeaderAndIsr(1, 0, (1, 2)), 2) == LeaderAndIsr(1, 1, (1,))
    assert remove_from_isr(LeaderAndIsr(1, 0, (1,)), 1) == LeaderAndIsr(NO_LEADER, 1, (1,))
    assert remove_from_isr(LeaderAndIsr(1, 0, (1,)), 5) is None
