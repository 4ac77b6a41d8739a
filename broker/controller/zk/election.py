"""Partition leader election as Kafka's ZooKeeper-mode controller does it.

Pure functions over a partition's assignment (replicas, preferred leader first) and its current
leader and ISR (PartitionLeaderElectionAlgorithms and the ISR changes of ReplicaStateMachine):

* a new partition: the first live replica leads, the live replicas are the ISR;
* offline (the leader died): the first replica in assignment order that is alive and in the ISR;
  only when ``unclean.leader.election.enable`` is true, any live replica, whose ISR is then itself
  alone (records the old ISR had may be lost: that is what unclean means);
* preferred: the first replica of the assignment, if alive and in the ISR;
* controlled shutdown: like offline, skipping the brokers that are shutting down, which also
  leave the ISR;
* a broker lost: it leaves every ISR, except that an ISR is never made empty: the last member
  stays so that, when it returns, it is the one eligible leader (Kafka keeps it too). A partition
  without an eligible leader goes offline: leader -1 (NoLeader).

Every change of leader or ISR made by the controller bumps the leader epoch, as Kafka's
``newLeaderAndIsr`` does.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

__all__ = [
    "NO_LEADER",
    "LeaderAndIsr",
    "initial_leader_and_isr",
    "elect_offline",
    "elect_preferred",
    "elect_controlled_shutdown",
    "remove_from_isr",
    "on_broker_loss",
]

NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class LeaderAndIsr:
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]

    def changed(self, leader: int, isr: Sequence[int]) -> LeaderAndIsr:
        """The next state: a new leader and/or ISR, one leader epoch later."""
        return LeaderAndIsr(leader, self.leader_epoch + 1, tuple(isr))


def initial_leader_and_isr(replicas: Sequence[int], live: Collection[int]) -> LeaderAndIsr | None:
    """The first state of a new partition, or None when none of its replicas is alive (it
    waits, as Kafka's NewPartition does, until one is)."""
    alive = [r for r in replicas if r in live]
    if not alive:
        return None
    return LeaderAndIsr(alive[0], 0, tuple(alive))


def elect_offline(
    replicas: Sequence[int], current: LeaderAndIsr, live: Collection[int], *, unclean: bool
) -> LeaderAndIsr | None:
    """A new leader for a partition whose leader is gone; None when nobody is eligible."""
    for candidate in replicas:
        if candidate in live and candidate in current.isr:
            return current.changed(candidate, [r for r in current.isr if r in live])
    if unclean:
        for candidate in replicas:
            if candidate in live:
                return current.changed(candidate, [candidate])
    return None


def elect_preferred(replicas: Sequence[int], current: LeaderAndIsr, live: Collection[int]) -> LeaderAndIsr | None:
    """The preferred replica as leader, when it is alive and in the ISR and not already leading."""
    if not replicas:
        return None
    preferred = replicas[0]
    if preferred == current.leader or preferred not in live or preferred not in current.isr:
        return None
    return current.changed(preferred, current.isr)


def elect_controlled_shutdown(
    replicas: Sequence[int], current: LeaderAndIsr, live: Collection[int], shutting_down: Collection[int]
) -> LeaderAndIsr | None:
    """A leader that is not shutting down, from the ISR; the shutting-down brokers leave the
    ISR. None when no such replica exists (the partition keeps its leader until it dies)."""
    for candidate in replicas:
        if candidate in live and candidate in current.isr and candidate not in shutting_down:
            return current.changed(candidate, [r for r in current.isr if r not in shutting_down])
    return None


def remove_from_isr(current: LeaderAndIsr, broker: int) -> LeaderAndIsr | None:
    """``broker`` leaves the ISR (never emptying it) and, if it led, the leadership; None when
    nothing changes."""
    if broker not in current.isr and broker != current.leader:
        return None
    isr = current.isr if len(current.isr) == 1 else tuple(r for r in current.isr if r != broker)
    leader = NO_LEADER if current.leader == broker else current.leader
    if isr == current.isr and leader == current.leader:
        return None
    return current.changed(leader, isr)


def on_broker_loss(
    replicas: Sequence[int], current: LeaderAndIsr, live: Collection[int], *, unclean: bool
) -> LeaderAndIsr | None:
    """The new state of a partition after brokers outside ``live`` died; None when unchanged.

    A dead leader is replaced from the ISR; if nobody is eligible, the partition goes offline
    (leader -1) and the dead brokers still leave the ISR, but its last member stays.
    """
    state = current
    leader_dead = state.leader != NO_LEADER and state.leader not in live
    if leader_dead:
        elected = elect_offline(replicas, state, live, unclean=unclean)
        if elected is not None:
            return elected
    dead = [r for r in state.isr if r not in live]
    if not leader_dead and not dead:
        return None
    leader = NO_LEADER if leader_dead else state.leader
    # Everyone in the ISR died: its last member stays (Kafka removes dead replicas one by one,
    # never the last), so it is the one clean leader when it returns.
    isr = tuple(r for r in state.isr if r in live) or state.isr[-1:]
    if leader == state.leader and isr == state.isr:
        return None
    return state.changed(leader, isr)
