"""Consumer-group offsets in link mode: carried over unchanged.

A mirror topic has the source's offsets, so a group's committed offset at the source means the
same record at the target: no offset syncs, no translation, no checkpoints topic. Each source
group that matches the group patterns has its committed offsets on the mirror topics being
copied committed to the same group at the target, with their metadata, each clamped to the
target partition's high watermark (a consumer that fails over never skips records not copied
yet), and only while that group has no active members at the target (committing under a live
consumer would move it). A promoted topic is no longer copied, so its offsets at the target are
its consumers' own from then on: the mirror commits with LinkOffsetCommit as its link
(broker/server/handlers/link_offset_commit.py), which the target refuses on a topic that is no
longer its mirror topic, so a pass that read the source before a promotion and commits after it
(or a mirror process slow, cut off or stale) cannot move a moved group; the refused topic is
handed back to the mirror, which reads its config and stops it. `commit_carried` with a plain
OffsetCommit is what `causeway mirror promote` runs one last time once the promotion is applied
(mirror/promote.py), so a group moved after a switch-over re-reads nothing.

A failover cannot ask a dead source for that last copy: a moved group resumes from the mirror's
last one, and re-reads what it committed at the source since. So link mode copies often
(`sync.group.offsets.interval.seconds`, mirror/config.py's LINK_SYNC_GROUP_OFFSETS_S by default, where MM2 checks
every 60 s and Cluster Linking's consumer.offset.sync.ms every 30 s), and a pass is cheap: it
lists the source's groups (one ListGroups per broker, at once) and asks for their offsets
(FETCH_AT_ONCE groups at a time), and touches the target only for a group whose offsets changed
since it last carried them (`CarriedGroups`; every `refresh.groups.interval.seconds` each group
is checked against the target afresh).

The source's leader epoch is not carried: the target's epochs are its own, and a consumer
checking an epoch from another cluster (OffsetForLeaderEpoch) would see a truncation that
never happened.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Iterable, Mapping, Set
from dataclasses import dataclass, field
from functools import partial

import trio

from broker.client import Client, ClientError, KafkaError, TopicPartition, admin
from broker.client.admin import LATEST
from broker.client.groups import (
    CommittedOffset,
    commit_offsets,
    describe_groups,
    fetch_offsets,
    link_commit_offsets,
    list_groups,
)
from broker.protocol.errors import ErrorCode
from broker.tasks import gather
from mirror.config import INTERNAL_GROUPS
from mirror.groups import INACTIVE_STATES
from mirror.runtime import Mirror

__all__ = ["CarriedGroups", "CarriedOffsets", "carry_group_offsets", "carry_offsets",
           "commit_carried", "matching_groups", "source_offsets"]

log = logging.getLogger(__name__)

#: How many groups' offsets a pass asks the source for at once.
FETCH_AT_ONCE = 32


@dataclass
class CarriedOffsets:
    """One pass: per group, the offsets the target holds now (those committed by this pass and
    those already equal); the groups left alone because consumers are live at the target."""

    offsets: dict[str, dict[TopicPartition, int]] = field(default_factory=dict)
    active: list[str] = field(default_factory=list)
    committed: int = 0  # partitions whose offset this pass changed
    clamped: set[str] = field(default_factory=set)  # groups held below the source's offsets (the copy's end)
    #: Partitions the target refused as not (any more) the mirror's (promoted), with its reason.
    refused: dict[TopicPartition, str] = field(default_factory=dict)


#: What a source group last had carried (or found equal) at the target, per partition.
Carried = dict[TopicPartition, CommittedOffset]


@dataclass
class CarriedGroups:
    """The mirror's memory between passes: what each group had carried. Forgotten every
    `refresh.groups.interval.seconds`, so a full pass (every group checked against the target,
    whatever was done there meanwhile) runs that often."""

    checked_at: float = -math.inf
    carried: dict[str, Carried] = field(default_factory=dict)


async def carry_group_offsets(mirror: Mirror, memory: CarriedGroups, link_name: str,
                              on_refused: Callable[[str], Awaitable[None]]) -> int:
    """One pass over the source's groups; returns how many partitions' offsets were committed
    at the target. Committed as mirror `link_name` (LinkOffsetCommit), so the target refuses
    the partitions of a topic promoted meanwhile, whatever this pass read before; each such
    topic is handed to `on_refused` (the mirror reads whose it is now and stops it). Raises
    KafkaError / ClientError (the caller retries)."""
    copied = _copied(mirror)
    if not copied:
        return 0
    now = trio.current_time()
    if now - memory.checked_at >= mirror.config.refresh_groups_s:
        memory.checked_at, memory.carried = now, {}
    groups = await matching_groups(mirror.source, lambda g: mirror.config.groups.matches(g, INTERNAL_GROUPS))
    wanted = await source_offsets(mirror.source, groups, copied)
    # The source was read across a WAN: a topic stopped meanwhile (promoted, paused) is left out.
    # The target's refusal is the fence; this only spares it the requests.
    copied = _copied(mirror)
    wanted = {group: mine for group, offsets in wanted.items()
              if (mine := {tp: c for tp, c in offsets.items() if tp in copied})}
    changed = {group: offsets for group, offsets in wanted.items() if memory.carried.get(group) != offsets}
    carried = await commit_carried(mirror.target, changed, link_name=link_name)
    for topic in sorted({tp.topic for tp in carried.refused}):
        await on_refused(topic)
    for group in carried.offsets:
        # A clamped one is carried again as the copy advances; one refused somewhere, once the
        # mirror knows whose that topic is.
        if group not in carried.clamped and not carried.refused.keys() & changed[group].keys():
            memory.carried[group] = changed[group]
    for group in carried.active:
        memory.carried.pop(group, None)  # its consumers may leave: checked again next pass
    mirror.group_checkpoints += carried.committed
    return carried.committed


def _copied(mirror: Mirror) -> set[TopicPartition]:
    return {tp for tp in mirror.partitions if tp.topic in mirror.topics}


async def matching_groups(source: Client, matches: Callable[[str], bool]) -> list[str]:
    """The source's consumer groups that `matches` selects, sorted."""
    return sorted(g.group_id for g in await list_groups(source)
                  if g.protocol_type in ("consumer", "") and matches(g.group_id))


async def source_offsets(source: Client, groups: Iterable[str],
                         copied: Set[TopicPartition]) -> dict[str, Carried]:
    """Each group's committed offsets at the source on `copied` (groups with none left out),
    FETCH_AT_ONCE groups at a time: over a long link a pass takes a round trip per slice, not
    per group."""
    names = list(groups)
    wanted: dict[str, Carried] = {}
    for start in range(0, len(names), FETCH_AT_ONCE):
        chunk = names[start:start + FETCH_AT_ONCE]
        fetched = await gather([partial(fetch_offsets, source, group) for group in chunk],
                               collect=(KafkaError, ClientError))
        for group, offsets in zip(chunk, fetched, strict=True):
            picked = {tp: c for tp, c in offsets.items() if tp in copied and c.offset >= 0}
            if picked:
                wanted[group] = picked
    return wanted


async def carry_offsets(source: Client, target: Client, copied: Set[TopicPartition],
                        matches: Callable[[str], bool], *,
                        ceilings: Mapping[TopicPartition, int] | None = None, rewrite: bool = False) -> CarriedOffsets:
    """Commit at `target` each matching source group's committed offsets on `copied`, clamped
    to the target's high watermark (or to `ceilings`, the copy's ends when the caller read them
    before the target's own writes began), for groups with no live members at the target, by a
    plain OffsetCommit (`commit_carried`'s `rewrite` as given). Raises KafkaError / ClientError
    when either cluster fails to answer."""
    if not copied:
        return CarriedOffsets()
    wanted = await source_offsets(source, await matching_groups(source, matches), copied)
    return await commit_carried(target, wanted, ceilings=ceilings, rewrite=rewrite)


async def commit_carried(target: Client, wanted: Mapping[str, Carried], *,
                         ceilings: Mapping[TopicPartition, int] | None = None, link_name: str | None = None,
                         rewrite: bool = False) -> CarriedOffsets:
    """Commit `wanted` (per group, the source's offsets) at `target`, each clamped as
    `carry_offsets` says, for the groups with no live members there: as mirror `link_name`
    (LinkOffsetCommit: the target refuses a partition whose topic is not, or no longer, that
    mirror's; `refused` names them) or, None, a plain OffsetCommit (the promotion's own last
    copy). An offset the target holds already is not committed again, unless `rewrite`: then
    the commit is the latest record of every partition, whatever was written before it."""
    carried = CarriedOffsets()
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
        if any(value.offset < offsets[tp].offset for tp, value in values.items()):
            carried.clamped.add(group)
        updates: dict[TopicPartition, int | CommittedOffset] = {
            tp: value for tp, value in values.items()
            if rewrite or (have := existing.get(tp)) is None
            or (have.offset, have.metadata) != (value.offset, value.metadata)}
        refused: dict[TopicPartition, str] = {}
        if updates:
            try:
                if link_name is None:
                    await commit_offsets(target, group, updates)
                else:
                    refused = await link_commit_offsets(target, link_name, group, updates)
            except KafkaError as exc:
                if exc.code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.REBALANCE_IN_PROGRESS,
                                ErrorCode.ILLEGAL_GENERATION):
                    carried.active.append(group)  # a consumer joined meanwhile: leave the group to it
                    continue
                raise
            carried.refused.update(refused)
            carried.committed += len(updates) - len(refused)
            if len(updates) > len(refused):
                log.info("group %s: offsets carried over for %d partitions", group, len(updates) - len(refused))
        for tp, why in refused.items():
            log.warning("group %s: offset of %s-%d not carried: %s", group, tp.topic, tp.partition, why)
        carried.offsets[group] = {tp: value.offset for tp, value in values.items() if tp not in refused}
    return carried
