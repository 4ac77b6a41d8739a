"""A one-node cluster whose metadata lives in the data dir.

This is the embedded default (development, examples, quick tests): no ZooKeeper, one broker that
is its own controller, leader of every partition and the whole ISR. Metadata lives in the first log
dir as KRaft keeps it: a log of changes (``cluster-metadata.log``) replayed at start on a snapshot
(``cluster-metadata.json``), formats and damage in ``metadata_file``. Each change is one record,
acknowledged once fsynced; changes made meanwhile share one write and one fsync, in a worker thread,
and the log is folded into the snapshot as it grows (``metadata_log``), so N changes cost O(N)
bytes on disk, not one rewrite of every topic each.
Partition counts are bounded by ``max.broker.partitions`` and ``max.partitions``. ``meta.properties`` is written
as Kafka writes it, so the data dir carries its cluster id and broker id.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence

import trio

from broker.config import BrokerConfig, StartupError
from broker.controller import controller_metrics, metadata_file
from broker.controller.assignment import check_partition_limits, validate_assignment
from broker.controller.base import Controller, MetadataListener, NewTopic, PartitionBudget
from broker.controller.meta_properties import META_PROPERTIES, read_meta_properties, write_meta_properties
from broker.controller.metadata_file import (
    SNAPSHOT_FILE,
    ConfigRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from broker.controller.metadata_log import MetadataLog, PendingChange
from broker.controller.model import (
    BrokerInfo,
    PartitionInfo,
    TopicInfo,
    is_internal_topic,
    validate_topic_name,
)
from broker.ids import random_uuid, random_uuid_text
from broker.protocol.errors import ErrorCode, KafkaError
from broker.storage.topic_configs import validate_topic_configs

__all__ = ["StandaloneController", "METADATA_FILE"]

log = logging.getLogger(__name__)

METADATA_FILE = SNAPSHOT_FILE
# Producer ids are handed out from blocks; only the end of the current block is persisted, so a
# restart skips the rest of a block but never hands out an id twice (as Kafka's blocks do).
PRODUCER_ID_BLOCK = 1000


def new_cluster_id() -> str:
    """A cluster id as Kafka makes them: a random UUID in URL-safe base64 without padding."""
    return random_uuid_text()


class StandaloneController(Controller):
    """Controller of a single-broker cluster; see the module docstring."""

    def __init__(self, config: BrokerConfig, listener: MetadataListener | None = None) -> None:
        self._config = config
        self._dir = config.log_dirs[0]
        self._dir.mkdir(parents=True, exist_ok=True)
        self._listener = listener
        self._local = BrokerInfo(config.broker_id, config.advertised_listeners, config.rack)
        self._cluster_id = self._load_meta_properties()
        self._log = self._load()
        # Start after the last block that may have been handed out before the restart.
        self._next_producer_id = self._log.image.producer_id_block_end
        self._block_in_flight: trio.Event | None = None
        controller_metrics.serving(self, self._leaders)  # a one-broker cluster's broker is its controller

    def set_listener(self, listener: MetadataListener) -> None:
        self._listener = listener

    # -- reads ---------------------------------------------------------------------------

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    @property
    def controller_id(self) -> int:
        return self._config.broker_id

    def brokers(self) -> Sequence[BrokerInfo]:
        return (self._local,)

    def register_local_broker(self, info: BrokerInfo) -> None:
        """Publish this broker's advertised endpoints once its listeners are bound (port 0
        becomes a real port only then)."""
        self._local = info

    def topics(self) -> Mapping[str, TopicInfo]:
        return self._log.image.topics

    def _leaders(self) -> tuple[int, int, int, int]:
        """(topics, partitions, without a leader, not led by their preferred replica), for the
        controller's metrics (read from the metrics thread: the topics are copied in one step)."""
        topics = list(self._log.image.topics.values())
        partitions = offline = imbalanced = 0
        for topic in topics:
            for p in topic.partitions:
                partitions += 1
                offline += p.leader == controller_metrics.NO_LEADER
                imbalanced += bool(p.replicas) and p.leader != p.replicas[0]
        return len(topics), partitions, offline, imbalanced

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self._log.image.topic_by_id(topic_id)

    def zookeeper(self) -> None:
        """Standalone: no ZooKeeper."""
        return None

    def partition_count(self) -> int:
        """Partitions of every topic; in a one-broker cluster each has a replica here."""
        return self._log.image.partition_count

    @property
    def metadata_log(self) -> MetadataLog:
        """The durable metadata (statistics for tests and the bench)."""
        return self._log

    # -- changes -------------------------------------------------------------------------

    async def create_topics(
        self,
        topics: Sequence[NewTopic],
        *,
        validate_only: bool = False,
        deadline: float | None = None,  # changes are made before this returns: nothing to wait for
        budget: PartitionBudget | None = None,
    ) -> list[TopicInfo | KafkaError]:
        results: list[TopicInfo | KafkaError] = []
        queued: list[tuple[int, TopicInfo, PendingChange]] = []
        for new in topics:
            try:
                if budget is not None and new.num_partitions >= 1:
                    budget.take(new.num_partitions)
                topic = self._new_topic(new)
                if not validate_only:
                    # In the image at once, so the next topic of the request (and a concurrent
                    # request) is decided with this one counted and its name taken.
                    queued.append((len(results), topic, self._log.append(TopicRecord(topic))))
                if budget is not None:
                    budget.commit(new.num_partitions)
                results.append(topic)
            except KafkaError as exc:
                results.append(exc)
        durable: list[TopicInfo] = []
        with trio.CancelScope(shield=True):  # every change appended is waited for: one write for them all
            for index, topic, change in queued:
                try:
                    await self._log.wait_durable(change)
                    durable.append(topic)
                except KafkaError as exc:
                    results[index] = exc
        if self._listener is not None and durable:
            listener = self._listener
            async with trio.open_nursery() as nursery:  # the logs of each, in worker threads, together
                for topic in durable:
                    nursery.start_soon(listener.on_topic_changed, topic)
        return results

    def _new_topic(self, new: NewTopic) -> TopicInfo:
        """The topic ``new`` asks for, checked against the image as it is now (Kafka's checks and
        messages). Raises KafkaError."""
        name, num_partitions, replication_factor = new.name, new.num_partitions, new.replication_factor
        if new.assignments:
            # One broker: every replica must be this one (Kafka's checks and messages).
            validate_assignment(new.assignments, [self._config.broker_id])
            num_partitions, replication_factor = len(new.assignments), len(next(iter(new.assignments.values())))
        problem = validate_topic_name(name)
        if problem is not None:
            raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
        if name in self.topics():
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        collision = self._log.image.colliding(name)
        if collision is not None:
            raise KafkaError(
                ErrorCode.INVALID_TOPIC_EXCEPTION,
                f"Topic '{name}' collides with existing topic '{collision}' ('.' and '_' "
                "are the same in metric names)",
            )
        if num_partitions < 1:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
        if replication_factor < 1:
            raise KafkaError(
                ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0."
            )
        if replication_factor > len(self.brokers()):
            raise KafkaError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"Replication factor: {replication_factor} larger than available brokers: "
                f"{len(self.brokers())}.",
            )
        # Before anything is built: a refused count costs nothing.
        self._check_partition_limits(num_partitions * replication_factor, num_partitions)
        return TopicInfo(
            name=name,
            topic_id=random_uuid(),
            partitions=tuple(self._new_partition(i) for i in range(num_partitions)),
            configs=dict(new.configs),
            is_internal=is_internal_topic(name),
        )

    async def allocate_producer_id(self) -> int:
        """A producer id never handed out before by this cluster, across restarts: one from a
        block whose end is on disk (a concurrent caller waits for the block being written)."""
        while self._block_in_flight is not None:
            await self._block_in_flight.wait()
        if self._next_producer_id >= self._log.image.producer_id_block_end:
            written = self._block_in_flight = trio.Event()
            try:
                await self._log.commit(ProducerIdsRecord(self._next_producer_id + PRODUCER_ID_BLOCK))
            finally:
                self._block_in_flight = None
                written.set()
        producer_id = self._next_producer_id
        self._next_producer_id += 1
        return producer_id

    async def delete_topic(self, name: str, *, deadline: float | None = None) -> None:
        topic = self._require(name)
        await self._log.commit(RemoveTopicRecord(name, topic.topic_id))
        if self._listener is not None:
            await self._listener.on_topic_deleted(topic)

    async def create_partitions(self, name: str, total: int, *, validate_only: bool = False,
                                assignments: Sequence[Sequence[int]] | None = None,
                                deadline: float | None = None) -> None:
        topic = self._require(name)
        current = len(topic.partitions)
        if assignments:
            if len(assignments) != total - current:
                raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"Increasing the number of partitions by {total - current} but "
                                 f"{len(assignments)} assignments provided.")
            validate_assignment({current + i: r for i, r in enumerate(assignments)}, [self._config.broker_id],
                                expected_replication=len(topic.partitions[0].replicas) if topic.partitions else None,
                                first_partition=current)
        if total <= current:
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS,
                f"Topic currently has {current} partitions, {total} would not be an increase.",
            )
        replicas = len(topic.partitions[0].replicas) if topic.partitions else 1
        self._check_partition_limits((total - current) * replicas, total - current)
        if validate_only:
            return
        added = tuple(self._new_partition(i) for i in range(current, total))
        await self._log.commit(PartitionRecord(name, topic.topic_id, added))
        await self._changed(topic)

    async def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        topic = self._require(name)
        await self._log.commit(ConfigRecord(name, topic.topic_id, dict(configs)))
        await self._changed(topic)

    async def raise_leader_epochs(self, wanted: Mapping[tuple[str, int], int]
                                  ) -> dict[tuple[str, int], tuple[ErrorCode, str | None, int]]:
        """See Controller: each raise is a PartitionChangeRecord, applied to the image at once (a
        concurrent request sees it) and durable before the topic's partitions take the new epoch."""
        results: dict[tuple[str, int], tuple[ErrorCode, str | None, int]] = {}
        pending: list[tuple[tuple[str, int], PendingChange]] = []
        changed: dict[str, TopicInfo] = {}
        for (name, p), source_epoch in wanted.items():
            topic = self.topics().get(name)
            if topic is None or not 0 <= p < len(topic.partitions):
                results[(name, p)] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None, -1)
                continue
            current = topic.partitions[p].leader_epoch
            if current >= source_epoch:
                results[(name, p)] = (ErrorCode.NONE, None, current)
                continue
            raised = max(current + 1, source_epoch)
            try:
                pending.append(((name, p), self._log.append(PartitionChangeRecord(name, topic.topic_id, p, raised))))
            except KafkaError as exc:
                results[(name, p)] = (exc.code, exc.message or None, current)
                continue
            log.info("%s-%d: leader epoch raised from %d to %d, to the link source's %d", name, p, current, raised,
                     source_epoch)
            results[(name, p)] = (ErrorCode.NONE, None, raised)
            changed[name] = topic
        for tp, change in pending:
            try:
                await self._log.wait_durable(change)
            except KafkaError as exc:
                results[tp] = (exc.code, exc.message or None, -1)
        for topic in changed.values():
            await self._changed(topic)
        return results

    # -- internals -----------------------------------------------------------------------

    async def _changed(self, topic: TopicInfo) -> None:
        """Tell the listener about ``topic`` as it is now that a change to it is durable; nothing
        when a concurrent request deleted it meanwhile (its deletion told the listener)."""
        now = self.topics().get(topic.name)
        if self._listener is not None and now is not None and now.topic_id == topic.topic_id:
            await self._listener.on_topic_changed(now)

    def _check_partition_limits(self, new_replicas: int, new_partitions: int) -> None:
        """max.broker.partitions and max.partitions (KIP-578): one broker holds every partition."""
        me, existing = self._config.broker_id, self.partition_count()
        check_partition_limits(self._config, {me: existing}, existing, {me: new_replicas}, new_partitions)

    def _new_partition(self, index: int) -> PartitionInfo:
        me = self._config.broker_id
        return PartitionInfo(partition=index, leader=me, leader_epoch=0, replicas=(me,), isr=(me,))

    def _require(self, name: str) -> TopicInfo:
        topic = self.topics().get(name)
        if topic is None:
            raise KafkaError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"This server does not host topic '{name}'."
            )
        return topic

    def _load_meta_properties(self) -> str:
        """Read or create ``meta.properties``; refuses a data dir of another broker or cluster."""
        cluster_id = read_meta_properties(self._dir, self._config.broker_id)
        if cluster_id is not None:
            if self._config.cluster_id and cluster_id != self._config.cluster_id:
                raise StartupError(f"{self._dir / META_PROPERTIES}: data dir belongs to cluster {cluster_id}, "
                                   f"not {self._config.cluster_id}")
            return cluster_id
        cluster_id = self._config.cluster_id or new_cluster_id()
        write_meta_properties(self._dir, self._config.broker_id, cluster_id)
        return cluster_id

    def _load(self) -> MetadataLog:
        """Replay the snapshot and the log, then fold the log into a new snapshot, so each start
        begins with an empty log (and a new data dir, or one of an earlier version, with a snapshot
        in this version's format). Raises StartupError naming the file, the byte offset and the
        topic when they are damaged."""
        loaded = metadata_file.load(self._dir, self._check_topic_configs)
        metadata_log = MetadataLog(self._dir, self._cluster_id, loaded)
        path = self._dir / SNAPSHOT_FILE
        if loaded.migrated or loaded.log_bytes or not path.exists():
            try:
                metadata_log.compact_at_start()
            except OSError as exc:
                raise StartupError(f"cannot write the metadata snapshot {path}: {exc.strerror or exc}") from None
        if loaded.migrated:
            log.info("%s was in the format of earlier versions (rewritten whole on every change): migrated to a "
                     "snapshot (format version %d) and a log of changes, %s; %d topics", path,
                     metadata_file.FORMAT_VERSION, self._dir / metadata_file.LOG_FILE, len(loaded.image.topics))
        return metadata_log

    def _check_topic_configs(self, configs: Mapping[str, str]) -> None:
        """What an admin request's overrides must pass, for those read back from disk: the broker
        could not open the topic's logs otherwise. Raises KafkaError(INVALID_CONFIG). (No overrides,
        nothing to check: most topics, and a start replays thousands.)"""
        if configs:
            validate_topic_configs(configs, self._config)
