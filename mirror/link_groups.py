"""Consumer-group offsets in link mode: carried over unchanged.

A mirror topic has the source's offsets, so a group's committed offset at the source means the
same record at the target: no offset syncs, no translation, no checkpoints topic. Every
`sync.group.offsets.interval.seconds` each source group that matches the group patterns has its
committed offsets on the mirror topics being copied committed to the same group at the target,
with their metadata, each clamped to the target partition's high watermark (a consumer that
fails over never skips records not copied yet), and only while that group has no active members
at the target (committing under a live consumer would move it). A promoted topic is no longer
copied, so its offsets at the target are its consumers' own from then on.

The source's leader epoch is not carried: the target's epochs are its own, and a consumer
checking an epoch from another cluster (OffsetForLeaderEpoch) would see a truncation that
never happened.
"""

from __future__ import annotations

import logging

from broker.client import KafkaError, TopicPartition, admin
from broker.client.admin import LATEST
from broker.client.groups import CommittedOffset, commit_offsets, describe_groups, fetch_offsets, list_groups
from broker.protocol.errors import ErrorCode
from mirror.config import INTERNAL_GROUPS
from mirror.groups import INACTIVE_STATES
from mirror.runtime import Mirror

__all__ = ["carry_group_offsets"]

log = logging.getLogger(__name__)


async def carry_group_offsets(mirror: Mirror) -> int:
    """One pass over the source's groups; returns how many partitions' offsets were committed
    at the target. Raises KafkaError / ClientError (the caller retries)."""
    copied = {tp for tp in mirror.partitions if tp.topic in mirror.topics}
    if not copied:
        return 0
    groups = [g.group_id for g in await list_groups(mirror.source)
              if g.protocol_type in ("consumer", "") and mirror.config.groups.matches(g.group_id, INTERNAL_GROUPS)]
    wanted: dict[str, dict[TopicPartition, CommittedOffset]] = {}
    for group in sorted(groups):
        offsets = await fetch_offsets(mirror.source, group)
        picked = {tp: c for tp, c in offsets.items() if tp in copied and c.offset >= 0}
        if picked:
            wanted[group] = picked
    if not wanted:
        return 0
    partitions = {tp for offsets in wanted.values() for tp in offsets}
    ends = await admin.list_offsets(mirror.target, {tp: LATEST for tp in partitions})
    described = await describe_groups(mirror.target, list(wanted))
    committed = 0
    for group, offsets in wanted.items():
        description = described.get(group)
        if (description.state if description is not None else "") not in INACTIVE_STATES:
            continue  # consumers are live at the target: their offsets are theirs
        existing = await fetch_offsets(mirror.target, group, list(offsets))
        updates: dict[TopicPartition, int | CommittedOffset] = {}
        for tp, source in offsets.items():
            value = CommittedOffset(min(source.offset, ends[tp].offset), metadata=source.metadata)
            have = existing.get(tp)
            if have is None or (have.offset, have.metadata) != (value.offset, value.metadata):
                updates[tp] = value
        if not updates:
            continue
        try:
            await commit_offsets(mirror.target, group, updates)
        except KafkaError as exc:
            if exc.code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.REBALANCE_IN_PROGRESS,
                            ErrorCode.ILLEGAL_GENERATION):
                continue  # a consumer joined meanwhile: leave the group to it
            raise
        committed += len(updates)
        log.info("group %s at %s: offsets carried over for %d partitions", group, mirror.target_alias, len(updates))
    mirror.group_checkpoints += committed
    return committed
