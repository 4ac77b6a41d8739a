"""Raising partitions' leader epochs to a link source's (Causeway's LinkLeaderEpoch, KIP-1279's
invariant), as Kafka's ZooKeeper-mode controller changes any leader epoch.

A mirror topic's leader epoch must never be below its source partition's: a client that saw the
source's epoch (in its metadata, or in an offset it committed there) takes metadata with a lower
epoch for stale and asks again and again. Per partition, when its epoch is below the source's,
the controller writes its state znode with the same leader and ISR at epoch
``max(current + 1, source)`` (fenced by the controller epoch and the znode's version, as every
election) and sends LeaderAndIsr to its replicas and UpdateMetadata to every broker: the leader
starts the new epoch at its log end (its leader-epoch cache records it at the next append),
followers follow it, so OffsetForLeaderEpoch and follower truncation stay consistent. An epoch
already at or above the source's is left alone: never lowered, never bumped for nothing.

Per partition: unknown, or its topic being deleted -> UNKNOWN_TOPIC_OR_PARTITION; no leader
(offline, or no state yet) -> LEADER_NOT_AVAILABLE (asked again later: the election that gives
it a leader bumps the epoch anyway); the znode moved on meanwhile -> NONE with the epoch
re-read, and the caller asks again while it is still below. The request handler bounds the
source's value before it gets here.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from broker.controller.zk.context import ControllerContext
from broker.controller.zk.election import NO_LEADER, LeaderAndIsr
from broker.protocol.errors import ErrorCode

__all__ = ["raise_leader_epochs"]

log = logging.getLogger(__name__)

Result = tuple[ErrorCode, "str | None", int]


async def raise_leader_epochs(ctx: ControllerContext, wanted: Mapping[tuple[str, int], int]
                              ) -> dict[tuple[str, int], Result]:
    """Run on the controller's event loop. ``wanted``: partition -> the source's leader epoch.
    Returns, per partition, (error, message, its leader epoch now)."""
    results: dict[tuple[str, int], Result] = {}
    changed: list[tuple[str, int]] = []
    for (name, p), source_epoch in wanted.items():
        topic = ctx.topics.get(name)
        entry = topic.partitions.get(p) if topic is not None and name not in ctx.deleting else None
        if entry is None:
            results[(name, p)] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None, -1)
            continue
        state = entry.state
        if state is None or state.leader == NO_LEADER:
            results[(name, p)] = (ErrorCode.LEADER_NOT_AVAILABLE, f"{name}-{p} has no leader", -1)
            continue
        if state.leader_epoch >= source_epoch:
            results[(name, p)] = (ErrorCode.NONE, None, state.leader_epoch)
            continue
        raised = LeaderAndIsr(state.leader, max(state.leader_epoch + 1, source_epoch), state.isr)
        if not await ctx.write_state(name, p, entry, raised):
            # Changed under us (re-read): the caller asks again while it is still below.
            now = entry.state.leader_epoch if entry.state is not None else -1
            results[(name, p)] = (ErrorCode.NONE, None, now)
            continue
        log.info("%s-%d: leader epoch raised from %d to %d, to the link source's %d (leader %d)", name, p,
                 state.leader_epoch, raised.leader_epoch, source_epoch, raised.leader)
        changed.append((name, p))
        results[(name, p)] = (ErrorCode.NONE, None, raised.leader_epoch)
    if changed:
        ctx.announce(changed)
    return results
