"""A one-node cluster whose metadata lives in the data dir.

This is the embedded default (development, examples, quick tests): no ZooKeeper, one broker that
is its own controller, leader of every partition and the whole ISR. Metadata is one JSON document,
``cluster-metadata.json`` in the first log dir, rewritten atomically (temp file, fsync, rename) on
every change, so a crash leaves either the old or the new version. ``meta.properties`` is written
as Kafka writes it, so the data dir carries its cluster id and broker id.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from broker.config import BrokerConfig
from broker.controller.base import MetadataListener
from broker.controller.model import BrokerInfo, PartitionInfo, TopicInfo, validate_topic_name
from broker.protocol.errors import ErrorCode, KafkaError
from broker.storage.checkpoints import write_atomically

__all__ = ["StandaloneController", "METADATA_FILE"]

METADATA_FILE = "cluster-metadata.json"
_FORMAT_VERSION = 1
# Producer ids are handed out from blocks; only the end of the current block is persisted, so a
# restart skips the rest of a block but never hands out an id twice (as Kafka's blocks do).
PRODUCER_ID_BLOCK = 1000


def new_cluster_id() -> str:
    """A cluster id as Kafka makes them: a random UUID in URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


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

    # -- changes -------------------------------------------------------------------------

    async def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        *,
        validate_only: bool = False,
    ) -> TopicInfo:
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
        topic = TopicInfo(
            name=name,
            topic_id=uuid.uuid4(),
            partitions=tuple(self._new_partition(i) for i in range(num_partitions)),
            configs=dict(configs),
            is_internal=name.startswith("__"),
        )
        if validate_only:
            return topic
        self._topics[name] = topic
        self._save()
        if self._listener is not None:
            self._listener.on_topic_changed(topic)
        return topic

    async def allocate_producer_id(self) -> int:
        """A producer id never handed out before by this cluster, across restarts."""
        if self._next_producer_id >= self._producer_id_block_end:
            self._producer_id_block_end = self._next_producer_id + PRODUCER_ID_BLOCK
            self._save()
        producer_id = self._next_producer_id
        self._next_producer_id += 1
        return producer_id

    async def delete_topic(self, name: str) -> None:
        topic = self._require(name)
        del self._topics[name]
        self._save()
        if self._listener is not None:
            self._listener.on_topic_deleted(topic)

    async def create_partitions(self, name: str, total: int, *, validate_only: bool = False) -> None:
        topic = self._require(name)
        current = len(topic.partitions)
        if total <= current:
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS,
                f"Topic currently has {current} partitions, {total} would not be an increase.",
            )
        if validate_only:
            return
        added = tuple(self._new_partition(i) for i in range(current, total))
        updated = TopicInfo(topic.name, topic.topic_id, topic.partitions + added, topic.configs, topic.is_internal)
        self._topics[name] = updated
        self._save()
        if self._listener is not None:
            self._listener.on_topic_changed(updated)

    async def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        topic = self._require(name)
        updated = TopicInfo(topic.name, topic.topic_id, topic.partitions, dict(configs), topic.is_internal)
        self._topics[name] = updated
        self._save()
        if self._listener is not None:
            self._listener.on_topic_changed(updated)

    # -- internals -----------------------------------------------------------------------

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
            for line in path.read_text(encoding="utf-8").splitlines():
                if line and not line.startswith("#") and "=" in line:
                    k, _, v = line.partition("=")
                    props[k.strip()] = v.strip()
            stored_id = int(props.get("broker.id", props.get("node.id", "-1")))
            if stored_id != self._config.broker_id:
                raise RuntimeError(
                    f"{path}: data dir belongs to broker {stored_id}, not {self._config.broker_id}"
                )
            cluster_id = props.get("cluster.id", "")
            if self._config.cluster_id and cluster_id != self._config.cluster_id:
                raise RuntimeError(
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
        path = self._dir / METADATA_FILE
        if not path.exists():
            return
        doc = json.loads(path.read_text(encoding="utf-8"))
        if doc.get("version") != _FORMAT_VERSION:
            raise RuntimeError(f"{path}: unsupported metadata format version {doc.get('version')}")
        # Start after the last block that may have been handed out before the restart.
        self._next_producer_id = self._producer_id_block_end = int(doc.get("producer_id_block_end", 0))
        for name, entry in doc["topics"].items():
            partitions = tuple(
                PartitionInfo(
                    partition=p["partition"],
                    leader=p["leader"],
                    leader_epoch=p["leader_epoch"],
                    replicas=tuple(p["replicas"]),
                    isr=tuple(p["isr"]),
                )
                for p in entry["partitions"]
            )
            self._topics[name] = TopicInfo(
                name=name,
                topic_id=uuid.UUID(entry["topic_id"]),
                partitions=partitions,
                configs=dict(entry.get("configs", {})),
                is_internal=bool(entry.get("internal", False)),
            )

    def _save(self) -> None:
        doc: dict[str, Any] = {
            "version": _FORMAT_VERSION,
            "cluster_id": self._cluster_id,
            "producer_id_block_end": self._producer_id_block_end,
            "topics": {
                t.name: {
                    "topic_id": str(t.topic_id),
                    "internal": t.is_internal,
                    "configs": dict(t.configs),
                    "partitions": [
                        {
                            "partition": p.partition,
                            "leader": p.leader,
                            "leader_epoch": p.leader_epoch,
                            "replicas": list(p.replicas),
                            "isr": list(p.isr),
                        }
                        for p in t.partitions
                    ],
                }
                for t in sorted(self._topics.values(), key=lambda t: t.name)
            },
        }
        write_atomically(self._dir / METADATA_FILE, json.dumps(doc, indent=1, sort_keys=True) + "\n")
