"""Failback of a link-mode mirror: the old primary becomes a mirror of the new one (Confluent's
cluster linking has the two commands: truncate-and-restore, reverse-and-start).

After a promotion the new primary (the mirror's former target) holds, per partition, a copy of
the old primary's log up to where the copy stopped, then its own writes (behind the promotion
marker, broker/storage/link_copy.py). The copy is the old primary's batches byte for byte, so
where the two logs diverge is found as a follower finds it with OffsetForLeaderEpoch, but by
batch rather than by epoch (the copy's batches carry the new primary's leader epochs, not the
source's; their offsets and CRC are the source's): the last batch both logs hold identically
(a binary search over offsets, one small fetch at each cluster per step; a promotion marker,
which a copy leaves out, is skipped on both sides). Everything the old primary holds past that
batch was acknowledged there and never copied: the failover's RPO.

- **truncate-and-restore** (after a failover): every selected partition is checked at its
  leader first (LinkTruncate with ValidateOnly: the shared batch must be there as the new
  primary holds it, else the cluster was never the source of that copy, or its log was replaced),
  and nothing is cut anywhere when one is refused. Then each topic becomes the mirror topic of
  the reverse mirror (``causeway.mirror.name``: producers are refused), each leader cuts the
  diverged tail into its partition's quarantine directory (named in the report, with offsets and
  counts: kept, never discarded) and waits for its replicas to cut theirs
  (broker/server/handlers/link_truncate.py). A link-mode mirror of that name from the new
  primary to the old one then copies what the new primary holds past the cut.
- **reverse-and-start** (after a planned promote): the same, but nothing may be cut: a partition
  whose log holds anything past the new primary's copy is refused (use truncate-and-restore).

Idempotent: a rerun (after a crash of the command, a broker or the mirror) finds the same
divergence point or a later one (the reverse mirror copied past it), cuts nothing more, and
reports where each partition stands.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from broker.client import KafkaError, TopicPartition, supports_link_append
from broker.client.admin import EARLIEST, LATEST, describe_configs, list_offsets, list_topics
from broker.client.cluster import Client, open_client
from broker.client.fetch import fetch
from broker.client.link_truncate import CutPoint, LinkTruncateResult, link_truncate
from broker.protocol.constants import MIRROR_NAME_CONFIG
from broker.protocol.errors import ErrorCode
from broker.protocol.records import BATCH_HEADER_SIZE, BatchHeader, read_batch_header
from security.client import ClientSecurity

__all__ = ["FailbackError", "FailbackReport", "PartitionFailback", "failback", "find_divergence"]

Say = Callable[[str], None]
#: Enough for a batch header; a broker returns the first batch whole anyway (KIP-74).
_PROBE_BYTES = 1024


class FailbackError(Exception):
    """Nothing can be failed back as asked (no topic selected, a cluster not answering)."""


@dataclass
class PartitionFailback:
    topic: str
    partition: int
    cut_at: int  # the divergence point: the old primary's log ends here afterwards
    result: LinkTruncateResult | None = None

    @property
    def ok(self) -> bool:
        return self.result is not None and self.result.error == ErrorCode.NONE


@dataclass
class FailbackReport:
    old_primary: str
    new_primary: str
    reverse_mirror: str
    truncate: bool
    topics: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # topic -> why it is not failed back
    partitions: list[PartitionFailback] = field(default_factory=list)
    refused: bool = False  # the validation refused a partition: nothing was changed anywhere

    @property
    def ok(self) -> bool:
        return bool(self.partitions) and not self.refused and all(p.ok for p in self.partitions)

    @property
    def cut_records(self) -> int:
        return sum(p.result.records for p in self.partitions if p.result is not None)


def _quiet(_line: str) -> None:
    pass


def _same(a: BatchHeader | None, b: BatchHeader | None) -> bool:
    return a is not None and b is not None and (a.base_offset, a.last_offset, a.crc) == (
        b.base_offset, b.last_offset, b.crc)


def _is_marker(header: BatchHeader) -> bool:
    # A control batch with no producer: a promotion marker (transaction markers have producers).
    return header.is_control and not header.has_producer_id


async def _batch_at(client: Client, tp: TopicPartition, offset: int, end: int) -> BatchHeader | None:
    """The first batch at or after `offset` that holds a record at or past it, below `end`,
    promotion markers skipped; None when there is none."""
    while offset < end:
        answer = (await fetch(client, {tp: offset}, max_wait_ms=0, partition_max_bytes=_PROBE_BYTES))[tp]
        if answer.error != ErrorCode.NONE:
            raise KafkaError(ErrorCode(answer.error), f"{tp.topic}-{tp.partition}: fetch at offset {offset}: "
                                                      f"{answer.error_message or ErrorCode(answer.error).name}")
        data = answer.records
        if len(data) < BATCH_HEADER_SIZE:
            return None
        header = read_batch_header(data, 0)
        if header.base_offset >= end:
            return None
        if not _is_marker(header):
            return header
        offset = header.last_offset + 1
    return None


async def find_divergence(old: Client, new: Client, tp: TopicPartition) -> CutPoint:
    """Where the old primary's log of `tp` diverges from the new primary's (see the module): the
    offset past the last batch both hold identically, and that batch. No shared batch: the
    offset where the comparison began, with none (the old primary refuses it if it holds
    anything there)."""
    wanted = {tp: EARLIEST}
    old_start = (await list_offsets(old, wanted))[tp].offset
    new_start = (await list_offsets(new, wanted))[tp].offset
    old_end = (await list_offsets(old, {tp: LATEST}))[tp].offset
    new_end = (await list_offsets(new, {tp: LATEST}))[tp].offset
    lo, hi = max(old_start, new_start), min(old_end, new_end)
    if lo >= hi:
        return CutPoint(min(lo, old_end))

    async def shared(offset: int) -> BatchHeader | None:
        a = await _batch_at(old, tp, offset, hi)
        b = await _batch_at(new, tp, offset, hi)
        return a if _same(a, b) else None

    best = await shared(lo)
    if best is None:
        return CutPoint(lo)
    # Invariant: the batch holding `best.last_offset` is shared; the first batch at or past `bad`
    # is not (or there is none below hi).
    good, bad = best.last_offset + 1, hi
    while good < bad:
        mid = (good + bad) // 2
        found = await shared(mid)
        if found is None:
            bad = mid
        else:
            best, good = found, found.last_offset + 1
    return CutPoint(best.last_offset + 1, best.base_offset, best.last_offset, best.crc)


def _matches(name: str, patterns: Sequence[str] | None) -> bool:
    return patterns is None or any(re.fullmatch(p, name) for p in patterns)


async def _owner(client: Client, topic: str) -> str | None:
    entry = (await describe_configs(client, topic, keys=[MIRROR_NAME_CONFIG])).get(MIRROR_NAME_CONFIG)
    return entry.value if entry is not None and entry.value else None


async def _select(old: Client, new: Client, report: FailbackReport, patterns: Sequence[str] | None
                  ) -> dict[str, int]:
    """The topics both clusters have, matching `patterns`, normal topics at the new primary and
    not another mirror's at the old one, with their partition counts."""
    old_topics, new_topics = await list_topics(old), await list_topics(new)
    selected: dict[str, int] = {}
    for name in sorted(new_topics):
        if not _matches(name, patterns):
            continue
        if name not in old_topics:
            report.skipped[name] = "not at the old primary (the reverse mirror creates it)"
            continue
        if (owner := await _owner(new, name)) is not None:
            report.skipped[name] = f"still the mirror topic of mirror {owner} at the new primary: promote it first"
            continue
        if (owner := await _owner(old, name)) not in (None, report.reverse_mirror):
            report.skipped[name] = f"the mirror topic of mirror {owner} at the old primary"
            continue
        if old_topics[name] != new_topics[name]:
            report.skipped[name] = (f"{old_topics[name]} partition(s) at the old primary, {new_topics[name]} at the "
                                    f"new one")
            continue
        selected[name] = new_topics[name]
    return selected


async def failback(old_bootstrap: str, new_bootstrap: str, *, reverse_mirror: str, truncate: bool,
                   topics: Sequence[str] | None = None, timeout_s: float = 60.0, say: Say = _quiet,
                   old_security: ClientSecurity | None = None,
                   new_security: ClientSecurity | None = None) -> FailbackReport:
    """truncate-and-restore (`truncate`) or reverse-and-start at `old_bootstrap`, whose topics
    (those matching a regex of `topics`, whole name; None: every topic both clusters have) become
    mirror topics of `reverse_mirror`, a link-mode mirror from `new_bootstrap`. See the module.
    Raises FailbackError when nothing is selected, ClientError / KafkaError when a cluster
    cannot be read."""
    report = FailbackReport(old_bootstrap, new_bootstrap, reverse_mirror, truncate)
    command = "truncate-and-restore" if truncate else "reverse-and-start"
    timeout_ms = int(max(1.0, timeout_s) * 1000)
    async with open_client(old_bootstrap, client_id=f"causeway-{command}", security=old_security) as old, \
            open_client(new_bootstrap, client_id=f"causeway-{command}", security=new_security) as new:
        if not await supports_link_append(old):
            raise FailbackError(not_causeway(old_bootstrap, command))
        counts = await _select(old, new, report, topics)
        for name, why in sorted(report.skipped.items()):
            say(f"skipped {name}: {why}")
        if not counts:
            raise FailbackError(f"no topic to fail back: none of the new primary's topics{_which(topics)} is a "
                                f"promoted topic the old primary also has")
        report.topics = sorted(counts)
        say(f"{command}: {len(counts)} topic(s) at {old_bootstrap} become mirror topics of mirror {reverse_mirror} "
            f"(from {new_bootstrap}): {', '.join(report.topics)}")
        points: dict[TopicPartition, CutPoint] = {}
        for name, count in sorted(counts.items()):
            for index in range(count):
                tp = TopicPartition(name, index)
                points[tp] = await find_divergence(old, new, tp)
                report.partitions.append(PartitionFailback(name, index, points[tp].offset))
        checked = await link_truncate(old, reverse_mirror, points, allow_truncation=truncate, validate_only=True,
                                      timeout_ms=timeout_ms)
        if any(r.error != ErrorCode.NONE for r in checked.values()):
            report.refused = True
            for p in report.partitions:
                p.result = checked[TopicPartition(p.topic, p.partition)]
            return report
        done = await link_truncate(old, reverse_mirror, points, allow_truncation=truncate, timeout_ms=timeout_ms)
        for p in report.partitions:
            p.result = done[TopicPartition(p.topic, p.partition)]
            _say_partition(say, p)
    return report


def not_causeway(old_bootstrap: str, command: str) -> str:
    """Why `command` cannot run against an old primary that is not Causeway (Apache Kafka, say),
    and what can be done instead (docs/operations/mirror.md, "Mirroring from Apache Kafka")."""
    return (f"{command} needs a Causeway old primary, and {old_bootstrap} is not one: it does not serve "
            f"LinkAppend/LinkTruncate (Causeway's API keys 10000 and 10001; Apache Kafka has neither), so its "
            f"topics cannot be cut at the divergence point nor become mirror topics with their offsets kept. "
            f"Nothing was changed. What is possible: keep the new primary as it is and mirror back with "
            f"mode: mm2 (offsets translated, groups through checkpoints); or, to reuse the old primary's "
            f"topics, save their tail past the new primary's copy (the failover's RPO) with a consumer, delete "
            f"and create them again there and mirror back with mode: mm2")


def _which(topics: Sequence[str] | None) -> str:
    return "" if topics is None else f" matching {' or '.join(repr(t) for t in topics)}"


def _say_partition(say: Say, p: PartitionFailback) -> None:
    r = p.result
    assert r is not None
    where = f"{p.topic}-{p.partition}"
    if r.records:  # also when the wait for the replicas failed: the leader's cut is done
        say(f"  {where}: cut at offset {p.cut_at}: {r.records} record(s) in {r.batches} batch(es), offsets "
            f"{r.first_offset}..{r.last_offset}, kept in {r.quarantine}")
    if r.error != ErrorCode.NONE:
        say(f"  {where}: {r.error.name}: {r.error_message}")
    elif not r.records:
        say(f"  {where}: nothing to cut (the log ends at {r.log_end_offset}; the divergence point is {p.cut_at})")

