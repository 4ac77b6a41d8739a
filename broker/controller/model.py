"""Cluster metadata as the controller publishes it: brokers, topics, partitions.

Plain frozen values, shared by every controller implementation (standalone now, ZooKeeper later)
and read by the request handlers. Names follow Kafka's: leader epoch, replicas, ISR.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from broker.config import BrokerConfig, ListenerSpec

__all__ = [
    "BrokerInfo", "PartitionInfo", "TopicInfo", "validate_topic_name", "TOPIC_NAME_MAX", "INTERNAL_TOPICS",
    "is_internal_topic",
]

TOPIC_NAME_MAX = 249
# Kafka's internal topics (Topic.INTERNAL_TOPICS): written only by the broker itself. Clients may
# read them, never append to, delete, shrink the records of, or repartition them.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
_LEGAL = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A live broker and the addresses it advertises, one per listener name."""

    broker_id: int
    endpoints: tuple[ListenerSpec, ...]
    rack: str | None = None

    def endpoint(self, listener_name: str) -> ListenerSpec | None:
        for spec in self.endpoints:
            if spec.name == listener_name:
                return spec
        return None

    def inter_broker_endpoint(self, config: BrokerConfig) -> ListenerSpec | None:
        """Where the controller and the other brokers reach this broker: its endpoint on the
        inter-broker listener of ``config`` (inter.broker.listener.name, else the first listener),
        else its first endpoint; None when it advertises none."""
        return self.endpoint(config.inter_broker_listener) or (self.endpoints[0] if self.endpoints else None)


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    # ZooKeeper mode: the zkVersion of the partition's state znode (Kafka's partition epoch),
    # which fences ISR changes (AlterPartition). Standalone: always 0.
    partition_epoch: int = 0


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: tuple[PartitionInfo, ...]
    # Only the topic's own overrides; defaults come from the broker config.
    configs: Mapping[str, str] = field(default_factory=dict)
    is_internal: bool = False

    def leader_of(self, partition: int) -> int:
        """The broker leading `partition`; -1 when it has none or the topic has no such partition."""
        return next((p.leader for p in self.partitions if p.partition == partition), -1)


@dataclass(frozen=True, slots=True)
class Reassignment:
    """A partition moving from its original replicas to target ones (KIP-455), as the controller
    lists it (ListPartitionReassignments) and keeps it in the topic znode."""

    origin: tuple[int, ...]  # ORS
    target: tuple[int, ...]  # TRS
    from_znode: bool = False  # asked through /admin/reassign_partitions (ZooKeeper mode), which it leaves when done

    @property
    def full(self) -> tuple[int, ...]:
        """RS: the target first, then the original replicas not in it (Kafka's fullReplicaSet)."""
        return tuple(dict.fromkeys(self.target + self.origin))

    @property
    def adding(self) -> tuple[int, ...]:
        return tuple(b for b in self.target if b not in self.origin)

    @property
    def removing(self) -> tuple[int, ...]:
        return tuple(b for b in self.origin if b not in self.target)


def validate_topic_name(name: str) -> str | None:
    """Return why ``name`` is not a legal Kafka topic name, or None when it is."""
    if not name:
        return "topic name is empty"
    if name in (".", ".."):
        return f"topic name cannot be '{name}'"
    if len(name) > TOPIC_NAME_MAX:
        return f"topic name is longer than {TOPIC_NAME_MAX} characters"
    bad = sorted(set(name) - _LEGAL)
    if bad:
        return f"topic name '{name}' contains illegal characters {''.join(bad)!r}; use [a-zA-Z0-9._-]"
    return None


def is_internal_topic(name: str) -> bool:
    """Whether ``name`` is one of Kafka's internal topics (by name, as Kafka decides it)."""
    return name in INTERNAL_TOPICS
