"""mm2 mode: consumer to producer between any two Kafka-compatible clusters, with MirrorMaker 2's
conventions (remote topics `<source>.<topic>`, or identity naming; its internal topics and record
formats).

What this mode adds to the runtime (mirror/runtime.py), loop by loop, as MM2 spreads them over
three connectors:

- one writer per partition (mirror/partition.py): batches re-stamped with the mirror's
  idempotent producer id, whose renewal runs here;
- topic discovery and config sync, with re-copies of what the target lost (mirror/recopy.py);
- position checkpoints (`mm2-offsets.<source>.internal` on the target), from which a restart
  resumes, and offset syncs (`mm2-offset-syncs.<other>.internal`);
- consumer-group checkpoints and offset sync (mirror/groups.py).

Positions only ever name offsets the target acknowledged: a crash may repeat what was written
since the last checkpoint, never skip it; a clean stop checkpoints once more.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import partial

import trio

from broker.client import Client, ClientError, KafkaError, TopicPartition, admin, produce_batches
from broker.client.admin import EARLIEST
from broker.client.produce import init_idempotent_producer
from broker.client.transactions import init_transactional_producer
from broker.clock import now_ms
from broker.protocol.records import Record, build_batch
from mirror.config import INTERNAL_TOPICS
from mirror.exactly_once import TransactionGate, transactional_id
from mirror.formats import OffsetSync, encode_position, fold_positions
from mirror.groups import GroupMirroring, run_group_checkpoints
from mirror.naming import HEARTBEATS_TOPIC
from mirror.offset_sync import SyncStore
from mirror.partition import PartitionMirror, ProducerIdentity
from mirror.recopy import check_target_ends, remote_topic_missing, target_went_back
from mirror.runtime import CLUSTER_WAIT_ATTEMPT_S, RETRY, Mirror, stop_vanished, sync_topic
from mirror.topics import COMPACTED, append, ensure_topic, read_whole_topic

__all__ = ["Mm2Mirror"]

log = logging.getLogger(__name__)


@dataclass
class Mm2Mirror(Mirror):
    """A mirror in mm2 mode: the runtime's state plus its producer, positions and offset syncs."""

    producer: ProducerIdentity = field(default_factory=ProducerIdentity)
    syncs: SyncStore = field(default_factory=SyncStore)
    pending_syncs: list[OffsetSync] = field(default_factory=list)
    stored_positions: dict[tuple[str, int], int] = field(default_factory=dict)
    flushed: dict[TopicPartition, int] = field(default_factory=dict)  # exactly-once: committed
    transactions_committed: int = 0

    @property
    def exactly_once(self) -> bool:
        return self.config.exactly_once_support == "required"

    async def run(self) -> None:
        await _prepare(self)
        await _run(self)

    async def on_clean_stop(self) -> None:
        await _final_flush(self)

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

    def target_topic(self, topic: str) -> str | None:
        return self.policy.remote_topic(self.source_alias, topic) if self.should_mirror(topic) else None

    def stop_partition(self, tp: TopicPartition) -> None:
        super().stop_partition(tp)
        # Its checkpoint describes the records that are gone: a topic created again under the same
        # name starts from its own log start.
        self.stored_positions.pop((tp.topic, tp.partition), None)
        self.flushed.pop(tp, None)

    # -- offset syncs --------------------------------------------------------------------

    def on_sync(self, pm: PartitionMirror, upstream: int, downstream: int) -> None:
        self.pending_syncs.append(OffsetSync(pm.source.topic, pm.source.partition, upstream, downstream))
        # A long outage of the sync topic must not grow memory without bound: the newest syncs
        # are the ones translation needs.
        del self.pending_syncs[:-10_000]

    def on_idle(self, pm: PartitionMirror) -> None:
        if pm.queued_bytes == 0:
            sync = pm.emitter.on_idle()
            if sync is not None:
                self.on_sync(pm, *sync)

    # -- consumer groups -----------------------------------------------------------------

    def groups_view(self) -> GroupMirroring:
        """What consumer-group checkpointing needs of this mirror, and nothing else."""
        config = self.config
        return GroupMirroring(
            source=self.source, target=self.target, target_alias=self.target_alias,
            checkpoints_topic=self.policy.checkpoints_topic(self.source_alias), groups=config.groups,
            checkpoints_s=config.checkpoints_s, sync_offsets=config.sync_group_offsets,
            sync_offsets_s=config.sync_group_offsets_s, remote_topic=self.topics.get,
            translate=self.syncs.translate, every=self.every, written=self._count_group_checkpoints,
            latencies=self.checkpoint_latencies,
        )

    def _count_group_checkpoints(self, count: int) -> None:
        self.group_checkpoints += count


async def _prepare(mirror: Mm2Mirror) -> None:
    config = mirror.config
    rf = config.replication_factor
    mirror.state = "waiting for the target"

    async def target_topics() -> None:
        for topic in (HEARTBEATS_TOPIC, mirror.policy.checkpoints_topic(mirror.source_alias),
                      mirror.policy.positions_topic(mirror.source_alias)):
            await ensure_topic(mirror.target, topic, replication_factor=rf, configs=COMPACTED)

    await mirror.retrying(f"target {mirror.target_alias}", target_topics, attempt_s=CLUSTER_WAIT_ATTEMPT_S)

    if mirror.exactly_once:
        # First the new epoch, which aborts what a crashed predecessor left open: the positions
        # read next are then the committed ones.
        mirror.producer.gate = TransactionGate()
        await mirror.retrying("transactional producer at the target", lambda: _renew_producer(mirror))

    async def load_positions() -> None:
        mirror.stored_positions = await _read_positions(mirror)

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
    if not mirror.exactly_once:
        await mirror.retrying("producer id at the target", lambda: _renew_producer(mirror))
    mirror.state = "running"
    log.info("mirror %s running: %s (%s) -> %s (%s); %d stored positions", config.display_name,
             mirror.source_alias, config.source.bootstrap, mirror.target_alias, config.target.bootstrap,
             len(mirror.stored_positions))


async def _read_positions(mirror: Mm2Mirror) -> dict[tuple[str, int], int]:
    records = await read_whole_topic(mirror.target, mirror.policy.positions_topic(mirror.source_alias),
                                     committed_only=mirror.exactly_once)
    return fold_positions(records, mirror.source_alias)


async def _renew_producer(mirror: Mm2Mirror) -> None:
    gate = mirror.producer.gate
    if gate is None:
        producer = await init_idempotent_producer(mirror.target)
        mirror.producer.set(producer.producer_id, producer.producer_epoch)
        return
    async with gate.lock:
        txn_id = transactional_id(mirror.config.display_name, mirror.source_alias, mirror.target_alias)
        transactional = await init_transactional_producer(mirror.target, txn_id)
        if mirror.partitions:
            # The open transaction is gone (aborted, or completed if its commit was decided):
            # every partition goes back to the positions the target holds, read_committed.
            committed = await _read_positions(mirror)
            for tp, pm in mirror.partitions.items():
                position = committed.get((tp.topic, tp.partition), mirror.flushed.get(tp, pm.written_through))
                pm.rewind(position + 1)
                pm.written_through = position
                pm.expected_next_downstream = -1
                mirror.flushed[tp] = position
        gate.renewed(transactional)
        mirror.producer.set(transactional.producer_id, transactional.producer_epoch)


async def _run(mirror: Mm2Mirror) -> None:
    async with trio.open_nursery() as nursery:
        mirror.start_fetching(nursery)
        nursery.start_soon(_producer_renewal_loop, mirror)
        nursery.start_soon(mirror.every, "checkpointing positions", mirror.config.flush_interval_ms / 1000,
                           partial(_flush_once, mirror))
        if mirror.config.checkpoints_s > 0:
            nursery.start_soon(run_group_checkpoints, mirror.groups_view())
        await mirror.every("topic discovery", mirror.config.refresh_topics_s, partial(_discover, mirror, nursery))


async def _producer_renewal_loop(mirror: Mm2Mirror) -> None:
    while True:
        await mirror.producer.renew_requested.wait()
        await mirror.retrying("new producer id at the target", lambda: _renew_producer(mirror))


# -- topics ------------------------------------------------------------------------------


async def _discover(mirror: Mm2Mirror, nursery: trio.Nursery) -> None:
    source_topics = await admin.list_topics(mirror.source)
    wanted = {t: n for t, n in source_topics.items() if mirror.should_mirror(t)}
    stop_vanished(mirror, wanted, kept="remote topic")
    target_topics = await admin.list_topics(mirror.target, include_internal=True)  # one request per round
    for topic, count in sorted(wanted.items()):
        remote = mirror.policy.remote_topic(mirror.source_alias, topic)
        remote_count = target_topics.get(remote)
        if remote_count is None and topic in mirror.topics:
            # Before it exists again: nothing written ahead.
            remote_topic_missing(mirror, mirror.syncs, topic, remote)
        await sync_topic(mirror, topic, remote, count, remote_count)
        mirror.topics[topic] = remote
        mirror.problems.pop(f"topic {topic}", None)
        mirror.handled.pop(f"topic {topic}", None)
        new = [p for p in range(count) if TopicPartition(topic, p) not in mirror.partitions]
        if new:
            await _start_partitions(mirror, nursery, topic, remote, new, remote_missing=remote_count is None)
    mirror.topics_listed.set()
    await check_target_ends(mirror, mirror.syncs)


async def _start_partitions(mirror: Mm2Mirror, nursery: trio.Nursery, topic: str, remote: str,
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
        pm.on_target_went_back = partial(target_went_back, mirror, mirror.syncs)
        if stored is None:
            pm.copied_from = position
        else:
            # After a restart, the offset syncs say what the target held: a log end below the
            # newest one's means the target lost records while the mirror was away.
            latest = mirror.syncs.latest(topic, p)
            if latest is not None and latest[0] <= stored:
                pm.min_target_end = latest[1] + 1
        mirror.add_partition(pm)
        # A forgotten checkpoint is overwritten at the next flush, even before anything is written.
        mirror.flushed[tp] = forgotten.get(p, pm.written_through)
        nursery.start_soon(partial(pm.run_writer, mirror.target, mirror.producer, mirror.on_sync, backoff=RETRY))
        log.info("mirroring %s-%d -> %s-%d from offset %d%s", topic, p, remote, p, position,
                 " (stored position)" if stored is not None else " (log start)")


# -- positions and offset syncs ------------------------------------------------------------


async def _flush_once(mirror: Mm2Mirror) -> None:
    """Write the positions that moved (to the target) and the offset syncs waiting (to the
    sync topic's cluster). Positions only ever name offsets the target acknowledged."""
    # A position that went back to "nothing written" (a re-copy from offset 0) is a tombstone,
    # so a restart does not resume from the old one.
    if mirror.producer.gate is not None:
        await _commit(mirror, mirror.producer.gate)
        moved = {}
    else:
        moved = {tp: pm.written_through for tp, pm in mirror.partitions.items()
                 if pm.written_through != mirror.flushed.get(tp, -1)}
    if moved:
        await append(mirror.target, mirror.policy.positions_topic(mirror.source_alias),
                     _position_records(mirror, moved))
        mirror.flushed.update(moved)
    if mirror.pending_syncs:
        syncs = list(mirror.pending_syncs)
        await append(mirror.offset_syncs_client, mirror.offset_syncs_topic, [(s.key(), s.value()) for s in syncs])
        del mirror.pending_syncs[: len(syncs)]
        for s in syncs:
            mirror.syncs.add(s.topic, s.partition, s.upstream_offset, s.downstream_offset)


def _position_records(mirror: Mm2Mirror, moved: dict[TopicPartition, int]) -> list[tuple[bytes, bytes | None]]:
    records: list[tuple[bytes, bytes | None]] = []
    for tp, offset in moved.items():
        key, value = encode_position(mirror.source_alias, tp.topic, tp.partition, max(offset, 0))
        records.append((key, value if offset >= 0 else None))
    return records


async def _commit(mirror: Mm2Mirror, gate: TransactionGate) -> None:
    """Exactly-once mode: the positions the writes reached, into the same transaction, and commit.
    On any failure the transaction's outcome is the target's to say: a new epoch, and every
    partition back to the positions it committed."""
    async with gate.closed(), gate.lock:
        producer = gate.producer
        moved = {tp: pm.written_through for tp, pm in mirror.partitions.items()
                 if pm.written_through != mirror.flushed.get(tp, -1)}
        if producer is None or not (moved or gate.added):
            return
        try:
            if moved:
                tp = TopicPartition(mirror.policy.positions_topic(mirror.source_alias), 0)
                if tp not in gate.added:
                    await producer.add_partitions([tp])
                    gate.added.add(tp)
                records = _position_records(mirror, moved)
                batch = build_batch([Record(k, v) for k, v in records], base_timestamp=now_ms(),
                                    producer_id=producer.producer_id, producer_epoch=producer.producer_epoch,
                                    base_sequence=gate.positions_sequence, is_transactional=True)
                result = (await produce_batches(mirror.target, {tp: batch}, acks=-1,
                                                transactional_id=producer.transactional_id))[tp]
                result.raise_for_error()
                gate.positions_sequence += len(records)
            await producer.end(commit=True)
        except (ClientError, KafkaError):
            mirror.producer.renew_requested.set()
            raise
        gate.added.clear()
        mirror.flushed.update(moved)
        mirror.transactions_committed += 1


async def _final_flush(mirror: Mm2Mirror) -> None:
    """On a clean stop, checkpoint once more so a restart repeats nothing."""
    if not mirror.partitions:
        return
    with trio.move_on_after(5):
        try:
            await _flush_once(mirror)
        except (ClientError, KafkaError) as exc:
            log.warning("last checkpoint of positions failed: %s", exc)
