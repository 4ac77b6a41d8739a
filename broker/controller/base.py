"""The controller interface: the one place cluster metadata is changed.

Request handlers read metadata through :class:`Controller` and ask it for changes (create a
topic, delete it, add partitions, change configs). The standalone controller keeps metadata in
the data dir; a ZooKeeper-backed one keeps it in Kafka's znodes. Both tell the broker about
changes through :class:`MetadataListener`, so the broker's local logs follow the metadata the
same way in either mode.

What only a ZooKeeper-mode broker has (requests from and to the elected controller, dynamic
broker configs, elections and reassignments on request) is :class:`ZooKeeperSupport`, which
:meth:`Controller.zookeeper` answers, None in standalone mode: the one place that asks "is this a
ZooKeeper cluster" (Kafka's MetadataSupport.requireZkOrThrow). Handlers never import the
ZooKeeper modules, so a standalone broker never loads them (nor kazoo).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import trio

from broker.controller.model import BrokerInfo, PartitionInfo, Reassignment, TopicInfo
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.messages import LeaderAndIsrRequest, UpdateMetadataRequest

__all__ = ["AclZnode", "AclZnodes", "ActiveController", "Controller",
           "MetadataListener", "NewTopic", "PartitionBudget", "ZooKeeperSupport"]


@dataclass(frozen=True, slots=True)
class NewTopic:
    """One topic of a :meth:`Controller.create_topics` call (Kafka's CreatableTopic, with the
    broker's defaults already filled in)."""

    name: str
    num_partitions: int
    replication_factor: int
    configs: Mapping[str, str] = field(default_factory=dict)
    # partition -> replicas, the first the preferred leader; replaces the controller's assignment
    assignments: Mapping[int, Sequence[int]] | None = None


class PartitionBudget(Protocol):
    """A limit on the partitions one request may add (max.partitions.per.request), consulted by
    the controller topic by topic in request order, where it decides each."""

    def take(self, partitions: int) -> None:
        """Raises KafkaError(POLICY_VIOLATION) when ``partitions`` more would pass the limit."""

    def commit(self, partitions: int) -> None:
        """``partitions`` were accepted: they count against what the later topics may take."""


class MetadataListener(Protocol):
    """Receives metadata changes after the controller made them durable."""

    async def on_topic_changed(self, topic: TopicInfo) -> None:
        """A topic was created, or its partitions or configs changed. Returns once the local
        logs exist (created in worker threads: the event loop keeps serving meanwhile)."""

    async def on_topic_deleted(self, topic: TopicInfo) -> None:
        """A topic was deleted; its local logs should go."""


class ActiveController(Protocol):
    """This broker's term as the elected controller of a ZooKeeper-mode cluster: what the
    requests sent to the controller ask of it. Each raises KafkaError(NOT_CONTROLLER) once the
    term is over."""

    async def elect_leaders(self, partitions: Sequence[tuple[str, int]] | None, *, unclean: bool
                            ) -> dict[tuple[str, int], tuple[ErrorCode, str | None, int]]:
        """ElectLeaders (KIP-460) of ``partitions`` (None: all): per partition (error, message, leader)."""
        ...

    async def raise_leader_epochs(self, wanted: Mapping[tuple[str, int], int]
                                  ) -> dict[tuple[str, int], tuple[ErrorCode, str | None, int]]:
        """LinkLeaderEpoch: per partition (error, message, leader epoch now); see Controller."""
        ...

    async def alter_partition_reassignments(self, requests: Sequence[tuple[str, int, Sequence[int] | None]]
                                            ) -> dict[tuple[str, int], tuple[ErrorCode, str | None]]:
        """AlterPartitionReassignments (KIP-455): start, replace or (None) cancel each."""
        ...

    async def list_partition_reassignments(self, partitions: Sequence[tuple[str, int]] | None
                                           ) -> dict[tuple[str, int], Reassignment]:
        """The reassignments in progress, of ``partitions`` (None: all)."""
        ...

    async def broker_epoch_is_current(self, broker_id: int, broker_epoch: int) -> bool: ...

    async def alter_partition(self, broker_id: int, topic_id: uuid.UUID, partition: int, leader_epoch: int,
                              new_isr: Sequence[int], partition_epoch: int) -> PartitionInfo:
        """AlterPartition (KIP-497) from the leader ``broker_id``: the partition's state after it."""
        ...

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> list[tuple[str, int]]:
        """ControlledShutdown: leaderships move away from ``broker_id``; returns those that remain."""
        ...


@dataclass(frozen=True, slots=True, order=True)
class AclZnode:
    """One ACL resource pattern's znode in Kafka's layout: its pattern type (``LITERAL``,
    ``PREFIXED``), Kafka's name of its resource type (``Topic``) and the resource name."""

    pattern_type: str
    resource_type: str
    name: str


class AclZnodes(Protocol):
    """Kafka's ACL znodes, as bytes (broker/controller/zk/acls.py says how they are laid out and
    updated; broker/server/zk_acl_store.py what the bytes mean)."""

    async def prepare(self, resource_types: Iterable[str]) -> None: ...

    async def all(self) -> list[AclZnode]: ...

    async def read(self, node: AclZnode) -> bytes | None: ...

    async def update(self, node: AclZnode, change: Callable[[bytes | None], bytes | None]
                     ) -> tuple[bytes | None, bytes | None]: ...

    async def announce(self, pattern_type: str, payload: bytes) -> None: ...

    async def follow(self, on_notices: Callable[[str, Sequence[bytes]], Awaitable[None]], *,
                     task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None: ...


class ZooKeeperSupport(Protocol):
    """What a broker has in ZooKeeper mode only (Kafka's ZkSupport); see the module docstring."""

    def active_controller(self) -> ActiveController | None:
        """This broker's controller term, when it is the controller."""
        ...

    async def wait_for_leaders(self, expected: Mapping[tuple[str, int], int], timeout_s: float
                               ) -> set[tuple[str, int]]:
        """Wait until this broker's metadata shows each partition led by its expected leader, at
        most ``timeout_s``; returns the partitions that it does not show so."""
        ...

    async def check_controller(self, controller_id: int, controller_epoch: int, broker_epoch: int) -> ErrorCode:
        """NONE when a request comes from ZooKeeper's current controller to this broker's current
        registration; the error to answer otherwise."""
        ...

    def brokers_for_leader_and_isr(self, live_leaders: Sequence[LeaderAndIsrRequest.LeaderAndIsrLiveLeader],
                                   ) -> dict[int, BrokerInfo]: ...

    async def before_leader_and_isr(self, states: Sequence[tuple[str, uuid.UUID, PartitionInfo, bool]]) -> None: ...

    async def apply_update_metadata(self, request: UpdateMetadataRequest) -> None: ...

    async def broker_configs(self, entity: str) -> dict[str, str]:
        """The dynamic configs of ``entity``: a broker id, or ``"<default>"``."""
        ...

    async def set_broker_configs(self, entity: str, configs: Mapping[str, str]) -> None:
        """Replace them, tell every broker, and apply them here."""
        ...

    async def user_configs(self, user: str) -> dict[str, str]:
        """The configs of user ``user`` (``/config/users/<user>``: its SCRAM credentials)."""
        ...

    async def set_user_configs(self, user: str, configs: Mapping[str, str]) -> None:
        """Replace them (an empty config when the last credential goes, as Kafka) and tell every broker."""
        ...

    async def users_with_configs(self) -> list[str]:
        """Every user with a ``/config/users`` znode."""
        ...

    def acl_znodes(self) -> AclZnodes:
        """The cluster's ACL znodes (``/kafka-acl``, ``/kafka-acl-extended``, their changes)."""
        ...


class Controller(Protocol):
    @property
    def cluster_id(self) -> str: ...

    @property
    def controller_id(self) -> int: ...

    def brokers(self) -> Sequence[BrokerInfo]: ...

    def topics(self) -> Mapping[str, TopicInfo]: ...

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None: ...

    def zookeeper(self) -> ZooKeeperSupport | None:
        """What this broker has in ZooKeeper mode; None in standalone mode."""
        ...

    def register_local_broker(self, info: BrokerInfo) -> None:
        """Publish this broker's endpoints once its listeners are bound."""
        ...

    async def allocate_producer_id(self) -> int:
        """A producer id that this cluster has never handed out."""
        ...

    async def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        *,
        validate_only: bool = False,
        assignments: Mapping[int, Sequence[int]] | None = None,
        deadline: float | None = None,
    ) -> TopicInfo:
        """Create a topic. Raises KafkaError: TOPIC_ALREADY_EXISTS, INVALID_TOPIC_EXCEPTION,
        INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR, POLICY_VIOLATION (max.broker.partitions,
        max.partitions), KAFKA_STORAGE_ERROR (the metadata could not be written).
        ``assignments`` (partition -> replicas, the first the preferred leader) replaces the
        controller's own assignment; INVALID_REPLICA_ASSIGNMENT when it is not valid.
        ``deadline`` (trio clock; from an admin request's timeout_ms) bounds the wait for a
        change made elsewhere (ZooKeeper mode): REQUEST_TIMED_OUT when it is still pending then,
        while the change goes on; at once when the deadline is already past. A controller that
        applies changes before it returns ignores it.

        The controllers subclass this protocol and so share this: ``create_topics`` of one topic."""
        [result] = await self.create_topics([NewTopic(name, num_partitions, replication_factor, configs, assignments)],
                                            validate_only=validate_only, deadline=deadline)
        if isinstance(result, KafkaError):
            raise result
        return result

    async def create_topics(
        self,
        topics: Sequence[NewTopic],
        *,
        validate_only: bool = False,
        deadline: float | None = None,
        budget: PartitionBudget | None = None,
    ) -> list[TopicInfo | KafkaError]:
        """Create ``topics``, each as ``create_topic`` would, and answer each: the topic, or the
        KafkaError that refused it. They are decided in request order, each seeing the ones before
        it: the first of two colliding names wins, and so do the first topics when the request
        would pass a partition limit (``budget``, then max.broker.partitions and max.partitions).
        The standalone controller makes them durable in one metadata write (Kafka's controller
        appends a CreateTopics request's records as one batch)."""
        ...

    async def delete_topic(self, name: str, *, deadline: float | None = None) -> None:
        """Raises KafkaError(UNKNOWN_TOPIC_OR_PARTITION) for a topic that does not exist;
        REQUEST_TIMED_OUT as ``create_topic`` when the deletion is still pending at ``deadline``."""
        ...

    async def create_partitions(self, name: str, total: int, *, validate_only: bool = False,
                                assignments: Sequence[Sequence[int]] | None = None,
                                deadline: float | None = None) -> None:
        """Grow a topic to ``total`` partitions. Raises KafkaError(INVALID_PARTITIONS) when
        ``total`` is not larger than the current count. ``assignments``: the replicas of each new
        partition (INVALID_REPLICA_ASSIGNMENT when not valid). ``deadline`` as in ``create_topic``."""
        ...

    async def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        """Replace the topic's config overrides with ``configs`` (already validated)."""
        ...

    async def raise_leader_epochs(self, wanted: Mapping[tuple[str, int], int]
                                  ) -> dict[tuple[str, int], tuple[ErrorCode, str | None, int]]:
        """Raise each partition's leader epoch to at least ``wanted``'s (a link source's, KIP-1279),
        as any leader epoch change: to ``max(current + 1, wanted)`` when below it, else left
        alone (never lowered). ``wanted`` is already bounded by the caller. Returns, per
        partition, (error, message, its leader epoch now): UNKNOWN_TOPIC_OR_PARTITION,
        LEADER_NOT_AVAILABLE, NOT_CONTROLLER (ZooKeeper mode, on a broker that is not the
        controller), KAFKA_STORAGE_ERROR (standalone: the metadata could not be written)."""
        ...
