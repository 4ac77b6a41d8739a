"""Link mode: the mirror writes read-only *mirror topics* on a Causeway target, with the source's
offsets, through LinkAppend (broker/client/link.py).

A mirror topic has its source topic's name, partition count and synced configs, plus
`causeway.mirror.name` set to this mirror's name (the broker then refuses producers and every
other mirror on it). The fetch lanes, topic sync, topic ACL sync (for the mirror topics it
writes), heartbeats and status are the runtime's both modes share (mirror/runtime.py); what is
link mode's own is here:

- start: the target must serve LinkAppend (a Causeway broker), else the mirror stops with an
  error saying so (`MirrorRefused`);
- resume: each partition starts at the target's high watermark (ListOffsets latest), or at the
  source's log start when the target has never held a record there. No positions topic, no
  offset syncs: offsets are equal at both ends, so the target's log end *is* the position. The
  first write repeats the source's batch holding the copy's last offset, which the target takes
  only if it holds that very batch: a copy someone else wrote to while the mirror was away is
  found at once (FAILED) rather than copied on from;
- write: the fetched batches go to the mirror topic as they are, several per request (no
  producer re-stamp, control batches included, no trimming; only their CRC is checked, which is
  per batch and in C). The target skips what it already has (a restart, a resent request), once
  it sees it holds those very batches. Each request says where the source's batch before its
  first one ended (`previous_end`: what this mirror fetched and wrote before, or the offset the
  source was read from, or the source's log start after a gap there), so the target takes a gap
  only where the source has one;
- failed: the copy is not the source's (the target refuses the batches as skipping ahead of its
  end or differing from what it holds, OFFSET_OUT_OF_RANGE, or its log end is past the source's
  high watermark: someone else wrote there). Copying on would drop records silently, so the
  partition stops, FAILED, in the log, the events and the status (its `error`, and `problems`
  under "FAILED <topic>-<partition>", so `causeway status` says the mirror is unhealthy and exits
  2; its lag keeps counting the source's new records); a restart looks again, and a mirror topic
  deleted at the target is copied again whole;
- refusals: INVALID_REQUEST means the topic is no longer this mirror's (promoted by deleting
  `causeway.mirror.name`, or someone else's): the topic's config is read again and, promoted,
  the topic is stopped (logged once, `not_mirrored` in the status says so) and never created
  again; a failback that makes it this mirror's mirror topic again (reverse-and-start) has it
  copied again from the target's log end, found at a discovery round. A batch the
  target refuses as invalid (its LogValidator's verdicts) parks the partition, as poison does in
  mm2; OFFSET_OUT_OF_RANGE (a batch that straddles the copy's end: the source diverged, or the
  copy is not where the source's batches follow) fails it, as above;
- a topic of that name at the target that is not this mirror's mirror topic is never written:
  it is reported (status `not_mirrored` and `problems`) and looked at again every round;
- log start: each LinkAppend carries the source partition's log start offset (as its last fetch
  response said; never past what the request or the copy holds, which the target refuses), and
  an idle partition sends it alone when it moved: the copy's log start follows the source's
  (DeleteRecords, retention), so a consumer from `earliest` at the target reads what one at the
  source reads;
- pause: a mirror topic whose `causeway.mirror.state` is PAUSED at the target (`causeway mirror
  pause`) is not copied: the target refuses LinkAppend to it, and the mirror stops its
  partitions when refused or at its next discovery round, whichever comes first. It keeps
  reading both ends of a paused topic for its lag. Resumed (the key deleted), the topic's
  partitions start again as at a restart: at the target's high watermark, its last batch checked,
  so nothing is lost or copied twice. The state lives in the topic's config, so a restarted
  mirror or broker sees a paused topic as paused;
- leader epochs (KIP-1279's invariant): each mirror topic partition's leader epoch is kept at or
  above the source partition's (LinkLeaderEpoch to the target's controller): raised to a source
  epoch before its first batch is copied (batches go in runs of one epoch), and each discovery
  round to the source metadata's epoch once the copy has caught up (an idle partition's leader
  change), so the target's epochs begin where the source's did and a client holding the
  source's epoch takes the target's metadata and validates its position there;
- consumer groups: mirror/link_groups.py commits the source's offsets at the target unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial

import trio

from broker.client import (
    MIRROR_NAME_CONFIG,
    Backoff,
    Client,
    ClientError,
    KafkaError,
    TopicPartition,
    admin,
    link_append,
    supports_link_append,
)
from broker.client.admin import EARLIEST, LATEST
from broker.client.link import LINK_APPEND_VERSION, link_leader_epochs, wait_leader_epoch
from broker.clock import now_ms
from broker.protocol.constants import MIRROR_PAUSED, MIRROR_PROMOTING, MIRROR_STATE_CONFIG
from broker.protocol.errors import ErrorCode
from broker.protocol.records import BatchHeader, TimestampType, batch_crc_ok
from mirror.config import INTERNAL_TOPICS
from mirror.errors import MirrorRefused
from mirror.link_groups import CarriedGroups, carry_group_offsets
from mirror.naming import HEARTBEATS_TOPIC
from mirror.partition import REFUSED_AS_INVALID, Chunk, PartitionMirror
from mirror.runtime import CLUSTER_WAIT_ATTEMPT_S, RETRY, Mirror, stop_topic, stop_vanished, sync_topic
from mirror.status import TopicState
from mirror.topics import COMPACTED, ensure_topic
from mirror.write_retry import PARK_BACKOFF, Failed, Handled, write_with_retries

__all__ = ["LINK_REQUEST_MAX_BYTES", "LinkMirror", "LinkPartition", "pieces_of_one_epoch"]

log = logging.getLogger(__name__)

#: Batches per LinkAppend request, by size: a fetched chunk (up to max.partition.fetch.bytes)
#: goes in requests of at most this much, so one request's wait for the target's replicas
#: covers many batches, while the target's work per request stays short (its event loop serves
#: the consumers too). 1 MiB copied as fast as 4 MiB here, and as mm2 mode's batch per request.
LINK_REQUEST_MAX_BYTES = 1 * 1024 * 1024
# What a target refuses for the batches themselves: several batches are then sent one by one,
# so those before a bad one are copied and the partition parks at the bad one.
_REFUSED_BATCHES = REFUSED_AS_INVALID | {ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE}
#: How often an idle partition's writer looks whether the source's log start moved (its fetches
#: keep reporting it) and, if so, sends it alone. An in-memory check; a request only on a change.
LOG_START_CHECK_S = 1.0
#: How long the writer waits for the target's leader to take an epoch it raised before copying
#: the batches of that epoch (a ZooKeeper-mode controller's LeaderAndIsr; at once standalone).
LEADER_EPOCH_WAIT_S = 5.0

Span = tuple[int, BatchHeader]


async def _no_refusal_handler(pm: LinkPartition) -> None:
    return None


class _Outcome:
    DONE = "done"  # written (or already there)
    SPLIT = "split"  # refused as a whole: send the batches one by one
    STOPPED = "stopped"  # stopped, rewound or parked meanwhile: the chunk is not done


@dataclass
class LinkPartition(PartitionMirror):
    """One partition of a link-mode mirror: fetched batches go to the mirror topic of the same
    name and partition, as they are, with their offsets."""

    link_name: str = ""
    # Called when the target refuses the topic as not this mirror's (INVALID_REQUEST): it reads
    # the topic's config again and stops the topic when it was promoted or is someone else's.
    on_refused: Callable[[LinkPartition], Awaitable[None]] = _no_refusal_handler
    target_start: int = -1  # the copy's log start offset, as the target last answered; -1: unknown
    # The highest source high watermark of a fetch whose batches were queued: nothing the target
    # holds of this mirror's lies past it, so a target log end past it is someone else's.
    source_end_seen: int = -1
    # The source offset of a promotion marker the target left out at the end of the last write
    # (broker/storage/link_copy.py): the copy ends one below what was written, and the next write
    # follows it from there. -1: none.
    left_out_at: int = -1
    # At a resume, the copy's last offset: the source's batch holding it is sent again (not
    # counted as copied) so that the target checks it holds that very batch. -1: done.
    verify_at: int = -1
    on_failed: Callable[[LinkPartition], None] = lambda pm: None  # the mirror's status and events
    # KIP-1279's invariant: the mirror topic partition's leader epoch is kept at or above the
    # source partition's, so a client that saw the source's epoch takes the target's metadata.
    # Raised to each copied batch's epoch before it is copied (so the target's epochs begin where
    # the source's did), and to the source metadata's once the copy has caught up.
    source_leader_epoch: int = -1  # as the source's metadata last said
    copied_epoch: int = -1  # the highest partitionLeaderEpoch of the batches copied
    target_leader_epoch: int = -1  # as the target last said: its metadata, LinkLeaderEpoch's answer
    epoch_asked: int = -1  # the epoch the writer last asked the target for (asked once each)
    # Asks the target's controller to raise the partition's epoch to the given one (LinkLeaderEpoch).
    on_epoch_behind: Callable[[LinkPartition, int], Awaitable[None]] = lambda pm, epoch: _no_refusal_handler(pm)

    def put(self, chunk: Chunk) -> None:
        # The fetcher sets high_watermark from the same answer just before: it covers the chunk.
        self.source_end_seen = max(self.source_end_seen, self.high_watermark)
        super().put(chunk)

    def wanted_epoch(self) -> int:
        """The epoch the target should be at least at: the copied batches', and the source's
        own once nothing fetched waits (a caught-up copy; a lagging one would otherwise copy the
        source's older epochs' batches under its newest)."""
        caught_up = self.high_watermark >= 0 and self.lag == 0 and self.queued_bytes == 0
        return max(self.copied_epoch, self.source_leader_epoch if caught_up else -1)

    def previous_end(self, first: BatchHeader) -> int:
        """Where the source's batch before `first` ended, as this mirror read the source: right
        after what it wrote (one below, past a promotion marker the target left out), or the
        source's log start after a gap the fetcher met there (retention, DeleteRecords); never
        past `first` (the offset it was fetched from holds nothing up to it)."""
        marker_last = self.left_out_at >= 0 and self.left_out_at == self.written_through
        written = self.written_through if marker_last else self.written_through + 1
        return min(first.base_offset, max(written, self.trim_below))

    def fail(self, why: str) -> None:
        """The copy at the target is not the source's: stop this partition, FAILED, loudly.
        Copying on would skip records (the target takes them as already there) or mix them."""
        if self.failed is not None:
            return
        self.failed = self.error = f"FAILED: {why}; this partition is no longer copied"
        log.error("%s: %s", _name(self.source), self.failed)
        self.stop()
        self.on_failed(self)

    def source_went_back(self, start: int, end: int) -> str | None:
        """Offsets are equal at both ends: copying the source again from its log start would
        put other records under offsets the target's consumers have read. Park and say so."""
        first = not self.parked
        self.fetch_failures += 1
        copied = max(self.position, self.written_through + 1)  # fetched from one below it at a resume
        self.park_at_source(f"the source log now ends at {end}, before the copy's end {copied} (truncated, "
                            f"or deleted and created again): it is no longer the log this mirror topic copies; "
                            f"nothing more is copied", PARK_BACKOFF.delay(self.fetch_failures))
        return self.error if first else None

    async def run_link_writer(self, client: Client, *, backoff: Backoff) -> None:
        """Write queued batches to the mirror topic until stopped or cancelled."""
        while True:
            chunk: Chunk | None = None
            with trio.move_on_after(LOG_START_CHECK_S) as idle:
                chunk = await self._take()
            if self.stopped or (chunk is None and not idle.cancelled_caught):
                return
            if chunk is None:
                await self._follow_log_start(client)
                continue
            if not await self._write_link_chunk(client, chunk, backoff):
                self._done_with(chunk)

    def _log_start_behind(self) -> bool:
        """Whether the copy's log start can move up towards the source's: the target moves it
        to at most its high watermark, so this asks again only when that limit moved."""
        source = self.log_start_offset
        if source < 0 or self.parked or self.held:
            return False
        return self.target_start < 0 or min(source, self.target_end) > self.target_start

    async def _follow_log_start(self, client: Client) -> None:
        """The source's log start moved while nothing new was written (DeleteRecords, retention
        at the source): send it alone. A failure is left to the next check (or the next write)."""
        if not self._log_start_behind():
            return
        epoch = self.epoch
        # Never past the copy's end (as far as its high watermark says), which the target refuses.
        start = min(self.log_start_offset, self.target_end)
        if start < 0:
            return
        result = (await link_append(client, self.link_name, {self.target: b""},
                                    log_start_offsets={self.target: start}))[self.target]
        if self.stopped or self.epoch != epoch:
            return
        if result.error == ErrorCode.NONE:
            self.target_start = result.log_start_offset
            self.target_end = max(self.target_end, result.high_watermark)
        elif result.error == ErrorCode.INVALID_REQUEST:
            self.error = f"INVALID_REQUEST from LinkAppend to {_name(self.target)}: {result.error_message}"
            await self.on_refused(self)  # stops this partition when the topic was promoted
        elif result.error == ErrorCode.OFFSET_OUT_OF_RANGE:
            self.fail(f"the target refused the source's log start offset {start}: {result.error_message}")
        else:
            log.debug("%s: moving the copy's log start to %d: %s", _name(self.source), self.log_start_offset,
                      result.error.name)

    async def _write_link_chunk(self, client: Client, chunk: Chunk, backoff: Backoff) -> bool:
        """Returns True when the chunk was not written through (rewound, parked or stopped)."""
        epoch = self.epoch
        data = chunk.data
        low = self.written_through if self.verify_at < 0 else min(self.written_through, self.verify_at - 1)
        spans = [(pos, header) for pos, header in chunk.spans if header.last_offset > low]
        damaged = next((i for i, (pos, header) in enumerate(spans) if not batch_crc_ok(data, pos, header)), None)
        pieces = pieces_of_one_epoch(spans if damaged is None else spans[:damaged], LINK_REQUEST_MAX_BYTES)
        while pieces:
            piece = pieces.pop(0)
            source_epoch = piece[0][1].partition_leader_epoch  # one per piece (pieces_of_one_epoch)
            if source_epoch > max(self.target_leader_epoch, self.epoch_asked):
                # A source epoch the target has not reached: raised before its batches are
                # copied, so they carry it and the target's epoch begins where the source's did.
                # Asked once per epoch; a failure is left to the discovery round.
                self.epoch_asked = source_epoch
                await self.on_epoch_behind(self, source_epoch)
            outcome = await self._append(client, data, piece, backoff, epoch)
            if outcome == _Outcome.SPLIT:
                pieces[:0] = [[span] for span in piece]
            elif outcome == _Outcome.STOPPED:
                return True
        if damaged is not None:
            # Damaged between the source and here (the source's own damage is refused by its
            # broker's checks): fetching it again is the cure.
            header = spans[damaged][1]
            self.error = f"corrupt batch at source offset {header.base_offset} (CRC mismatch); fetching it again"
            log.warning("%s: %s", _name(self.source), self.error)
            self.rewind(header.base_offset)
            await trio.sleep(backoff.delay(1))
            return True
        return False

    async def _append(self, client: Client, data: memoryview, piece: list[Span], backoff: Backoff,
                      epoch: int) -> str:
        first, last = piece[0][1], piece[-1][1]
        start, end = piece[0][0], piece[-1][0] + last.size
        records = data[start:end]
        previous_end = {self.target: self.previous_end(first)}

        async def send() -> str | Failed | Handled:
            # The source's, from the latest fetch (the copy follows it), never past this piece's
            # end: the copy's log start never passes what it holds.
            log_start = min(self.log_start_offset, last.last_offset + 1)
            result = (await link_append(client, self.link_name, {self.target: records}, previous_ends=previous_end,
                                        log_start_offsets={self.target: log_start} if log_start >= 0 else None,
                                        ))[self.target]
            if self.stopped or self.epoch != epoch:
                return Handled.GIVE_UP
            if result.high_watermark >= 0:
                self.target_end = result.high_watermark
            if result.log_start_offset >= 0:
                self.target_start = result.log_start_offset
            code = result.error
            if code == ErrorCode.NONE:
                self.copied_epoch = max(self.copied_epoch, last.partition_leader_epoch)
                if result.log_end_offset > self.source_end_seen:
                    self.fail(f"the mirror topic {_name(self.target)} ends at offset {result.log_end_offset} at the "
                              f"target, past the source's high watermark {self.source_end_seen}: it holds records "
                              f"this mirror never copied (someone else wrote there)")
                    return Handled.GIVE_UP
                self._written(piece, result.log_end_offset)
                return _Outcome.DONE
            if code == ErrorCode.OFFSET_OUT_OF_RANGE:
                # The copy is not where the source's batches follow (it went ahead, or holds
                # other batches at these offsets): copying on would skip or mix records.
                self.fail(f"the target refused source offsets {first.base_offset}..{last.last_offset}: "
                          f"{result.error_message}")
                return Handled.GIVE_UP
            self.error = f"{code.name} from LinkAppend to {_name(self.target)}" + (
                f": {result.error_message}" if result.error_message else "")
            if code == ErrorCode.INVALID_REQUEST:
                await self.on_refused(self)  # stops this partition when the topic is not ours any more
                if self.stopped:
                    return Handled.GIVE_UP
            elif code in _REFUSED_BATCHES:
                if len(piece) > 1:
                    return _Outcome.SPLIT
                await self._park_poison(first, f"the target refused it with {self.error}", epoch)
                return Handled.GIVE_UP
            return Failed(code)  # INVALID_REQUEST still ours parks: it is not retriable

        outcome = await write_with_retries(self, epoch, send, backoff=backoff, at_offset=first.base_offset)
        return _Outcome.STOPPED if outcome is None else outcome

    def _written(self, piece: list[Span], log_end: int) -> None:
        last = piece[-1][1]
        new = [header for _, header in piece if header.last_offset > self.written_through]  # not a resume's check
        self.written_through, self.verify_at = max(self.written_through, last.last_offset), -1
        # A lone producer-less control batch the copy ends just below: a promotion marker of
        # the source's own, which the target leaves out (broker/storage/link_copy.py).
        lone_control = last.is_control and not last.has_producer_id and last.records_count == 1
        self.left_out_at = last.base_offset if lone_control and log_end == last.base_offset else -1
        self.records += sum(header.last_offset_delta + 1 for header in new)
        self.bytes += sum(header.size for header in new)
        if last.timestamp_type == TimestampType.CREATE_TIME and last.max_timestamp >= 0:
            self.latency_ms = self.latencies.add(max(0, now_ms() - last.max_timestamp))
        self.writing_again()


def pieces_of_one_epoch(spans: list[Span], max_bytes: int) -> list[list[Span]]:
    """Consecutive batches in runs of at most `max_bytes` (a larger batch alone), each of one
    source leader epoch (the target's epoch is raised to it before the run is copied)."""
    pieces: list[list[Span]] = []
    size = 0
    for span in spans:
        if pieces and size + span[1].size <= max_bytes and \
                span[1].partition_leader_epoch == pieces[-1][-1][1].partition_leader_epoch:
            pieces[-1].append(span)
            size += span[1].size
        else:
            pieces.append([span])
            size = span[1].size
    return pieces


# -- the mirror in link mode --------------------------------------------------------------


@dataclass
class LinkMirror(Mirror):
    """A mirror in link mode: the runtime's state plus the source topics it does not write, with
    why. Its name at the target (each mirror topic's `causeway.mirror.name`) is its config's."""

    # Promoted at the target: never created again; looked at again every discovery round, as a
    # failback to this mirror (reverse-and-start) makes it this mirror's mirror topic again.
    promoted: dict[str, str] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)  # looked at again every discovery round
    # Paused at the target (causeway.mirror.state): not copied; each with its lag as last read
    # (None: not read yet), looked at again every discovery round.
    paused: dict[str, int | None] = field(default_factory=dict)
    promoting: set[str] = field(default_factory=set)  # a planned promotion waits for their copy
    # Why a partition's leader epoch was last not raised to the source's, as logged (once each).
    epoch_problems: dict[TopicPartition, str] = field(default_factory=dict)

    @property
    def link_name(self) -> str:
        return self.config.display_name

    def not_mirrored(self) -> dict[str, str]:
        return {**self.refused, **self.promoted}

    def promoted_topics(self) -> list[str]:
        return list(self.promoted)

    def topic_states(self, source_problem: str | None) -> dict[str, TopicState]:
        states: dict[str, TopicState] = {}
        now = now_ms()
        # Grouped in one pass: the status is written every second, and a scan of every partition
        # per topic would cost topics x partitions each time.
        by_topic: dict[str, list[PartitionMirror]] = {}
        for tp, pm in self.partitions.items():
            by_topic.setdefault(tp.topic, []).append(pm)
        for topic in self.topics:
            mine = by_topic.get(topic, [])
            failed = next((pm.failed for pm in mine if pm.failed is not None), None)
            waiting = [pm.oldest_waiting_ms() for pm in mine if pm.lag > 0]
            known = [ts for ts in waiting if ts is not None and ts >= 0]
            # Lagging partitions whose records are not fetched yet: how long they waited is unknown.
            lag_ms = None if len(known) < len(waiting) else max((max(0, now - ts) for ts in known), default=0)
            lag = sum(pm.lag for pm in mine)
            if failed is not None:
                states[topic] = TopicState(state="FAILED", reason=failed, lag=lag, lag_ms=lag_ms)
            elif source_problem is not None:
                # Its lag counts against the source's ends when last reached: unknown now.
                states[topic] = TopicState(state="SOURCE_UNAVAILABLE", reason=source_problem)
            else:
                active = "PROMOTING" if topic in self.promoting else "ACTIVE"
                states[topic] = TopicState(state=active, lag=lag, lag_ms=lag_ms)
        for topic, behind in self.paused.items():
            states[topic] = TopicState(state="PAUSED", lag=behind)
        for topic, why in self.promoted.items():
            states[topic] = TopicState(state="STOPPED", reason=why)
        return dict(sorted(states.items()))

    def target_topic(self, topic: str) -> str | None:
        # Only the mirror topics this mirror writes: a topic of that name at the target that is
        # not its own (a normal or promoted topic, another mirror's) has its owner's ACLs.
        return topic if topic in self.topics else None

    async def run(self) -> None:
        """Check the target, then run the fetch lanes, topic discovery, heartbeats and group
        offsets until cancelled. No positions to checkpoint on a clean stop: the target's log
        end is the position."""
        config = self.config
        await _prepare(self)
        async with trio.open_nursery() as nursery:
            self.start_fetching(nursery)
            if config.sync_group_offsets:
                nursery.start_soon(self.every, "group offsets", config.sync_group_offsets_s,
                                   partial(carry_group_offsets, self, CarriedGroups(), self.link_name,
                                           partial(_recheck_owner, self)))
            log.info("mirror %s running in link mode: %s (%s) -> mirror topics at %s (%s)", self.link_name,
                     self.source_alias, config.source.bootstrap, self.target_alias, config.target.bootstrap)
            await self.every("topic discovery", config.refresh_topics_s, partial(_discover, self, nursery))


async def _prepare(mirror: LinkMirror) -> None:
    config = mirror.config
    mirror.state = "waiting for the target"

    async def target_ready() -> None:
        if not await supports_link_append(mirror.target):
            raise MirrorRefused(
                f"mode: link needs a Causeway target, and {mirror.target_alias} ({config.target.bootstrap}) is not "
                f"one: it does not serve LinkAppend (API key 10000) version {LINK_APPEND_VERSION} (not a Causeway "
                f"broker, or one older than this mirror), so it cannot hold mirror topics with the source's offsets; "
                f"use mode: mm2 to mirror to it, or upgrade its brokers")
        if config.heartbeats_s > 0:
            await ensure_topic(mirror.target, HEARTBEATS_TOPIC, replication_factor=config.replication_factor,
                               configs=COMPACTED)

    await mirror.retrying(f"target {mirror.target_alias}", target_ready, attempt_s=CLUSTER_WAIT_ATTEMPT_S)
    mirror.state = "waiting for the source"
    await mirror.retrying(f"source {mirror.source_alias}", lambda: admin.list_topics(mirror.source),
                          attempt_s=CLUSTER_WAIT_ATTEMPT_S)
    mirror.state = "running"


def _should_mirror(mirror: LinkMirror, topic: str) -> bool:
    # Heartbeats topics are the mm2 convention's, written by mirrors at each cluster: never
    # mirror topics (the target's own `heartbeats` is written by this mirror).
    if mirror.policy.is_internal(topic) or mirror.policy.is_heartbeats(topic):
        return False
    return mirror.config.topics.matches(topic, INTERNAL_TOPICS)


async def _discover(mirror: LinkMirror, nursery: trio.Nursery) -> None:
    source_topics = await admin.list_topics(mirror.source)
    wanted = {t: n for t, n in source_topics.items() if _should_mirror(mirror, t)}
    stop_vanished(mirror, wanted, kept="mirror topic")
    for topic in set(mirror.refused) - set(wanted):
        del mirror.refused[topic]
        mirror.problems.pop(f"topic {topic}", None)
    for topic in set(mirror.paused) - set(wanted):
        del mirror.paused[topic]
    target_topics = await admin.list_topics(mirror.target, include_internal=True)  # one request per round
    for topic, count in sorted(wanted.items()):
        target_count = target_topics.get(topic)
        if topic in mirror.promoted:
            if target_count is None or (await _owner(mirror.target, topic))[0] != mirror.link_name:
                continue  # a normal topic still (or deleted: never created again)
            _mirrored_again(mirror, topic)
        if target_count is None:
            if topic in mirror.topics:
                stop_topic(mirror, topic)
                mirror.report_handled(f"topic {topic}", f"the mirror topic {topic} is gone from the target "
                                                        f"{mirror.target_alias} (deleted); creating it again and "
                                                        f"copying the source from its log start")
        else:
            owner, state = await _owner(mirror.target, topic)
            if owner != mirror.link_name:
                mirror.paused.pop(topic, None)
                mirror.promoting.discard(topic)
                _not_ours(mirror, topic, owner)
                continue
            if state == MIRROR_PAUSED:
                _pause(mirror, topic)
                continue
            if state == MIRROR_PROMOTING:
                mirror.promoting.add(topic)  # copied as ACTIVE: the promotion waits for the copy
            else:
                mirror.promoting.discard(topic)
            if topic in mirror.paused:
                del mirror.paused[topic]
                message = (f"mirror topic {topic} resumed at the target {mirror.target_alias}: copying again from "
                           f"where its copy ends")
                log.info("%s", message)
                mirror.event(message)
        await sync_topic(mirror, topic, topic, count, target_count,
                         create_configs={MIRROR_NAME_CONFIG: mirror.link_name})
        mirror.topics[topic] = topic
        if mirror.refused.pop(topic, None) is not None:
            log.info("topic %s: the target's topic is this mirror's mirror topic now; mirroring it", topic)
        mirror.problems.pop(f"topic {topic}", None)
        new = [p for p in range(count) if TopicPartition(topic, p) not in mirror.partitions]
        if new:
            await _start_partitions(mirror, nursery, topic, new, created=target_count is None)
    mirror.topics_listed.set()
    await _check_target_ends(mirror)
    await _follow_source_epochs(mirror)
    await _follow_failed_sources(mirror)
    await _follow_paused(mirror, wanted)


async def _owner(client: Client, topic: str) -> tuple[str | None, str | None]:
    """The mirror that owns `topic` at the target (its `causeway.mirror.name`), None for a
    normal topic; and the topic's link state (its `causeway.mirror.state`, None: unset)."""
    configs = await admin.describe_configs(client, topic, keys=[MIRROR_NAME_CONFIG, MIRROR_STATE_CONFIG])
    entry, state = configs.get(MIRROR_NAME_CONFIG), configs.get(MIRROR_STATE_CONFIG)
    owner = entry.value if entry is not None and entry.value else None
    return owner, state.value if owner is not None and state is not None else None


def _pause(mirror: LinkMirror, topic: str) -> None:
    """`topic` is paused at the target: stop copying it (what is queued is dropped: a resume
    starts again where the copy ends), said once."""
    if topic in mirror.topics:
        stop_topic(mirror, topic)
    if topic not in mirror.paused:
        mirror.paused[topic] = None
        message = (f"mirror topic {topic} is paused at the target {mirror.target_alias} ({MIRROR_STATE_CONFIG}="
                   f"{MIRROR_PAUSED}): not copied until it is resumed")
        log.warning("%s", message)
        mirror.event(message)


async def _follow_paused(mirror: LinkMirror, counts: dict[str, int]) -> None:
    """A paused topic's lag, as a FAILED one's: both ends read each round (a request to each
    cluster for them all), so the status shows what waits at the source."""
    tps = [TopicPartition(t, p) for t in mirror.paused if t in counts for p in range(counts[t])]
    if not tps:
        return
    source, target = await _latest(mirror.source, tps), await _latest(mirror.target, tps)
    if source is None or target is None:
        return
    for topic in mirror.paused:
        mine = [tp for tp in tps if tp.topic == topic]
        mirror.paused[topic] = sum(max(0, source[tp] - target.get(tp, 0)) for tp in mine)


def _mirrored_again(mirror: LinkMirror, topic: str) -> None:
    """`topic`, promoted at the target, is this mirror's mirror topic again (a failback made
    it so: `causeway mirror reverse-and-start`): copied again from where the target's log ends."""
    del mirror.promoted[topic]
    message = (f"topic {topic} is this mirror's mirror topic again at the target {mirror.target_alias} (failback): "
               f"copying again from where its log ends")
    log.warning("%s", message)
    mirror.event(message)


def _not_ours(mirror: LinkMirror, topic: str, owner: str | None) -> None:
    """The target's `topic` is not this mirror's mirror topic: never write it. One this mirror
    was writing and whose mark was deleted was promoted: stopped (see `_mirrored_again`)."""
    was_mirrored = topic in mirror.topics
    if was_mirrored:
        stop_topic(mirror, topic)
    if was_mirrored and owner is None:
        message = (f"topic {topic} was promoted at the target {mirror.target_alias} ({MIRROR_NAME_CONFIG} "
                   f"deleted): it is a normal writable topic there now; no longer mirrored")
        mirror.promoted[topic] = message
        mirror.refused.pop(topic, None)
        mirror.problems.pop(f"topic {topic}", None)
        log.warning("%s", message)
        mirror.event(message)
        return
    if owner is None:
        why = (f"the target {mirror.target_alias} has a topic {topic} that is not a mirror topic ({MIRROR_NAME_CONFIG} "
               f"unset: a normal topic, or one promoted before this mirror started); not written")
    else:
        why = (f"the target {mirror.target_alias} has topic {topic} as the mirror topic of mirror {owner}, "
               f"not of this mirror ({mirror.link_name}); not written")
    if mirror.refused.get(topic) != why:
        log.warning("%s", why)
        mirror.event(why)
    mirror.refused[topic] = why
    mirror.problems[f"topic {topic}"] = why


async def _on_refused(mirror: LinkMirror, pm: LinkPartition) -> None:
    """The target answered INVALID_REQUEST for `pm`'s topic: read whose topic it is now."""
    await _recheck_owner(mirror, pm.source.topic)


async def _recheck_owner(mirror: LinkMirror, topic: str) -> None:
    """The target refused a write to `topic` (a copy, a group's offsets) as not this mirror's:
    read whose topic it is now, and stop it when promoted, someone else's or paused."""
    try:
        owner, state = await _owner(mirror.target, topic)
    except (KafkaError, ClientError) as exc:
        log.warning("topic %s: refused by the target, and its config cannot be read: %s", topic, exc)
        return  # the writer parks and asks again
    if owner != mirror.link_name and topic in mirror.topics:
        _not_ours(mirror, topic, owner)
    elif state == MIRROR_PAUSED and topic in mirror.topics:
        _pause(mirror, topic)


async def _start_partitions(mirror: LinkMirror, nursery: trio.Nursery, topic: str, partitions: list[int], *,
                            created: bool) -> None:
    """Start copying `partitions` at the target's high watermark, or at the source's log start
    when the target never held a record there (`created`: the mirror just made the topic). A
    copy that ends inside the source's log is first checked: its last batch is sent again."""
    tps = [TopicPartition(topic, p) for p in partitions]
    ends = {tp: 0 for tp in tps}
    if not created:
        listed = await admin.list_offsets(mirror.target, {tp: LATEST for tp in tps})
        ends = {tp: listed[tp].offset for tp in tps}
    listed = await admin.list_offsets(mirror.source, {tp: EARLIEST for tp in tps})
    source_starts = {tp: listed[tp].offset for tp in tps}
    starts = {tp: source_starts[tp] for tp in tps if ends[tp] <= 0}
    config = mirror.config
    for tp in tps:
        # A target log ending above 0 is where the copy stands: a source log starting after it
        # lost records before they were copied, which the fetcher reports by offsets.
        position = starts[tp] if tp in starts else ends[tp]
        pm = LinkPartition(tp, tp, position, config.offset_lag_max, config.queue_max_bytes,
                           written_through=position - 1, link_name=mirror.link_name,
                           on_refused=partial(_on_refused, mirror), on_failed=partial(_on_failed, mirror),
                           on_epoch_behind=partial(_raise_one_epoch, mirror))
        # A partition the mirror just created starts at epoch 0; else as the target's metadata says.
        pm.target_leader_epoch = 0 if created else mirror.target.metadata.leader_epoch(tp)
        pm.source_leader_epoch = mirror.source.metadata.leader_epoch(tp)
        if tp not in starts and position - 1 >= source_starts[tp]:
            pm.position = pm.verify_at = position - 1  # fetched from the copy's last offset: checked
        pm.target_end = ends[tp]
        pm.copied_from = position
        mirror.add_partition(pm)
        nursery.start_soon(partial(pm.run_link_writer, mirror.target, backoff=RETRY))
        log.info("mirroring %s-%d to its mirror topic from offset %d (%s)", topic, tp.partition, position,
                 "the source's log start" if tp in starts else "the target's high watermark")


async def _check_target_ends(mirror: LinkMirror) -> None:
    """A mirror topic whose log end at the target went below what the target last said it held
    (truncated at the target): copy again from where it ends. Offsets are equal at both ends,
    so that is all it takes; what the target still has is skipped. One whose log end is past the
    source's high watermark holds records this mirror never copied: FAILED.

    "What the target held" is its own answer (ListOffsets at the start, each LinkAppend's high
    watermark since), never the mirror's position: a partition that starts at the source's log
    start (say 120) has copied nothing yet, and its empty copy ending at 0 is not a truncation."""
    watched = {pm.target: (pm, pm.target_end, pm.epoch) for pm in mirror.partitions.values()
               if isinstance(pm, LinkPartition) and not pm.stopped and (pm.target_end > 0 or pm.source_end_seen >= 0)}
    ends = await _latest(mirror.target, list(watched)) if watched else None
    if ends is None:
        return
    for tp, (pm, expected, epoch) in watched.items():
        end = ends[tp]
        if pm.stopped or pm.epoch != epoch:
            continue  # rewound or stopped meanwhile: the next round looks again
        if end > pm.source_end_seen >= 0:
            pm.fail(f"the mirror topic ends at offset {end} at the target, past the source's high watermark "
                    f"{pm.source_end_seen}: it holds records this mirror never copied (someone else wrote there)")
        elif 0 <= end < expected:
            message = (f"{_name(tp)}: the mirror topic ends at offset {end} at the target, below the {expected} "
                       f"copied there (truncated at the target); copying source offsets from {end} again")
            pm.rewind(end)
            pm.written_through, pm.target_end = end - 1, end
            pm.note_gap(message)
            mirror.event(message)
            log.error("%s", message)


async def _follow_source_epochs(mirror: LinkMirror) -> None:
    """KIP-1279's invariant, each discovery round: every mirror topic partition whose target
    epoch is below what it should be at least (its copied batches' epoch; the source's, as this
    round's metadata says, once the copy caught up) is raised, in one LinkLeaderEpoch request to
    the target's controller. So an epoch the source reached without writing anything (a leader
    change on an idle partition) reaches the target too, within a round, and a raise the writer
    could not make is made again."""
    behind: list[tuple[LinkPartition, int]] = []
    for tp, pm in mirror.partitions.items():
        if not isinstance(pm, LinkPartition) or pm.stopped:
            continue
        pm.source_leader_epoch = max(pm.source_leader_epoch, mirror.source.metadata.leader_epoch(tp))
        pm.target_leader_epoch = max(pm.target_leader_epoch, mirror.target.metadata.leader_epoch(tp))
        wanted = pm.wanted_epoch()
        if wanted > pm.target_leader_epoch:
            behind.append((pm, wanted))
    if behind:
        await _raise_epochs(mirror, behind)


async def _raise_one_epoch(mirror: LinkMirror, pm: LinkPartition, epoch: int) -> None:
    """Before the writer copies batches of source epoch ``epoch``: raise the target's to it and,
    when it was raised, wait (bounded) until the leader leads in it, so those batches carry it
    and its start in the leader's epoch cache is where the source's began. (A ZooKeeper-mode
    controller tells the leader after it answers; past the bound, the batches carry the epoch
    before it: the target's older epoch then ends a little later than the source's.)"""
    before = pm.target_leader_epoch
    await _raise_epochs(mirror, [(pm, epoch)])
    if pm.target_leader_epoch > before and not await wait_leader_epoch(mirror.target, pm.target,
                                                                          pm.target_leader_epoch, LEADER_EPOCH_WAIT_S):
        log.warning("%s: the leader did not lead in the raised epoch %d within %.0f s; copying on", _name(pm.target),
                    pm.target_leader_epoch, LEADER_EPOCH_WAIT_S)


async def _raise_epochs(mirror: LinkMirror, epochs: list[tuple[LinkPartition, int]]) -> None:
    """Ask the target's controller to raise each partition's leader epoch to at least the one
    given. A failure is logged (once per partition and reason) and left to the next round: the
    copy goes on meanwhile."""
    pms = [pm for pm, _ in epochs]
    wanted = {pm.target: epoch for pm, epoch in epochs}
    try:
        answers = await link_leader_epochs(mirror.target, mirror.link_name, wanted)
    except (KafkaError, ClientError) as exc:
        log.warning("mirror %s: cannot raise the leader epochs of %d mirror topic partitions to the source's: %s",
                    mirror.link_name, len(pms), exc)
        return
    for pm in pms:
        code, epoch = answers.get(pm.target, (ErrorCode.UNKNOWN_SERVER_ERROR, -1))
        pm.target_leader_epoch = max(pm.target_leader_epoch, epoch)
        if code == ErrorCode.NONE:
            continue
        why = f"{code.name} (source leader epoch {wanted[pm.target]})"
        if why != mirror.epoch_problems.get(pm.target):
            mirror.epoch_problems[pm.target] = why
            log.warning("%s: the target did not raise its leader epoch to the source's: %s; asked again each round",
                        _name(pm.target), why)


def _on_failed(mirror: LinkMirror, pm: LinkPartition) -> None:
    assert pm.failed is not None
    mirror.event(f"{_name(pm.source)}: {pm.failed}")
    _report_failed(mirror)


def _report_failed(mirror: LinkMirror) -> None:
    """The FAILED partitions in `problems` (what `causeway status` counts as unhealthy), and no
    others: one stopped since (its topic deleted, or created again at the target) is gone."""
    failed = {f"FAILED {_name(pm.source)}": pm.failed for pm in _failed(mirror).values()}
    for what in [what for what in mirror.problems if what.startswith("FAILED ") and what not in failed]:
        del mirror.problems[what]
    mirror.problems.update({what: why for what, why in failed.items() if why is not None})


def _failed(mirror: LinkMirror) -> dict[TopicPartition, LinkPartition]:
    return {tp: pm for tp, pm in mirror.partitions.items() if isinstance(pm, LinkPartition) and pm.failed is not None}


async def _follow_failed_sources(mirror: LinkMirror) -> None:
    """A FAILED partition is no longer fetched; its source high watermark is still read each
    round, so its lag in the status counts what the source wrote since and never reads 0."""
    _report_failed(mirror)
    failed = _failed(mirror)
    ends = await _latest(mirror.source, list(failed)) if failed else None
    if ends is not None:
        for tp, pm in failed.items():
            pm.high_watermark = max(pm.high_watermark, ends[tp])


async def _latest(client: Client, tps: list[TopicPartition]) -> dict[TopicPartition, int] | None:
    """Each partition's high watermark at `client`'s cluster; None while one of them is deleted
    or moving (the next round looks again). Raises KafkaError / ClientError otherwise."""
    try:
        listed = await admin.list_offsets(client, {tp: LATEST for tp in tps})
    except KafkaError as exc:
        if exc.code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_LEADER_OR_FOLLOWER,
                        ErrorCode.OFFSET_NOT_AVAILABLE, ErrorCode.LEADER_NOT_AVAILABLE):
            return None
        raise
    return {tp: offset.offset for tp, offset in listed.items()}


def _name(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"
