"""A one-node cluster whose metadata lives in the data dir.

This is the embedded default (development, examples, quick tests): no ZooKeeper, one broker that
is its own controller, leader of every partition and the whole ISR. Metadata is one JSON document,
``cluster-metadata.json`` in the first log dir, rewritten atomically (temp file, fsync, rename,
fsync of the directory, in a worker thread) on every change, so a crash leaves either the old or
the new version; a damaged file stops the start with a message naming it (``metadata_file``).
Partition counts are bounded by ``max.broker.partitions`` and ``max.partitions``. ``meta.properties`` is written
as Kafka writes it, so the data dir carries its cluster id and broker id.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence

import trio

from broker.atomic_file import write_atomically
from broker.config import BrokerConfig, StartupError
from broker.controller import metadata_file
from broker.controller.base import MetadataListener
from broker.controller.model import (
    BrokerInfo,
    PartitionInfo,
    TopicInfo,
    is_internal_topic,
    validate_topic_name,
)
from broker.controller.zk.assignment import check_partition_limits, validate_assignment
from broker.ids import random_uuid, random_uuid_text
from broker.protocol.errors import ErrorCode, KafkaError

__all__ = ["StandaloneController", "METADATA_FILE"]

log = logging.getLogger(__name__)

METADATA_FILE = "cluster-metadata.json"
# Producer ids are handed out from blocks; only the end of the current block is persisted, so a
# restart skips the rest of a block but never hands out an id twice (as Kafka's blocks do).
PRODUCER_ID_BLOCK = 1000


def new_cluster_id() -> str:
    """A cluster id as Kafka makes them: a random UUID in URL-safe base64 without padding."""
    return random_uuid_text()


class StandaloneController:
    """Controller of a single-broker cluster; see the module docstring."""

    def __init__(self, config: BrokerConfig, listener: MetadataListener | None = None) -> None:
        self._config = config
        self._dir = config.log_dirs[0]
        self._dir.mkdir(parents=True, exist_ok=True)
        self._listener = listener
        self._topics: dict[str, TopicInfo] = {}
        self._next_producer_id = 0
        self._producer_id_block_end = 0
        # One metadata write at a time, each of the state at the moment it starts: the last
        # write to finish is always of the newest state.
        self._save_lock = trio.Lock()
        self._local = BrokerInfo(config.broker_id, config.advertised_listeners, config.rack)
        self._cluster_id = self._load_meta_properties()
        self._load()

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
        return self._topics

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        for topic in self._topics.values():
            if topic.topic_id == topic_id:
                return topic
        return None

    def partition_count(self) -> int:
        """Partitions of every topic; in a one-broker cluster each has a replica here."""
        return sum(len(t.partitions) for t in self._topics.values())

    # -- changes -------------------------------------------------------------------------

    async def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        *,
        validate_only: bool = False,
        assignments: Mapping[int, Sequence[int]] | None = None,
        deadline: float | None = None,  # changes are made before this returns: nothing to wait for
    ) -> TopicInfo:
        if assignments:
            # One broker: every replica must be this one (Kafka's checks and messages).
            validate_assignment(assignments, [self._config.broker_id])
            num_partitions, replication_factor = len(assignments), len(next(iter(assignments.values())))
        problem = validate_topic_name(name)
        if problem is not None:
            raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
        if name in self._topics:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        collision = self._collides(name)
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
        topic = TopicInfo(
            name=name,
            topic_id=random_uuid(),
            partitions=tuple(self._new_partition(i) for i in range(num_partitions)),
            configs=dict(configs),
            is_internal=is_internal_topic(name),
        )
        if validate_only:
            return topic
        # In the map before the first await, so a concurrent request sees the name as taken.
        self._topics[name] = topic
        try:
            await self._save()
        except KafkaError:
            del self._topics[name]
            raise
        if self._listener is not None:
            await self._listener.on_topic_changed(topic)
        return topic

    async def allocate_producer_id(self) -> int:
        """A producer id never handed out before by this cluster, across restarts."""
        if self._next_producer_id >= self._producer_id_block_end:
            previous = self._producer_id_block_end
            self._producer_id_block_end = self._next_producer_id + PRODUCER_ID_BLOCK
            try:
                await self._save()
            except KafkaError:
                self._producer_id_block_end = previous
                raise
        producer_id = self._next_producer_id
        self._next_producer_id += 1
        return producer_id

    async def delete_topic(self, name: str, *, deadline: float | None = None) -> None:
        topic = self._require(name)
        del self._topics[name]
        try:
            await self._save()
        except KafkaError:
            self._topics[name] = topic
            raise
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
        updated = TopicInfo(topic.name, topic.topic_id, topic.partitions + added, topic.configs, topic.is_internal)
        self._topics[name] = updated
        try:
            await self._save()
        except KafkaError:
            self._topics[name] = topic
            raise
        if self._listener is not None:
            await self._listener.on_topic_changed(updated)

    async def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        topic = self._require(name)
        updated = TopicInfo(topic.name, topic.topic_id, topic.partitions, dict(configs), topic.is_internal)
        self._topics[name] = updated
        try:
            await self._save()
        except KafkaError:
            self._topics[name] = topic
            raise
        if self._listener is not None:
            await self._listener.on_topic_changed(updated)

    # -- internals -----------------------------------------------------------------------

    def _check_partition_limits(self, new_replicas: int, new_partitions: int) -> None:
        """max.broker.partitions and max.partitions (KIP-578): one broker holds every partition."""
        me, existing = self._config.broker_id, self.partition_count()
        check_partition_limits(self._config, {me: existing}, existing, {me: new_replicas}, new_partitions)

    def _new_partition(self, index: int) -> PartitionInfo:
        me = self._config.broker_id
        return PartitionInfo(partition=index, leader=me, leader_epoch=0, replicas=(me,), isr=(me,))

    def _require(self, name: str) -> TopicInfo:
        topic = self._topics.get(name)
        if topic is None:
            raise KafkaError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"This server does not host topic '{name}'."
            )
        return topic

    def _collides(self, name: str) -> str | None:
        folded = name.replace(".", "_")
        for existing in self._topics:
            if existing != name and existing.replace(".", "_") == folded:
                return existing
        return None

    def _load_meta_properties(self) -> str:
        """Read or create ``meta.properties``; refuses a data dir of another broker or cluster."""
        path = self._dir / "meta.properties"
        if path.exists():
            props: dict[str, str] = {}
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise StartupError(
                    f"cannot read {path} ({exc}); it names the broker and cluster this data dir "
                    "belongs to: restore it, or write broker.id=<id> and cluster.id=<id> lines"
                ) from None
            for line in text.splitlines():
                if line and not line.startswith("#") and "=" in line:
                    k, _, v = line.partition("=")
                    props[k.strip()] = v.strip()
            raw_id = props.get("broker.id", props.get("node.id", "-1"))
            try:
                stored_id = int(raw_id)
            except ValueError:
                raise StartupError(
                    f"{path}: broker.id '{raw_id}' is not a number; restore the file or correct the line"
                ) from None
            if stored_id != self._config.broker_id:
                raise StartupError(
                    f"{path}: data dir belongs to broker {stored_id}, not {self._config.broker_id}"
                )
            cluster_id = props.get("cluster.id", "")
            if self._config.cluster_id and cluster_id != self._config.cluster_id:
                raise StartupError(
                    f"{path}: data dir belongs to cluster {cluster_id}, not {self._config.cluster_id}"
                )
            return cluster_id
        cluster_id = self._config.cluster_id or new_cluster_id()
        write_atomically(
            path,
            "#\n# written by causeway\nversion=0\n"
            f"broker.id={self._config.broker_id}\ncluster.id={cluster_id}\n",
        )
        return cluster_id

    def _load(self) -> None:
        """Read the metadata file; raises StartupError naming it when it is damaged."""
        stored = metadata_file.read(self._dir / METADATA_FILE)
        if stored is None:
            return
        # Start after the last block that may have been handed out before the restart.
        self._next_producer_id = self._producer_id_block_end = stored.producer_id_block_end
        self._topics.update(stored.topics)

    async def _save(self) -> None:
        """Write the metadata file in a worker thread. A failed write (a full disk) leaves the
        file as it was and raises KafkaError(KAFKA_STORAGE_ERROR); callers undo their change."""
        async with self._save_lock:
            # TopicInfo values are frozen: a shallow copy is a consistent snapshot to encode and
            # write off the loop (thousands of partitions make a large document).
            snapshot = (self._cluster_id, self._producer_id_block_end, dict(self._topics))
            path = self._dir / METADATA_FILE
            try:
                await trio.to_thread.run_sync(lambda: metadata_file.write(path, metadata_file.encode(*snapshot)))
            except OSError as exc:
                log.error("cannot write %s: %s", path, exc)
                raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                                 f"cannot write the cluster metadata: {exc.strerror or exc}") from exc
