"""Copying again what the target lost under the mirror.

A remote partition can lose records the mirror wrote there: the remote topic deleted at the target
(and re-created, by the mirror's discovery or anyone), a target broker truncating its log. Carrying
on from the mirror's own position would leave that hole at the target for good, with a status that
says "lag 0". So the mirror watches for it three ways:

- a discovery round finds the remote topic missing (`remote_topic_missing`): before it is created
  again, its partitions are held, so no write lands in the new topic ahead of the re-copy;
- a discovery round finds a remote partition's log end below what the mirror knows it wrote
  there (`check_target_ends`; after a restart, "what it wrote" comes from the offset syncs);
- a write lands below that log end (mirror/partition.py calls `target_went_back`).

Then the partition copies again from the source: from the upstream offset of the newest offset sync
at or below the target's new log end (what follows it may be repeated, nothing is skipped), or from
the source's log start when the target is empty. What the source no longer has (retention,
DeleteRecords) is reported as lost, by topic, partition and offsets, in the log and the status;
the partition's record count drops by what the target lost.
"""

from __future__ import annotations

import logging

from broker.client import admin
from broker.client.admin import EARLIEST, LATEST
from broker.protocol.errors import ErrorCode, KafkaError
from mirror.offset_sync import SyncStore
from mirror.partition import PartitionMirror
from mirror.runtime import Mirror

__all__ = ["check_target_ends", "remote_topic_missing", "target_went_back"]

log = logging.getLogger(__name__)


def target_went_back(mirror: Mirror, syncs: SyncStore, pm: PartitionMirror, target_end: int, why: str) -> None:
    """The remote partition now ends at `target_end`, below what the mirror wrote there: hold the
    partition at once (nothing more is fetched or written) and re-copy it from where `syncs` (the
    mm2 mirror's offset syncs) say the target's new end came from."""
    if pm.held or pm.stopped or mirror.nursery is None:
        return
    pm.hold()
    log.error("%s-%d: %s", pm.source.topic, pm.source.partition, why)
    mirror.nursery.start_soon(_copy_again, mirror, syncs, pm, target_end, why)


def remote_topic_missing(mirror: Mirror, syncs: SyncStore, topic: str, remote: str) -> None:
    """The target no longer has `remote` while its partitions are mirrored: called before the
    remote topic is created again."""
    for pm in [pm for tp, pm in mirror.partitions.items() if tp.topic == topic]:
        target_went_back(mirror, syncs, pm, 0, f"the remote topic {remote} is gone from the target "
                                               f"{mirror.target_alias} (deleted); it is created again and the "
                                               f"partition copied again")


async def check_target_ends(mirror: Mirror, syncs: SyncStore) -> None:
    """One ListOffsets for every remote partition the mirror has written to: a log end below what
    it wrote means the target lost records."""
    watched = {pm.target: (pm, pm.min_target_end, pm.epoch) for pm in mirror.partitions.values()
               if pm.min_target_end > 0 and not pm.held and not pm.stopped}
    if not watched:
        return
    try:
        ends = await admin.list_offsets(mirror.target, {tp: LATEST for tp in watched})
    except KafkaError as exc:
        if exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            return  # deleted meanwhile: the next round's topic listing sees it missing
        raise
    for tp, (pm, expected, epoch) in watched.items():
        end = ends[tp].offset
        if 0 <= end < expected and pm.epoch == epoch:  # a rewind meanwhile: look again next round
            target_went_back(mirror, syncs, pm, end, f"the remote partition {tp.topic}-{tp.partition} ends at offset "
                                              f"{end}, below the {expected} the mirror wrote there (deleted and "
                                              f"re-created, or truncated at the target)")


async def _copy_again(mirror: Mirror, syncs: SyncStore, pm: PartitionMirror, target_end: int, why: str) -> None:
    tp = pm.source
    name = f"{tp.topic}-{tp.partition}"
    found: dict[str, int] = {}

    async def source_range() -> None:
        found["start"] = (await admin.list_offsets(mirror.source, {tp: EARLIEST}))[tp].offset
        found["end"] = (await admin.list_offsets(mirror.source, {tp: LATEST}))[tp].offset

    await mirror.retrying(f"re-copy {name}", source_range)
    if pm.stopped:
        return
    start, end = found["start"], found["end"]
    synced = syncs.upstream_at_or_below(tp.topic, tp.partition, target_end) if target_end > 0 else None
    position = max(start, synced) if synced is not None else start
    lowest = synced if synced is not None else pm.copied_from
    lost = None
    if lowest is not None and lowest < start:
        lost = (f"{name}: source offsets {lowest}..{start - 1} are gone at the target and no longer at the "
                f"source (retention or DeleteRecords): they cannot be copied again")
    elif lowest is None and start > 0:
        lost = (f"{name}: whatever the target had of source offsets below {start} is gone at the target and "
                f"no longer at the source (retention or DeleteRecords): it cannot be copied again")
    lost_downstream = max(0, pm.min_target_end - target_end)
    doing = f"{why}; copying source offsets {position}..{max(position, end) - 1} again"
    pm.copy_again(position, log_start=start, target_end=target_end, lost_downstream=lost_downstream,
                  why=doing, until=end)
    pm.note_gap(f"{name}: {doing}")
    mirror.event(f"{name}: {doing}")
    log.error("%s: %s", name, doing)
    if lost is not None:
        pm.lost = lost
        pm.note_gap(lost)
        mirror.event(lost)
        log.error("%s", lost)
