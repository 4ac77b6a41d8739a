"""What both of the mirror's modes run on: `Mirror`, the state and loops they share.

mirror/driver.py starts one mirror in the mode its config names; each mode is a kind of Mirror
with its own state and its own `run` (mirror/mm2.py: MirrorMaker 2's conventions;
mirror/link.py: read-only mirror topics with the source's offsets), as Kafka's connect/mirror
has one task class per job on one runtime. Shared here, whatever the mode:

- the clients and the fetch lanes reading the source (mirror/fetcher.py), and the partitions
  being copied, each on one lane;
- retrying with backoff, saying what fails in the status until it works again (`retrying`,
  `every`);
- topic sync: a remote topic created, or its partitions and configs brought in line with the
  source's (`sync_topic`);
- stopping what vanished at the source (`stop_vanished`, `stop_topic`);
- heartbeats to the target (`heartbeat`);
- topic ACL sync (mirror/acl_sync.py), for the topics a mode selects (`target_topic`);
- the status: what `report` shows, rewritten to the status file every second (`status_loop`).

Nothing here imports a mode: a mode adds to a Mirror through the few methods it overrides
(`run`, `on_clean_stop`, `on_idle`, `stop_partition`, `not_mirrored`, `promoted_topics`,
`topic_states`, `target_topic`).
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from broker.atomic_file import write_atomically
from broker.client import Backoff, Client, ClientError, KafkaError, RequestTimeout, TopicPartition, admin
from broker.client.admin import NewTopic
from broker.clock import now_ms
from broker.progress import bytes_text, duration_text, eta_s
from broker.retry import retry, worth_reporting
from mirror.acl_sync import TopicAclSync
from mirror.config import EXCLUDED_CONFIGS, MirrorConfig
from mirror.fetcher import FetchLane, FetchSettings
from mirror.formats import Heartbeat
from mirror.metrics import CheckpointLatencies
from mirror.naming import HEARTBEATS_TOPIC, ReplicationPolicy
from mirror.partition import PartitionMirror
from mirror.status import ClusterRef, MirrorEvent, MirrorStatus, PartitionStatus, TopicState
from mirror.topics import append

__all__ = ["CLUSTER_WAIT_ATTEMPT_S", "RETRY", "Mirror", "heartbeat", "stop_topic", "stop_vanished", "sync_topic"]

log = logging.getLogger(__name__)

RETRY = Backoff(initial_s=0.2, max_s=10.0)
STATUS_INTERVAL_S = 1.0
SUMMARY_INTERVAL_S = 30.0
#: Until the copy first catches up with the source, a catch-up line this often (records left,
#: rate, ETA): a new mirror's backlog can take long, and a log should show it moving.
CATCH_UP_INTERVAL_S = 5.0
# A problem the mirror has dealt with (a source topic or partition gone, so no longer mirrored)
# stays in the status this long after it was reported, then only in `events` and the log.
HANDLED_PROBLEM_S = 60.0
EVENTS_KEPT = 50
# One attempt of the wait for a cluster at start (the client's connect timeout): a cluster that is
# down shows in the status as a problem within seconds, instead of once the client has retried
# its refused connections for a whole request timeout (30 s); the wait goes on regardless.
CLUSTER_WAIT_ATTEMPT_S = 10.0


@dataclass
class Mirror:
    """A running mirror: its settings, clients and partitions; what the status shows. A mode
    (mirror/mm2.py, mirror/link.py) is a kind of Mirror that adds its own state and `run`."""

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
    synced_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    state: str = "starting"
    problems: dict[str, str] = field(default_factory=dict)  # loop -> its last error
    # Problems already dealt with: shown until their time (time.monotonic()) passes.
    handled: dict[str, tuple[str, float]] = field(default_factory=dict)
    events: deque[MirrorEvent] = field(default_factory=lambda: deque(maxlen=EVENTS_KEPT))
    nursery: trio.Nursery | None = None  # where the mode's partition writers (and re-copies) run
    started_ms: int = field(default_factory=now_ms)
    source_reached_ms: int | None = None  # when fetches from the source last answered (the status's)
    group_checkpoints: int = 0
    checkpoint_latencies: CheckpointLatencies = field(default_factory=CheckpointLatencies)  # mm2 mode (metrics)
    stop_requested: trio.Event = field(default_factory=trio.Event)
    # Set once a topic discovery round has gone through the source's topics: topic ACL sync
    # starts then, as MM2's syncs ACLs once its topics are created.
    topics_listed: trio.Event = field(default_factory=trio.Event)
    # One status file write at a time: the every-second one and the last one on stop share a
    # temporary file name, and each writes in a worker thread.
    status_lock: trio.Lock = field(default_factory=trio.Lock)

    def __post_init__(self) -> None:
        self.policy = ReplicationPolicy(identity=self.config.naming == "identity", separator=self.config.separator)
        settings = FetchSettings(self.config.fetch_max_wait_ms, self.config.fetch_max_bytes,
                                 self.config.partition_fetch_max_bytes)
        self.lanes = [FetchLane(client, settings, self.on_idle) for client in self.lane_clients or [self.source]]

    # -- what a mode adds ------------------------------------------------------------------

    async def run(self) -> None:
        """The mode's work, until cancelled: wait for both clusters, then copy. Raises
        MirrorRefused when the mirror cannot run as configured."""
        raise NotImplementedError(f"{type(self).__name__} does not say how it runs")

    async def on_clean_stop(self) -> None:
        """Called once on a clean stop of a running mirror, before the last status write."""

    def on_idle(self, pm: PartitionMirror) -> None:
        """A fetch of `pm` found nothing new (the fetch lanes call it)."""

    def not_mirrored(self) -> dict[str, str]:
        """Source topics the mirror does not write, with why (the status's `not_mirrored`)."""
        return {}

    def promoted_topics(self) -> list[str]:
        """Topics promoted at the target, so no longer copied (the status's `promoted`)."""
        return []

    def topic_states(self, source_problem: str | None) -> dict[str, TopicState]:
        """Each mirror topic's link state (the status's `topic_states`; link mode only), given
        what the fetches last said of the source (None: they reached it)."""
        return {}

    def target_topic(self, topic: str) -> str | None:
        """The name source topic `topic` has at the target when topic ACL sync copies its ACLs
        (mm2: a name the topic filters select; link: a mirror topic this mirror writes), else None."""
        return None

    def stop_partition(self, tp: TopicPartition) -> None:
        """Stop copying `tp`: its writer returns and its lane no longer fetches it."""
        pm = self.partitions.pop(tp)
        pm.stop()
        for lane in self.lanes:
            lane.remove(tp)

    # -- running ---------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop cleanly: `run_mirror` (mirror/driver.py) checkpoints what the mode keeps and returns."""
        self.stop_requested.set()

    def start_fetching(self, nursery: trio.Nursery) -> None:
        """Run the fetch lanes, the heartbeats and topic ACL sync in `nursery`, where the partition
        writers run too."""
        self.nursery = nursery
        for lane in self.lanes:
            nursery.start_soon(lane.run)
        if self.config.heartbeats_s > 0:
            nursery.start_soon(self.every, "heartbeats", self.config.heartbeats_s, lambda: heartbeat(self))
        if self.config.sync_topic_acls:
            nursery.start_soon(TopicAclSync(self.source, self.target, self.source_alias, self.target_alias,
                                            self.config.sync_topic_acls_s, self.target_topic, self.problems,
                                            self.topics_listed).run)

    def add_partition(self, pm: PartitionMirror) -> None:
        """Copy `pm` from now on: fetched by the lanes in turn (round robin)."""
        self.partitions[pm.source] = pm
        self.lanes[(len(self.partitions) - 1) % len(self.lanes)].add(pm)

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
                       max_pause_s: float = math.inf, attempt_s: float = math.inf) -> None:
        """Run `step` until it succeeds, with backoff (at most `max_pause_s`) between attempts,
        each attempt given at most `attempt_s` (then a RequestTimeout, retried like any client
        error); a failure shows in the status under `what` until then."""
        failures = 0

        def failed(exc: Exception, count: int) -> None:
            nonlocal failures
            failures = count
            self.problems[what] = str(exc)
            if worth_reporting(count):
                log.warning("%s failed (%s); attempt %d, retrying with backoff", what, exc, count)

        async def attempt() -> object:
            try:
                with trio.fail_after(attempt_s):  # a client call cut short raises its RequestTimeout
                    return await step()
            except trio.TooSlowError:  # the bound passed between the step's calls
                raise RequestTimeout(f"{what}: not done within {attempt_s:.3g}s") from None

        await retry(attempt, retriable=(ClientError, KafkaError), backoff=RETRY, on_failure=failed,
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

    # -- status ----------------------------------------------------------------------------

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
        # The source is unreachable when no lane that fetches reaches it. One lane failing
        # while others copy is a broker of a multi-broker source down (a leader that died, until
        # another is elected): its partitions' own errors say so, the cluster answers.
        fetching = [lane for lane in self.lanes if lane.partitions]
        unreachable = [lane.last_error for lane in fetching if lane.last_error]
        if unreachable and len(unreachable) == len(fetching):
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
            not_mirrored=dict(sorted(self.not_mirrored().items())),
            lag=sum(p.lag for p in partitions),
            records=sum(p.records for p in partitions),
            max_latency_ms=max((pm.latency_ms for pm in self.partitions.values() if pm.latency_ms is not None),
                               default=None),
            group_checkpoints=self.group_checkpoints,
            problems=problems,
            source_reached_ms=self.source_reached_ms,
            promoted=sorted(self.promoted_topics()),
            topic_states=self.topic_states(problems.get("source")),
            partitions=partitions,
            events=list(self.events),
        )

    def status(self) -> dict[str, Any]:
        """:meth:`report` as plain data, by the status file's field names."""
        return self.report().model_dump()

    async def write_status(self) -> None:
        """Rewrite the status file: the snapshot is taken here, on the loop; the write (fsync,
        rename, fsync of the directory) waits on the disk in a worker thread."""
        if self.status_file is None:
            return
        async with self.status_lock:
            text = self.report().to_json()
            try:
                await trio.to_thread.run_sync(write_atomically, self.status_file, text)
            except OSError as exc:
                log.warning("cannot write the status file %s: %s", self.status_file, exc)

    async def status_loop(self) -> None:
        """Rewrite the status file every STATUS_INTERVAL_S and log a summary every
        SUMMARY_INTERVAL_S, until cancelled; until the copy first caught up, a catch-up line
        every CATCH_UP_INTERVAL_S."""
        last_summary = started = last_catch_up = trio.current_time()
        last_records = catch_up_records = 0
        caught_up = False
        while True:
            await trio.sleep(STATUS_INTERVAL_S)
            await self.write_status()
            now = trio.current_time()
            if not caught_up and now - last_catch_up >= CATCH_UP_INTERVAL_S:
                status = self.report()
                line, caught_up = catch_up_line(status, (status.records - catch_up_records) / (now - last_catch_up),
                                                now - started)
                if line is not None:
                    log.info("%s", line)
                last_catch_up, catch_up_records = now, status.records
            if now - last_summary >= SUMMARY_INTERVAL_S:
                status = self.report()
                rate = (status.records - last_records) / (now - last_summary)
                log.info("mirror %s: %s; %d partitions, %d records (%.0f/s), lag %d, latency %s ms%s",
                         status.name, status.state, len(status.partitions), status.records, rate,
                         status.lag, status.max_latency_ms,
                         "; problems: " + "; ".join(f"{k}: {v}" for k, v in status.problems.items())
                         if status.problems else "")
                last_summary, last_records = now, status.records


def catch_up_line(status: MirrorStatus, rate: float, elapsed_s: float) -> tuple[str | None, bool]:
    """The initial catch-up's log line and whether the copy has caught up: None while nothing
    is known yet (no partition, the source not reached, a partition not fetched), `caught up` once the lag is 0, else
    the records left, the bytes copied so far, the copy rate and the ETA at that rate ('?' while the rate is 0)."""
    copied = bytes_text(sum(p.bytes for p in status.partitions))
    if (not status.partitions or status.source_reached_ms is None
            or any(p.source_end < 0 for p in status.partitions)):  # a partition not fetched yet
        return None, False
    if status.lag == 0:
        return (f"mirror {status.name}: caught up with the source, {len(status.partitions)} partitions, "
                f"{status.records} records ({copied}) copied in {elapsed_s:.0f} s"), True
    return (f"mirror {status.name}: catching up: {status.lag} records left on {len(status.partitions)} partitions, "
            f"{copied} copied, {rate:.0f} records/s, ETA {duration_text(eta_s(status.lag, rate))}"), False


# -- topics ------------------------------------------------------------------------------


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
        mirror.stop_partition(tp)
        mirror.report_handled(f"partition {tp.topic}-{tp.partition}",
                              f"source partition {tp.topic}-{tp.partition} is gone (the topic now has "
                              f"{wanted[tp.topic]} partitions); stopped mirroring it")


def stop_topic(mirror: Mirror, topic: str) -> str | None:
    """Stop every partition of `topic` and forget its synced configs (a topic created again
    under its name gets them afresh); returns its name at the target."""
    remote = mirror.topics.pop(topic, None)
    mirror.synced_configs.pop(topic, None)
    for tp in [tp for tp in mirror.partitions if tp.topic == topic]:
        mirror.stop_partition(tp)
    return remote


# -- heartbeats --------------------------------------------------------------------------


async def heartbeat(mirror: Mirror) -> None:
    """Write one heartbeat (MM2's format) to the target's `heartbeats` topic."""
    beat = Heartbeat(mirror.source_alias, mirror.target_alias, now_ms())
    with trio.fail_after(max(1.0, 5 * mirror.config.heartbeats_s)):  # the client says what timed out
        await append(mirror.target, HEARTBEATS_TOPIC, [(beat.key(), beat.value())])
