"""Consumer-group checkpoints and offset sync, as MM2's MirrorCheckpointConnector.

Every `emit.checkpoints.interval.seconds` each source group that matches the group patterns has
its committed offsets on mirrored topics translated through the offset syncs; what changed is
written as Checkpoint records to `<source>.checkpoints.internal` on the target. With
`sync.group.offsets.enabled`, the translated offsets are also committed to the same group at the
target, but only while that group has no active members there (committing under a live consumer
would move it), and never backwards (a consumer that already got further at the target keeps
its offsets).
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

import trio

from broker.client import KafkaError, TopicPartition
from broker.client.groups import commit_offsets, describe_groups, fetch_offsets, list_groups
from broker.protocol.errors import ErrorCode
from mirror.config import INTERNAL_GROUPS
from mirror.formats import Checkpoint
from mirror.topics import append

if TYPE_CHECKING:
    from mirror.daemon import Mirror

__all__ = ["checkpoint_groups", "run_group_checkpoints"]

log = logging.getLogger(__name__)

_INACTIVE = frozenset({"Empty", "Dead", ""})


async def run_group_checkpoints(mirror: Mirror) -> None:
    emitted: dict[tuple[str, str, int], Checkpoint] = {}
    last_sync = -math.inf

    async def step() -> None:
        nonlocal last_sync
        sync_due = (mirror.config.sync_group_offsets
                    and trio.current_time() - last_sync >= mirror.config.sync_group_offsets_s)
        await checkpoint_groups(mirror, emitted, sync=sync_due)
        if sync_due:
            last_sync = trio.current_time()

    await mirror.every("group checkpoints", mirror.config.checkpoints_s, step)


async def checkpoint_groups(mirror: Mirror, emitted: dict[tuple[str, str, int], Checkpoint], *,
                            sync: bool) -> list[Checkpoint]:
    """One pass: translate, write the checkpoints that changed, and (`sync`) commit them to idle
    groups at the target. Returns the checkpoints written."""
    groups = [g.group_id for g in await list_groups(mirror.source)
              if g.protocol_type in ("consumer", "") and mirror.config.groups.matches(g.group_id, INTERNAL_GROUPS)]
    fresh: list[Checkpoint] = []
    current: dict[str, list[Checkpoint]] = {}
    for group in sorted(groups):
        offsets = await fetch_offsets(mirror.source, group)
        for tp, committed in sorted(offsets.items()):
            remote = mirror.topics.get(tp.topic)
            if remote is None or committed.offset < 0:
                continue
            downstream = mirror.syncs.translate(tp.topic, tp.partition, committed.offset)
            if downstream is None:
                continue
            checkpoint = Checkpoint(group, remote, tp.partition, committed.offset, downstream,
                                    committed.metadata or "")
            current.setdefault(group, []).append(checkpoint)
            key = (group, remote, tp.partition)
            if emitted.get(key) != checkpoint:
                fresh.append(checkpoint)
    if fresh:
        await append(mirror.target, mirror.policy.checkpoints_topic(mirror.source_alias),
                     [(c.key(), c.value()) for c in fresh])
        for c in fresh:
            emitted[(c.group, c.topic, c.partition)] = c
        mirror.group_checkpoints += len(fresh)
    if sync and current:
        await _sync_offsets(mirror, current)
    return fresh


async def _sync_offsets(mirror: Mirror, current: dict[str, list[Checkpoint]]) -> None:
    described = await describe_groups(mirror.target, list(current))
    for group, checkpoints in current.items():
        description = described.get(group)
        state = description.state if description is not None else ""
        if state not in _INACTIVE:
            continue  # consumers are live at the target: their offsets are theirs
        existing = await fetch_offsets(mirror.target, group)
        updates = {}
        for c in checkpoints:
            tp = TopicPartition(c.topic, c.partition)
            have = existing.get(tp)
            if have is None or have.offset < c.downstream_offset:
                updates[tp] = c.downstream_offset
        if not updates:
            continue
        try:
            await commit_offsets(mirror.target, group, updates)
            log.info("group %s at %s: offsets synced for %d partitions", group, mirror.target_alias, len(updates))
        except KafkaError as exc:
            if exc.code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.REBALANCE_IN_PROGRESS,
                            ErrorCode.ILLEGAL_GENERATION):
                continue  # a consumer joined meanwhile: leave the group to it
            raise
