"""Leader elections an operator asks for, as Kafka's ZooKeeper-mode controller runs them.

Two ways in, one election (Kafka's KafkaController.processReplicaLeaderElection):

* ElectLeaders (API 43, KIP-460: ``kafka-leader-election``), which the admin client sends to the
  controller; a broker that is not the controller answers NOT_CONTROLLER for each partition, as
  Kafka's does.
* The ``/admin/preferred_replica_election`` znode (the legacy ``--zookeeper`` tools): a preferred
  election for the partitions it lists, after which the controller deletes it.

Per partition: unknown -> UNKNOWN_TOPIC_OR_PARTITION; its topic being deleted -> skipped (no
answer, as Kafka); already led by its preferred replica (preferred) or by a live broker
(unclean) -> ELECTION_NOT_NEEDED; otherwise elected with the controller's own strategies
(broker/controller/zk/election.py: the preferred replica if it is alive and in the ISR; for
unclean, the first live ISR member, else any live replica) and written to the state znode like
every other election, or PREFERRED_LEADER_NOT_AVAILABLE / ELIGIBLE_LEADERS_NOT_AVAILABLE with
Kafka's message when nobody is eligible.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import partial

from broker.controller.zk import znodes
from broker.controller.zk.client import ZkError, ZkNoNode
from broker.controller.zk.context import ControllerContext
from broker.controller.zk.election import NO_LEADER, elect_offline, elect_preferred
from broker.protocol.errors import ErrorCode

__all__ = ["elect_leaders", "follow_preferred_replica_election"]

log = logging.getLogger(__name__)

Result = tuple[ErrorCode, "str | None", int]


async def elect_leaders(ctx: ControllerContext, partitions: Sequence[tuple[str, int]] | None, *,
                        unclean: bool) -> dict[tuple[str, int], Result]:
    """Run on the controller's event loop. ``partitions`` None: every partition. Returns, per
    partition, (error, message, leader)."""
    if partitions is None:
        partitions = ctx.all_partitions()
    live = ctx.live()
    strategy = "OfflinePartitionLeaderElectionStrategy(true)" if unclean else \
        "PreferredReplicaPartitionLeaderElectionStrategy"
    kind = "UNCLEAN" if unclean else "PREFERRED"
    results: dict[tuple[str, int], Result] = {}
    changed: list[tuple[str, int]] = []
    for name, p in dict.fromkeys(partitions):
        topic = ctx.topics.get(name)
        entry = topic.partitions.get(p) if topic is not None else None
        if entry is None or not entry.replicas:
            results[(name, p)] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None, NO_LEADER)
            continue
        if name in ctx.deleting:
            log.warning("skipping %s leader election for %s-%d: the topic is being deleted", kind, name, p)
            continue
        state = entry.state
        if state is not None:
            if unclean and state.leader != NO_LEADER and state.leader in ctx.brokers:
                results[(name, p)] = (ErrorCode.ELECTION_NOT_NEEDED, None, state.leader)
                continue
            if not unclean and state.leader == entry.replicas[0]:
                results[(name, p)] = (ErrorCode.ELECTION_NOT_NEEDED, None, state.leader)
                continue
            online = ctx.online(name, p, live)
            elected = elect_offline(entry.replicas, state, online, unclean=True) if unclean else \
                elect_preferred(entry.replicas, state, online)
        else:
            elected = None  # no state znode yet: the controller gives it its first leader itself
        if elected is None or not await ctx.write_state(name, p, entry, elected):
            code = ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE if unclean else ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
            results[(name, p)] = (code, f"Failed to elect leader for partition {name}-{p} under strategy "
                                        f"{strategy}", NO_LEADER)
            continue
        if unclean and state is not None and elected.leader not in state.isr:
            log.warning("unclean leader election (asked for): %s-%d is led by %d, outside its ISR %s; records "
                        "only the old ISR had are lost", name, p, elected.leader, list(state.isr))
        changed.append((name, p))
        results[(name, p)] = (ErrorCode.NONE, None, elected.leader)
    if changed:
        log.info("%s leader election moved %d partitions: %s", kind, len(changed),
                 ", ".join(f"{t}-{p}" for t, p in changed[:20]))
        ctx.announce(changed)
    return results


async def follow_preferred_replica_election(ctx: ControllerContext) -> None:
    """Watch ``/admin/preferred_replica_election`` for the controller's term: each time it
    appears (and at the start of the term, when it is already there) its partitions get a
    preferred election on the event loop, then the znode is deleted, as Kafka's controller does."""
    with ctx.zk.watch_data(znodes.PREFERRED_REPLICA_ELECTION) as changes:
        async for data in changes:
            if data is not None:
                ctx.submit(partial(_from_znode, ctx, data))


async def _from_znode(ctx: ControllerContext, data: bytes) -> None:
    try:
        partitions = znodes.parse_isr_change(znodes.PREFERRED_REPLICA_ELECTION, data)
    except znodes.ZnodeError as exc:
        log.error("ignoring a preferred replica election: %s", exc)
        partitions = []
    if partitions:
        results = await elect_leaders(ctx, partitions, unclean=False)
        failed = {tp: r for tp, r in results.items() if r[0] not in (ErrorCode.NONE, ErrorCode.ELECTION_NOT_NEEDED)}
        for (t, p), (code, message, _) in sorted(failed.items()):
            log.warning("preferred replica election of %s-%d failed: %s%s", t, p, code.name,
                        f" ({message})" if message else "")
    try:
        await ctx.zk.delete(znodes.PREFERRED_REPLICA_ELECTION)
    except ZkNoNode:
        pass
    except ZkError as exc:
        log.warning("cannot delete %s: %s", znodes.PREFERRED_REPLICA_ELECTION, exc)
