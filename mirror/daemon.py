"""The mirror daemon: one source cluster to one target cluster, as MirrorMaker 2 (`mode: mm2`),
or as read-only mirror topics with the source's offsets on a Causeway target (`mode: link`,
mirror/link.py, which shares the fetch lanes, topic sync, heartbeats and status with mm2 mode).

    async with trio.open_nursery() as nursery:
        mirror = await nursery.start(run_mirror, config)

Its task tree: fetch lanes reading the source (mirror/fetcher.py), one writer per partition
(mirror/partition.py), and the loops that MM2 spreads over three connectors: topic discovery and
config sync, position checkpoints (`mm2-offsets.<source>.internal` on the target), offset syncs,
heartbeats, consumer-group checkpoints and offset sync (mirror/groups.py), and the status report.

It runs in the target datacenter and reads the source across the WAN. Either cluster may be
down at start or at any time: every loop retries with backoff and says what it waits for.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from broker.atomic_file import write_atomically
from broker.client import (
    MIRROR_NAME_CONFIG,
    Backoff,
    Client,
    ClientError,
    KafkaError,
    TopicPartition,
    admin,
    open_client,
)
from broker.client.admin import EARLIEST, NewTopic
from broker.client.produce import init_idempotent_producer
from broker.clock import now_ms
from broker.retry import retry, worth_reporting
from broker.tasks import leaves
from mirror.config import INTERNAL_TOPICS, MirrorConfig
from mirror.errors import MirrorRefused
from mirror.fetcher import FetchLane, FetchSettings
from mirror.formats import Heartbeat, OffsetSync, decode_position, encode_position
from mirror.groups import GroupMirroring, run_group_checkpoints
from mirror.naming import HEARTBEATS_TOPIC, ReplicationPolicy
from mirror.offset_sync import SyncStore
from mirror.partition import PartitionMirror, ProducerIdentity
from mirror.recopy import check_target_ends, remote_topic_missing, target_went_back
from mirror.status import ClusterRef, MirrorEvent, MirrorStatus, PartitionStatus
from mirror.topics import COMPACTED, append, ensure_topic, read_whole_topic

if TYPE_CHECKING:
    from mirror.link import LinkState

__all__ = ["Mirror", "MirrorRefused", "run_mirror"]

log = logging.getLogger(__name__)

# Topic configs MirrorMaker 2 leaves alone (DefaultConfigPropertyFilter): they describe the source
# cluster's brokers or its clocks, not the data.
EXCLUDED_CONFIGS = frozenset({
    "follower.replication.throttled.replicas",
    "leader.replication.throttled.replicas",
    "message.timestamp.difference.max.ms",
    "message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms",
    "message.timestamp.type",
    "unclean.leader.election.enable",
    "min.insync.replicas",
    # Causeway's mark of a link-mode mirror topic: it names the mirror that writes the topic at
    # its own cluster, so a copy of it elsewhere would lock that copy against its own writer.
    MIRROR_NAME_CONFIG,
})
RETRY = Backoff(initial_s=0.2, max_s=10.0)
STATUS_INTERVAL_S = 1.0
SUMMARY_INTERVAL_S = 30.0
# A problem the mirror has dealt with (a source topic or partition gone, so no longer mirrored)
# stays in the status this long after it was reported, then only in `events` and the log.
HANDLED_PROBLEM_S = 60.0
EVENTS_KEPT = 50


@dataclass
class Mirror:
    """A running mirror: its settings, clients and partitions; what the status shows."""

    config: MirrorConfig
    source: Client
    target: Client
    status_file: Path | None = None
    # One client (so one connection) per fetch lane: a broker answers one request per connection
    # at a time, so lanes sharing a connection would wait behind each other's long polls.
    lane_clients: list[Client] = field(default_factory=list)
    policy: ReplicationPolicy = field(init=False)
    partitions: dict[TopicPartition, PartitionMirror] = field(default_factory=dict)
    topics: dict[str, str] = field(default_factory=dict)  # source topic -> remote topic
    lanes: list[FetchLane] = field(default_factory=list)
    producer: ProducerIdentity = field(default_factory=ProducerIdentity)
    syncs: SyncStore = field(default_factory=SyncStore)
    pending_syncs: list[OffsetSync] = field(default_factory=list)
    stored_positions: dict[tuple[str, int], int] = field(default_factory=dict)
    flushed: dict[TopicPartition, int] = field(default_factory=dict)
    synced_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    state: str = "starting"
    problems: dict[str, str] = field(default_factory=dict)  # loop -> its last error
    # Problems already dealt with: shown until their time (time.monotonic()) passes.
    handled: dict[str, tuple[str, float]] = field(default_factory=dict)
    events: deque[MirrorEvent] = field(default_factory=lambda: deque(maxlen=EVENTS_KEPT))
    nursery: trio.Nursery | None = None  # where re-copies run
    started_ms: int = field(default_factory=now_ms)
    source_reached_ms: int | None = None  # when fetches from the source last answered (the status's)
    group_checkpoints: int = 0
    stop_requested: trio.Event = field(default_factory=trio.Event)
    # One status file write at a time: the every-second one and the last one on stop share a
    # temporary file name, and each writes in a worker thread.
    status_lock: trio.Lock = field(default_factory=trio.Lock)
    link: LinkState | None = None  # link mode's own state (mirror/link.py), None in mm2 mode

    def __post_init__(self) -> None:
        self.policy = ReplicationPolicy(identity=self.config.naming == "identity", separator=self.config.separator)
        settings = FetchSettings(self.config.fetch_max_wait_ms, self.config.fetch_max_bytes,
                                 self.config.partition_fetch_max_bytes)
        self.lanes = [FetchLane(client, settings, self._on_idle) for client in self.lane_clients or [self.source]]

    def stop(self) -> None:
        """Stop cleanly: `run_mirror` checkpoints positions once more and returns."""
        self.stop_requested.set()

    def event(self, message: str) -> None:
        """Something an operator should know happened (a gap, a re-copy, a topic gone): kept in
        the status's `events` (the newest EVENTS_KEPT)."""
        self.events.append(MirrorEvent(time_ms=now_ms(), message=message))

    def report_handled(self, what: str, message: str) -> None:
        """A problem the mirror has dealt with: logged, an event, and in `problems` for a while."""
        log.warning("%s", message)
        self.event(message)
        self.handled[what] = (message, time.monotonic() + HANDLED_PROBLEM_S)

    async def retrying(self, what: str, step: Callable[[], Awaitable[object]], *,
                       max_pause_s: float = math.inf) -> None:
        """Run `step` until it succeeds, with backoff (at most `max_pause_s`) between attempts;
        a failure shows in the status under `what` until then."""
        failures = 0

        def failed(exc: Exception, count: int) -> None:
            nonlocal failures
            failures = count
            self.problems[what] = str(exc)
            if worth_reporting(count):
                log.warning("%s failed (%s); attempt %d, retrying with backoff", what, exc, count)

        await retry(step, retriable=(ClientError, KafkaError), backoff=RETRY, on_failure=failed,
                    deadline=math.inf, max_pause_s=max_pause_s)
        if self.problems.pop(what, None) is not None:
            log.info("%s works again after %d failed attempts", what, failures)

    async def every(self, what: str, interval_s: float, step: Callable[[], Awaitable[object]]) -> None:
        """Run `step` now and every `interval_s` until cancelled (a failed run retried sooner)."""
        while True:
            await self.retrying(what, step, max_pause_s=interval_s)
            await trio.sleep(interval_s)

    @property
    def source_alias(self) -> str:
        return self.config.source.alias

    @property
    def target_alias(self) -> str:
        return self.config.target.alias

    @property
    def offset_syncs_client(self) -> Client:
        return self.source if self.config.offset_syncs_location == "source" else self.target

    @property
    def offset_syncs_topic(self) -> str:
        other = self.target_alias if self.config.offset_syncs_location == "source" else self.source_alias
        return self.policy.offset_syncs_topic(other)

    def should_mirror(self, topic: str) -> bool:
        if self.policy.is_internal(topic) or self.policy.is_cycle(topic, self.target_alias):
            return False
        if self.policy.is_heartbeats(topic):
            return True  # MM2 always carries heartbeats: they show which clusters reach which
        return self.config.topics.matches(topic, INTERNAL_TOPICS)

    # -- offset syncs --------------------------------------------------------------------

    def _on_sync(self, pm: PartitionMirror, upstream: int, downstream: int) -> None:
        self.pending_syncs.append(OffsetSync(pm.source.topic, pm.source.partition, upstream, downstream))
        # A long outage of the sync topic must not grow memory without bound: the newest syncs
        # are the ones translation needs.
        del self.pending_syncs[:-10_000]

    def _on_idle(self, pm: PartitionMirror) -> None:
        if pm.queued_bytes == 0:
            sync = pm.emitter.on_idle()
            if sync is not None:
                self._on_sync(pm, *sync)

    # -- status --------------------------------------------------------------------------

    def report(self) -> MirrorStatus:
        """What the status file shows, as of now (taken on the event loop: a consistent view)."""
        partitions: list[PartitionStatus] = []
        problems = dict(self.problems)
        now = time.monotonic()
        for what, (message, until) in list(self.handled.items()):
            if until < now:
                del self.handled[what]
            else:
                problems.setdefault(what, message)
        for tp, pm in sorted(self.partitions.items()):
            name = f"{tp.topic}-{tp.partition}"
            if pm.recopy is not None and pm.lag == 0 and pm.written_through + 1 >= pm.recopy_until:
                pm.recopy = None  # caught up with nothing left to write
            partitions.append(PartitionStatus(
                topic=tp.topic, partition=tp.partition, remote_topic=pm.target.topic,
                position=pm.written_through + 1, source_end=pm.high_watermark, lag=pm.lag,
                target_end=pm.target_end,
                latency_ms=pm.latency_ms, records=pm.records, bytes=pm.bytes,
                error=pm.error or pm.recopy, parked=pm.parked, gaps=list(pm.gaps),
                lost=pm.lost, recopy=pm.recopy, failed=pm.failed,
            ))
            if pm.parked and pm.error is not None:
                problems[f"parked {name}"] = pm.error  # which batch and why: nothing passes it
            if pm.recopy is not None:
                problems[f"re-copy {name}"] = pm.recopy
            if pm.lost is not None:
                problems[f"lost {name}"] = pm.lost
        unreachable = [lane.last_error for lane in self.lanes if lane.last_error]
        if unreachable:
            problems["source"] = unreachable[0]
        elif self.partitions:
            self.source_reached_ms = now_ms()  # every lane's last fetch answered
        return MirrorStatus(
            name=self.config.display_name,
            source=ClusterRef(alias=self.source_alias, bootstrap=self.config.source.bootstrap),
            target=ClusterRef(alias=self.target_alias, bootstrap=self.config.target.bootstrap),
            state=self.state,
            mode=self.config.mode,
            updated_ms=now_ms(),
            topics=dict(sorted(self.topics.items())),
            not_mirrored=dict(sorted(self.link.not_mirrored().items())) if self.link is not None else {},
            lag=sum(p.lag for p in partitions),
            records=sum(p.records for p in partitions),
            max_latency_ms=max((pm.latency_ms for pm in self.partitions.values() if pm.latency_ms is not None),
                               default=None),
            group_checkpoints=self.group_checkpoints,
            problems=problems,
            source_reached_ms=self.source_reached_ms,
            promoted=sorted(self.link.promoted) if self.link is not None else [],
            partitions=partitions,
            events=list(self.events),
        )

    def status(self) -> dict[str, Any]:
        """:meth:`report` as plain data, by the status file's field names."""
        return self.report().model_dump()

    def groups_view(self) -> GroupMirroring:
        """What consumer-group checkpointing needs of this mirror, and nothing else."""
        config = self.config
        return GroupMirroring(
            source=self.source, target=self.target, target_alias=self.target_alias,
            checkpoints_topic=self.policy.checkpoints_topic(self.source_alias), groups=config.groups,
            checkpoints_s=config.checkpoints_s, sync_offsets=config.sync_group_offsets,
            sync_offsets_s=config.sync_group_offsets_s, remote_topic=self.topics.get,
            translate=self.syncs.translate, every=self.every, written=self._count_group_checkpoints,
        )

    def _count_group_checkpoints(self, count: int) -> None:
        self.group_checkpoints += count


async def run_mirror(config: MirrorConfig, *, status_file: Path | None = None,
                     task_status: trio.TaskStatus[Mirror] = trio.TASK_STATUS_IGNORED) -> None:
    """Run one mirror until `Mirror.stop()` (a clean stop: positions are checkpointed once more,
    so a restart repeats nothing) or until cancelled (like a crash: a restart may repeat what was
    written since the last checkpoint, never skip it). In link mode the target's log end is the
    position, so neither repeats anything. Raises MirrorRefused (after reporting it in the status)
    when the mirror cannot run as configured.

    Reports the Mirror as soon as its clients exist; it then waits (with backoff, saying so) for
    both clusters, so a cluster that is down is not an error.
    """
    name = config.display_name
    async with (
        open_client(config.source.bootstrap, client_id=f"causeway-mirror-{name}-source") as source,
        open_client(config.target.bootstrap, client_id=f"causeway-mirror-{name}-target") as target,
        AsyncExitStack() as stack,
    ):
        lane_clients = [
            await stack.enter_async_context(open_client(config.source.bootstrap,
                                                        client_id=f"causeway-mirror-{name}-fetch-{i}"))
            for i in range(config.tasks_max)
        ]
        mirror = Mirror(config, source, target, status_file, lane_clients)
        await _supervise(mirror, task_status)


async def _supervise(mirror: Mirror, task_status: trio.TaskStatus[Mirror]) -> None:
    name = mirror.config.display_name
    async with trio.open_nursery() as outer:
        outer.start_soon(_status_loop, mirror)
        task_status.started(mirror)
        try:
            async with trio.open_nursery() as work:
                work.start_soon(_work, mirror)
                await mirror.stop_requested.wait()
                work.cancel_scope.cancel()
        except BaseException as raised:  # noqa: BLE001 - re-raised; a refusal is reported first
            refused = [leaf for leaf in leaves(raised) if isinstance(leaf, MirrorRefused)]
            if refused:
                await _refused(mirror, refused[0])
            raise
        was_running = mirror.state == "running"
        mirror.state = "stopped"
        if was_running and mirror.config.mode == "mm2":  # link mode keeps no positions: the target's log end is one
            await _final_flush(mirror)
        await _write_status(mirror)
        log.info("mirror %s stopped", name)
        outer.cancel_scope.cancel()


async def _refused(mirror: Mirror, exc: BaseException) -> None:
    message = str(exc)
    log.error("mirror %s cannot run: %s", mirror.config.display_name, message)
    mirror.state = "failed"
    mirror.problems["mirror"] = message
    mirror.event(message)
    await _write_status(mirror)


async def _work(mirror: Mirror) -> None:
    if mirror.config.mode == "link":
        # Imported here: mirror/link.py builds on this module's Mirror and topic sync.
        from mirror.link import run_link

        await run_link(mirror)
        return
    await _prepare(mirror)
    await _run(mirror)


async def _prepare(mirror: Mirror) -> None:
    config = mirror.config
    rf = config.replication_factor
    mirror.state = "waiting for the target"

    async def target_topics() -> None:
        for topic in (HEARTBEATS_TOPIC, mirror.policy.checkpoints_topic(mirror.source_alias),
                      mirror.policy.positions_topic(mirror.source_alias)):
            await ensure_topic(mirror.target, topic, replication_factor=rf, configs=COMPACTED)

    await mirror.retrying(f"target {mirror.target_alias}", target_topics)

    async def load_positions() -> None:
        for record in await read_whole_topic(mirror.target, mirror.policy.positions_topic(mirror.source_alias)):
            decoded = decode_position(record.key or b"", record.value)
            if decoded is None or decoded[0] != mirror.source_alias:
                continue
            _, topic, partition, offset = decoded
            if offset is None:
                mirror.stored_positions.pop((topic, partition), None)
            else:
                mirror.stored_positions[(topic, partition)] = offset

    await mirror.retrying("reading mirrored positions", load_positions)
    mirror.state = "waiting for the source"

    async def load_offset_syncs() -> None:
        await ensure_topic(mirror.offset_syncs_client, mirror.offset_syncs_topic, replication_factor=rf,
                           configs=COMPACTED)
        for record in await read_whole_topic(mirror.offset_syncs_client, mirror.offset_syncs_topic):
            if record.key is None or record.value is None:
                continue
            try:
                sync = OffsetSync.decode(record.key, record.value)
            except (ValueError, KafkaError) as exc:
                log.warning("skipping an offset sync that does not decode: %s", exc)
                continue
            mirror.syncs.add(sync.topic, sync.partition, sync.upstream_offset, sync.downstream_offset)

    await mirror.retrying(f"offset syncs on {config.offset_syncs_location}", load_offset_syncs)
    await mirror.retrying("producer id at the target", lambda: _renew_producer(mirror))
    mirror.state = "running"
    log.info("mirror %s running: %s (%s) -> %s (%s); %d stored positions", config.display_name,
             mirror.source_alias, config.source.bootstrap, mirror.target_alias, config.target.bootstrap,
             len(mirror.stored_positions))


async def _renew_producer(mirror: Mirror) -> None:
    producer = await init_idempotent_producer(mirror.target)
    mirror.producer.set(producer.producer_id, producer.producer_epoch)


async def _run(mirror: Mirror) -> None:
    async with trio.open_nursery() as nursery:
        mirror.nursery = nursery
        for lane in mirror.lanes:
            nursery.start_soon(lane.run)
        nursery.start_soon(_producer_renewal_loop, mirror)
        nursery.start_soon(mirror.every, "checkpointing positions", mirror.config.flush_interval_ms / 1000,
                           partial(_flush_once, mirror))
        if mirror.config.heartbeats_s > 0:
            nursery.start_soon(mirror.every, "heartbeats", mirror.config.heartbeats_s, partial(heartbeat, mirror))
        if mirror.config.checkpoints_s > 0:
            nursery.start_soon(run_group_checkpoints, mirror.groups_view())
        await mirror.every("topic discovery", mirror.config.refresh_topics_s, partial(_discover, mirror, nursery))


async def _producer_renewal_loop(mirror: Mirror) -> None:
    while True:
        await mirror.producer.renew_requested.wait()
        await mirror.retrying("new producer id at the target", lambda: _renew_producer(mirror))


# -- topics ------------------------------------------------------------------------------


async def _discover(mirror: Mirror, nursery: trio.Nursery) -> None:
    source_topics = await admin.list_topics(mirror.source)
    wanted = {t: n for t, n in source_topics.items() if mirror.should_mirror(t)}
    stop_vanished(mirror, wanted, kept="remote topic")
    target_topics = await admin.list_topics(mirror.target, include_internal=True)  # one request per round
    for topic, count in sorted(wanted.items()):
        remote = mirror.policy.remote_topic(mirror.source_alias, topic)
        remote_count = target_topics.get(remote)
        if remote_count is None and topic in mirror.topics:
            remote_topic_missing(mirror, topic, remote)  # before it exists again: nothing written ahead
        await sync_topic(mirror, topic, remote, count, remote_count)
        mirror.topics[topic] = remote
        mirror.problems.pop(f"topic {topic}", None)
        mirror.handled.pop(f"topic {topic}", None)
        new = [p for p in range(count) if TopicPartition(topic, p) not in mirror.partitions]
        if new:
            await _start_partitions(mirror, nursery, topic, remote, new, remote_missing=remote_count is None)
    await check_target_ends(mirror)


async def _source_configs(mirror: Mirror, topic: str) -> dict[str, str]:
    if not mirror.config.sync_topic_configs:
        return {}
    entries = await admin.describe_configs(mirror.source, topic)
    return {
        name: entry.value for name, entry in entries.items()
        if not entry.is_default and entry.value is not None and not entry.is_sensitive and name not in EXCLUDED_CONFIGS
    }


async def sync_topic(mirror: Mirror, topic: str, remote: str, count: int, remote_count: int | None, *,
                     create_configs: dict[str, str] | None = None) -> None:
    """Create the remote topic (`remote_count` None: the target lacks it), with `create_configs`
    besides the source's, or bring its partitions and configs in line with the source's."""
    configs = await _source_configs(mirror, topic)
    if remote_count is None:
        await admin.create_topics(
            mirror.target, {remote: NewTopic(count, mirror.config.replication_factor,
                                             {**configs, **(create_configs or {})})}, exist_ok=True)
        log.info("created remote topic %s at %s: %d partitions%s", remote, mirror.target_alias, count,
                 f", configs {configs}" if configs else "")
        mirror.synced_configs[topic] = configs
        return
    if remote_count < count:
        await admin.create_partitions(mirror.target, {remote: count})
        log.info("remote topic %s: partitions raised from %d to %d, as at the source", remote, remote_count, count)
    if configs != mirror.synced_configs.get(topic):
        current = await admin.describe_configs(mirror.target, remote, keys=list(configs) or None)
        changes = {k: v for k, v in configs.items() if (current.get(k) is None or current[k].value != v)}
        removed = set(mirror.synced_configs.get(topic, {})) - set(configs)
        updates: dict[str, str | None] = {**changes, **{k: None for k in removed}}
        if updates:
            await admin.alter_configs(mirror.target, remote, updates)
            log.info("remote topic %s: configs synced from the source: %s", remote, updates)
        mirror.synced_configs[topic] = configs


async def _start_partitions(mirror: Mirror, nursery: trio.Nursery, topic: str, remote: str,
                            partitions: list[int], *, remote_missing: bool = False) -> None:
    """Start mirroring `partitions` of `topic` from their checkpointed positions, or from the log
    start. `remote_missing`: the target has no remote topic (just created): a checkpoint then
    describes records the target lost while the mirror was away, so the partition starts over."""
    forgotten: dict[int, int] = {}
    if remote_missing:
        for p in partitions:
            stored = mirror.stored_positions.pop((topic, p), None)
            if stored is not None:
                forgotten[p] = stored
                mirror.event(f"{topic}-{p}: the remote topic {remote} was missing at the target although "
                             f"source offsets up to {stored} had been copied; copying from the log start again")
                log.error("%s", mirror.events[-1].message)
    unknown = [TopicPartition(topic, p) for p in partitions if (topic, p) not in mirror.stored_positions]
    earliest = await admin.list_offsets(mirror.source, {tp: EARLIEST for tp in unknown}) if unknown else {}
    for p in partitions:
        tp = TopicPartition(topic, p)
        stored = mirror.stored_positions.get((topic, p))
        position = stored + 1 if stored is not None else earliest[tp].offset
        pm = PartitionMirror(tp, TopicPartition(remote, p), position, mirror.config.offset_lag_max,
                             mirror.config.queue_max_bytes, written_through=position - 1)
        pm.on_target_went_back = partial(target_went_back, mirror)
        if stored is None:
            pm.copied_from = position
        else:
            # After a restart, the offset syncs say what the target held: a log end below the
            # newest one's means the target lost records while the mirror was away.
            latest = mirror.syncs.latest(topic, p)
            if latest is not None and latest[0] <= stored:
                pm.min_target_end = latest[1] + 1
        mirror.partitions[tp] = pm
        # A forgotten checkpoint is overwritten at the next flush, even before anything is written.
        mirror.flushed[tp] = forgotten.get(p, pm.written_through)
        lane = mirror.lanes[(len(mirror.partitions) - 1) % len(mirror.lanes)]  # round robin
        lane.add(pm)
        nursery.start_soon(partial(pm.run_writer, mirror.target, mirror.producer, mirror._on_sync, backoff=RETRY))
        log.info("mirroring %s-%d -> %s-%d from offset %d%s", topic, p, remote, p, position,
                 " (stored position)" if stored is not None else " (log start)")


def stop_vanished(mirror: Mirror, wanted: Mapping[str, int], *, kept: str) -> None:
    """Stop copying what the source no longer has (`wanted`: its matched topics and their
    partition counts): a topic deleted or no longer matched, whose copy at the target is kept
    (`kept` says what the copy is), and partitions past a topic's count (the topic was deleted
    and created again between rounds); each said once in the status."""
    for topic in sorted(set(mirror.topics) - set(wanted)):
        remote = stop_topic(mirror, topic)
        mirror.report_handled(f"topic {topic}", f"source topic {topic} is gone (deleted, or no longer matched); "
                                                f"stopped mirroring it; the {kept} {remote} is kept")
    for tp in sorted(tp for tp in mirror.partitions if tp.topic in wanted and tp.partition >= wanted[tp.topic]):
        stop_partition(mirror, tp)
        mirror.report_handled(f"partition {tp.topic}-{tp.partition}",
                              f"source partition {tp.topic}-{tp.partition} is gone (the topic now has "
                              f"{wanted[tp.topic]} partitions); stopped mirroring it")


def stop_topic(mirror: Mirror, topic: str) -> str | None:
    """Stop every partition of `topic` and forget its synced configs (a topic created again
    under its name gets them afresh); returns its name at the target."""
    remote = mirror.topics.pop(topic, None)
    mirror.synced_configs.pop(topic, None)
    for tp in [tp for tp in mirror.partitions if tp.topic == topic]:
        stop_partition(mirror, tp)
    return remote


def stop_partition(mirror: Mirror, tp: TopicPartition) -> None:
    pm = mirror.partitions.pop(tp)
    pm.stop()
    for lane in mirror.lanes:
        lane.remove(tp)
    # Its checkpoint describes the records that are gone: a topic created again under the same
    # name starts from its own log start.
    mirror.stored_positions.pop((tp.topic, tp.partition), None)
    mirror.flushed.pop(tp, None)


# -- positions, syncs, heartbeats ----------------------------------------------------------


async def _flush_once(mirror: Mirror) -> None:
    """Write the positions that moved (to the target) and the offset syncs waiting (to the
    sync topic's cluster). Positions only ever name offsets the target acknowledged."""
    # A position that went back to "nothing written" (a re-copy from offset 0) is a tombstone,
    # so a restart does not resume from the old one.
    moved = {tp: pm.written_through for tp, pm in mirror.partitions.items()
             if pm.written_through != mirror.flushed.get(tp, -1)}
    if moved:
        records: list[tuple[bytes, bytes | None]] = []
        for tp, offset in moved.items():
            key, value = encode_position(mirror.source_alias, tp.topic, tp.partition, max(offset, 0))
            records.append((key, value if offset >= 0 else None))
        await append(mirror.target, mirror.policy.positions_topic(mirror.source_alias), records)
        mirror.flushed.update(moved)
    if mirror.pending_syncs:
        syncs = list(mirror.pending_syncs)
        await append(mirror.offset_syncs_client, mirror.offset_syncs_topic, [(s.key(), s.value()) for s in syncs])
        del mirror.pending_syncs[: len(syncs)]
        for s in syncs:
            mirror.syncs.add(s.topic, s.partition, s.upstream_offset, s.downstream_offset)


async def _final_flush(mirror: Mirror) -> None:
    """On a clean stop, checkpoint once more so a restart repeats nothing."""
    if not mirror.partitions:
        return
    with trio.move_on_after(5):
        try:
            await _flush_once(mirror)
        except (ClientError, KafkaError) as exc:
            log.warning("last checkpoint of positions failed: %s", exc)


async def heartbeat(mirror: Mirror) -> None:
    beat = Heartbeat(mirror.source_alias, mirror.target_alias, now_ms())
    with trio.fail_after(max(1.0, 5 * mirror.config.heartbeats_s)):  # the client says what timed out
        await append(mirror.target, HEARTBEATS_TOPIC, [(beat.key(), beat.value())])


# -- status --------------------------------------------------------------------------------


async def _write_status(mirror: Mirror) -> None:
    """Rewrite the status file: the snapshot is taken here, on the loop; the write (fsync,
    rename, fsync of the directory) waits on the disk in a worker thread."""
    if mirror.status_file is None:
        return
    async with mirror.status_lock:
        text = mirror.report().to_json()
        try:
            await trio.to_thread.run_sync(write_atomically, mirror.status_file, text)
        except OSError as exc:
            log.warning("cannot write the status file %s: %s", mirror.status_file, exc)


async def _status_loop(mirror: Mirror) -> None:
    last_summary = trio.current_time()
    last_records = 0
    while True:
        await trio.sleep(STATUS_INTERVAL_S)
        await _write_status(mirror)
        now = trio.current_time()
        if now - last_summary >= SUMMARY_INTERVAL_S:
            status = mirror.report()
            rate = (status.records - last_records) / (now - last_summary)
            log.info("mirror %s: %s; %d partitions, %d records (%.0f/s), lag %d, latency %s ms%s",
                     status.name, status.state, len(status.partitions), status.records, rate,
                     status.lag, status.max_latency_ms,
                     "; problems: " + "; ".join(f"{k}: {v}" for k, v in status.problems.items())
                     if status.problems else "")
            last_summary, last_records = now, status.records
