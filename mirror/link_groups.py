"""Consumer-group offsets in link mode: carried over unchanged.

A mirror topic has the source's offsets, so a group's committed offset at the source means the
same record at the target: no offset syncs, no translation, no checkpoints topic. Every
`sync.group.offsets.interval.seconds` each source group that matches the group patterns has its
committed offsets on the mirror topics being copied committed to the same group at the target,
with their metadata, each clamped to the target partition's high watermark (a consumer that
fails over never skips records not copied yet), and only while that group has no active members
at the target (committing under a live consumer would move it). A promoted topic is no longer
copied, so its offsets at the target are its consumers' own from then on; `carry_offsets` is
also what `causeway mirror promote` runs one last time before it promotes (mirror/promote.py),
so a group moved after a switch-over re-reads nothing.

The source's leader epoch is not carried: the target's epochs are its own, and a consumer
checking an epoch from another cluster (OffsetForLeaderEpoch) would see a truncation that
never happened.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass, field

from broker.client import Client, KafkaError, TopicPartition, admin
from broker.client.admin import LATEST
from broker.client.groups import CommittedOffset, commit_offsets, describe_groups, fetch_offsets, list_groups
from broker.protocol.errors import ErrorCode
from mirror.config import INTERNAL_GROUPS
from mirror.groups import INACTIVE_STATES
from mirror.runtime import Mirror

__all__ = ["CarriedOffsets", "carry_group_offsets", "carry_offsets"]

log = logging.getLogger(__name__)


@dataclass
class CarriedOffsets:
    """One pass: per group, the offsets the target holds now (those committed by this pass and
    those already equal); the groups left alone because consumers are live at the target."""

    offsets: dict[str, dict[TopicPartition, int]] = field(default_factory=dict)
    active: list[str] = field(default_factory=list)
    committed: int = 0  # partitions whose offset this pass changed


async def carry_group_offsets(mirror: Mirror) -> int:
    """One pass over the source's groups; returns how many partitions' offsets were committed
    at the target. Raises KafkaError / ClientError (the caller retries)."""
    copied = {tp for tp in mirror.partitions if tp.topic in mirror.topics}
    if not copied:
        return 0
    carried = await carry_offsets(mirror.source, mirror.target, copied,
                                  lambda group: mirror.config.groups.matches(group, INTERNAL_GROUPS))
    mirror.group_checkpoints += carried.committed
    return carried.committed


async def carry_offsets(source: Client, target: Client, copied: Set[TopicPartition],
                        matches: Callable[[str], bool], *,
                        ceilings: Mapping[TopicPartition, int] | None = None) -> CarriedOffsets:
    """Commit at `target` each matching source group's committed offsets on `copied`, clamped
    to the target's high watermark (or to `ceilings`, the copy's ends when the caller read them
    before the target's own writes began), for groups with no live members at the target.
    Raises KafkaError / ClientError when either cluster fails to answer."""
    carried = CarriedOffsets()
    if not copied:
        return carried
    groups = [g.group_id for g in await list_groups(source)
              if g.protocol_type in ("consumer", "") and matches(g.group_id)]
    wanted: dict[str, dict[TopicPartition, CommittedOffset]] = {}
    for group in sorted(groups):
        offsets = await fetch_offsets(source, group)
        picked = {tp: c for tp, c in offsets.items() if tp in copied and c.offset >= 0}
        if picked:
            wanted[group] = picked
    if not wanted:
        return carried
    partitions = {tp for offsets in wanted.values() for tp in offsets}
    if ceilings is None:
        ends = {tp: listed.offset for tp, listed in
                (await admin.list_offsets(target, {tp: LATEST for tp in partitions})).items()}
    else:
        ends = {tp: ceilings.get(tp, 0) for tp in partitions}
    described = await describe_groups(target, list(wanted))
    for group, offsets in wanted.items():
        description = described.get(group)
        if (description.state if description is not None else "") not in INACTIVE_STATES:
            carried.active.append(group)  # consumers are live at the target: their offsets are theirs
            continue
        existing = await fetch_offsets(target, group, list(offsets))
        values = {tp: CommittedOffset(min(c.offset, ends[tp]), metadata=c.metadata)
                  for tp, c in offsets.items()}
        updates: dict[TopicPartition, int | CommittedOffset] = {
            tp: value for tp, value in values.items()
            if (have := existing.get(tp)) is None or (have.offset, have.metadata) != (value.offset, value.metadata)}
        if updates:
            try:
                await commit_offsets(target, group, updates)
            except KafkaError as exc:
                if exc.code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.REBALANCE_IN_PROGRESS,
                                ErrorCode.ILLEGAL_GENERATION):
                    carried.active.append(group)  # a consumer joined meanwhile: leave the group to it
                    continue
                raise
            carried.committed += len(updates)
            log.info("group %s: offsets carried over for %d partitions", group, len(updates))
        carried.offsets[group] = {tp: value.offset for tp, value in values.items()}
    return carried
