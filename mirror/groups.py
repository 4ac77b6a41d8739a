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
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import trio

from broker.client import Client, KafkaError, TopicPartition
from broker.client.groups import commit_offsets, describe_groups, fetch_offsets, list_groups
from broker.protocol.errors import ErrorCode
from mirror.config import INTERNAL_GROUPS, Patterns
from mirror.formats import Checkpoint
from mirror.metrics import CheckpointLatencies
from mirror.topics import append

__all__ = ["INACTIVE_STATES", "GroupMirroring", "checkpoint_groups", "run_group_checkpoints"]

log = logging.getLogger(__name__)

# A group in these states has no live consumer whose position a commit from outside would move.
INACTIVE_STATES = frozenset({"Empty", "Dead", ""})


@dataclass(frozen=True)
class GroupMirroring:
    """What checkpointing consumer groups needs of a mirror (mirror/mm2.py builds it with
    `Mm2Mirror.groups_view()`): its clients, its settings, and a few of its answers."""

    source: Client
    target: Client
    target_alias: str
    checkpoints_topic: str  # `<source>.checkpoints.internal` on the target
    groups: Patterns
    checkpoints_s: float  # emit.checkpoints.interval.seconds
    sync_offsets: bool  # sync.group.offsets.enabled
    sync_offsets_s: float  # sync.group.offsets.interval.seconds
    remote_topic: Callable[[str], str | None]  # a source topic's remote name, None when not mirrored
    # (topic, partition, upstream offset) -> downstream offset, None when no sync is at or below
    translate: Callable[[str, int, int], int | None]
    # Runs a step now and every interval, retrying failures and showing them in the status.
    every: Callable[[str, float, Callable[[], Awaitable[object]]], Awaitable[None]]
    written: Callable[[int], None] = lambda count: None  # told how many checkpoints were written
    # Each checkpoint's latency, ms from its pass's start to its write at the target (metrics).
    latencies: CheckpointLatencies = field(default_factory=CheckpointLatencies)


async def run_group_checkpoints(view: GroupMirroring) -> None:
    emitted: dict[tuple[str, str, int], Checkpoint] = {}
    last_sync = -math.inf

    async def step() -> None:
        nonlocal last_sync
        sync_due = view.sync_offsets and trio.current_time() - last_sync >= view.sync_offsets_s
        await checkpoint_groups(view, emitted, sync=sync_due)
        if sync_due:
            last_sync = trio.current_time()

    await view.every("group checkpoints", view.checkpoints_s, step)


async def checkpoint_groups(view: GroupMirroring, emitted: dict[tuple[str, str, int], Checkpoint], *,
                            sync: bool) -> list[Checkpoint]:
    """One pass: translate, write the checkpoints that changed, and (`sync`) commit them to idle
    groups at the target. Returns the checkpoints written."""
    started = time.monotonic()
    groups = [g.group_id for g in await list_groups(view.source)
              if g.protocol_type in ("consumer", "") and view.groups.matches(g.group_id, INTERNAL_GROUPS)]
    fresh: list[Checkpoint] = []
    current: dict[str, list[Checkpoint]] = {}
    for group in sorted(groups):
        offsets = await fetch_offsets(view.source, group)
        for tp, committed in sorted(offsets.items()):
            remote = view.remote_topic(tp.topic)
            if remote is None or committed.offset < 0:
                continue
            downstream = view.translate(tp.topic, tp.partition, committed.offset)
            if downstream is None:
                continue
            checkpoint = Checkpoint(group, remote, tp.partition, committed.offset, downstream,
                                    committed.metadata or "")
            current.setdefault(group, []).append(checkpoint)
            key = (group, remote, tp.partition)
            if emitted.get(key) != checkpoint:
                fresh.append(checkpoint)
    if fresh:
        await append(view.target, view.checkpoints_topic, [(c.key(), c.value()) for c in fresh])
        latency_ms = int((time.monotonic() - started) * 1000)
        for c in fresh:
            emitted[(c.group, c.topic, c.partition)] = c
            view.latencies.add(c.group, c.topic, c.partition, latency_ms)
        view.written(len(fresh))
    if sync and current:
        await _sync_offsets(view, current)
    return fresh


async def _sync_offsets(view: GroupMirroring, current: dict[str, list[Checkpoint]]) -> None:
    described = await describe_groups(view.target, list(current))
    for group, checkpoints in current.items():
        description = described.get(group)
        state = description.state if description is not None else ""
        if state not in INACTIVE_STATES:
            continue  # consumers are live at the target: their offsets are theirs
        existing = await fetch_offsets(view.target, group)
        updates = {}
        for c in checkpoints:
            tp = TopicPartition(c.topic, c.partition)
            have = existing.get(tp)
            if have is None or have.offset < c.downstream_offset:
                updates[tp] = c.downstream_offset
        if not updates:
            continue
        try:
            await commit_offsets(view.target, group, updates)
            log.info("group %s at %s: offsets synced for %d partitions", group, view.target_alias, len(updates))
        except KafkaError as exc:
            if exc.code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.REBALANCE_IN_PROGRESS,
                            ErrorCode.ILLEGAL_GENERATION):
                continue  # a consumer joined meanwhile: leave the group to it
            raise
