"""What one term of the elected controller knows and does, shared with its helpers.

Kafka's controller hands its state machines a ``ControllerContext`` (the live brokers, the
partition assignments and states, the topics being deleted, the brokers shutting down) together
with the ZooKeeper client and the request batch to the brokers; they never see the controller
itself. The same here: :class:`ControllerContext` holds the term's state and the few actions the
controller and its helpers (leader_election.py, reassignment.py) take with it:

* read and write a partition's state znode, fenced by the controller epoch (``write_state``);
* tell brokers: LeaderAndIsr to a partition's replicas, UpdateMetadata to brokers;
* ``submit`` a job to the controller's event loop (one event at a time, as Kafka's controller
  event thread): what a watch or an answer from a broker asks for is done there, never on the
  task that noticed it.

Every method runs on the controller's event loop (controller.py), so the state is never changed
by two of them at once.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import trio

from broker.config import BrokerConfig
from broker.controller import controller_metrics
from broker.controller.model import BrokerInfo
from broker.controller.zk import znodes
from broker.controller.zk.channel import ControllerChannel
from broker.controller.zk.client import CheckVersionOp, SetOp, ZkBadVersion, ZkClient, ZkNodeExists, ZkNoNode, ZnodeStat
from broker.controller.zk.election import NO_LEADER, LeaderAndIsr
from broker.protocol.errors import ErrorCode
from broker.protocol.messages import LeaderAndIsrRequest, StopReplicaRequest, UpdateMetadataRequest

if TYPE_CHECKING:
    from broker.client.connection import ClientSecurity

__all__ = ["BrokerEntry", "ControllerContext", "EPOCH_DURING_DELETE", "Job", "LEADER_DURING_DELETE", "PartitionEntry",
           "Resigned", "TopicEntry"]

log = logging.getLogger(__name__)

# UpdateMetadata marks the partitions of a deleted topic with this leader (Kafka's
# LeaderAndIsr.LeaderDuringDelete): brokers drop them from their metadata cache.
LEADER_DURING_DELETE = -2
# The leader epoch of a StopReplica that deletes a deleted topic's replicas (Kafka's
# LeaderAndIsr.EpochDuringDelete): the broker deletes whatever epoch its replica is at.
EPOCH_DURING_DELETE = -2
SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}

Job = Callable[[], Awaitable[None]]


class Resigned(Exception):
    """This controller found a newer one (or lost its session); its term is over."""


@dataclass(slots=True)
class BrokerEntry:
    info: BrokerInfo
    epoch: int  # the czxid of its registration znode (Kafka's broker epoch)
    protocols: dict[str, str]


@dataclass(slots=True)
class PartitionEntry:
    replicas: tuple[int, ...]
    state: LeaderAndIsr | None = None  # None: no state znode yet
    zk_version: int = -1
    controller_epoch: int = 0


@dataclass(slots=True)
class TopicEntry:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionEntry] = field(default_factory=dict)
    watch: trio.CancelScope = field(default_factory=trio.CancelScope)


class ControllerContext:
    """The state of one controller term and the actions taken with it; see the module docstring."""

    def __init__(self, config: BrokerConfig, zk: ZkClient,
                 on_leader_and_isr_answer: Callable[[int, Any], Awaitable[None]], *,
                 security: ClientSecurity | None = None) -> None:
        self.config = config  # the dynamic broker configs of now (ZkController.reconfigure)
        self.zk = zk
        self.broker_id = config.broker_id
        self.epoch = 0
        self.epoch_version = -1  # the version of /controller_epoch this term wrote
        self.brokers: dict[int, BrokerEntry] = {}
        self.topics: dict[str, TopicEntry] = {}
        self.shutting_down: set[int] = set()
        # Replicas in an offline log dir, by broker (Kafka's replicasOnOfflineDirs).
        self.offline: dict[int, set[tuple[str, int]]] = {}
        # Topics being deleted -> the brokers whose replicas are not deleted yet.
        self.deleting: dict[str, set[int]] = {}
        # Topics asked to be deleted whose deletion waits for their partition reassignments to end
        # (Kafka's topics ineligible for deletion): served as usual meanwhile, so a move can finish.
        self.queued: set[str] = set()
        self.channel = ControllerChannel(request_timeout_s=config.controller_socket_timeout_ms / 1000,
                                         client_id=f"controller-{config.broker_id}", security=security)
        self._jobs_send, self.jobs = trio.open_memory_channel[Job](math.inf)
        # Which replicas a broker's LeaderAndIsr answer says are offline: the controller's event.
        self._on_leader_and_isr_answer = on_leader_and_isr_answer

    def submit(self, job: Job) -> None:
        """Run ``job`` on the controller's event loop, after the events before it."""
        self._jobs_send.send_nowait(job)

    # -- the term's view -----------------------------------------------------------------------

    def leaders(self) -> tuple[int, int, int, int]:
        """(topics, partitions, partitions without a leader, partitions not led by their
        preferred replica), for the controller's metrics: read from the metrics thread, so each
        table is copied in one step, nothing changed."""
        topics = partitions = offline = imbalanced = 0
        for name, topic in list(self.topics.items()):
            if name in self.deleting:
                continue
            topics += 1
            for entry in list(topic.partitions.values()):
                partitions += 1
                leader = entry.state.leader if entry.state is not None else NO_LEADER
                offline += leader == NO_LEADER
                imbalanced += bool(entry.replicas) and leader != entry.replicas[0]
        return topics, partitions, offline, imbalanced

    def live(self) -> set[int]:
        """The registered brokers that are not shutting down: those that may lead."""
        return set(self.brokers) - self.shutting_down

    def is_queued_for_deletion(self, name: str) -> bool:
        """Kafka's isTopicQueuedUpForDeletion: asked to be deleted, under way or waiting."""
        return name in self.deleting or name in self.queued

    def online(self, topic: str, partition: int, live: set[int]) -> set[int]:
        """``live`` without the brokers whose replica of this partition is in an offline log dir."""
        if not self.offline:
            return live
        return {b for b in live if (topic, partition) not in self.offline.get(b, ())}

    def iter_partitions(self) -> Iterable[tuple[str, int, PartitionEntry]]:
        """Every partition of every topic, but those of topics being deleted."""
        for name, topic in list(self.topics.items()):
            if name in self.deleting:
                continue
            for p, entry in sorted(topic.partitions.items()):
                yield name, p, entry

    def all_partitions(self) -> list[tuple[str, int]]:
        return [(t, p) for t, p, _ in self.iter_partitions()]

    # -- partition state in ZooKeeper (Kafka's ZkPartitionStateMachine writes) -----------------

    async def read_state(self, topic: str, partition: int, entry: PartitionEntry) -> None:
        """Read the state znode into ``entry`` (no state: None); raises Resigned when a newer
        controller wrote it."""
        path = znodes.partition_state_path(topic, partition)
        try:
            data, stat = await self.zk.get(path)
            state = znodes.parse_partition_state(path, data)
        except ZkNoNode:
            entry.state = None
            return
        except znodes.ZnodeError as exc:
            # The partition is left without a leader until an operator repairs the znode.
            log.error("partition %s-%d has no usable state: %s", topic, partition, exc)
            entry.state = None
            return
        entry.state = LeaderAndIsr(state.leader, state.leader_epoch, tuple(state.isr))
        entry.zk_version = stat.version
        entry.controller_epoch = state.controller_epoch
        if state.controller_epoch > self.epoch:
            raise Resigned(f"{path} was written by controller epoch {state.controller_epoch}, newer than ours "
                           f"({self.epoch})")

    async def create_state(self, topic: str, partition: int, entry: PartitionEntry, state: LeaderAndIsr) -> bool:
        path = znodes.partition_state_path(topic, partition)
        data = znodes.encode_partition_state(state.leader, state.leader_epoch, state.isr, self.epoch)
        try:
            await self.zk.ensure_path(znodes.partition_path(topic, partition))
            await self.zk.create(path, data)
        except ZkNodeExists:
            # Another controller got there first: take what it wrote.
            await self.read_state(topic, partition, entry)
            return False
        entry.state, entry.zk_version, entry.controller_epoch = state, 0, self.epoch
        return True

    async def write_state(self, topic: str, partition: int, entry: PartitionEntry, state: LeaderAndIsr) -> bool:
        """Write ``state`` conditionally on the zkVersion we know, fenced by our controller epoch.

        False when the znode moved on meanwhile (re-read: the caller's decision was made on an old
        state and is dropped); raises Resigned when a newer controller wrote it.
        """
        path = znodes.partition_state_path(topic, partition)
        data = znodes.encode_partition_state(state.leader, state.leader_epoch, state.isr, self.epoch)
        try:
            stat = await self.fenced_set(path, data, entry.zk_version)
        except ZkBadVersion:
            await self.check_still_controller()
            await self.read_state(topic, partition, entry)
            log.warning("state of %s-%d changed under the controller; re-read it", topic, partition)
            return False
        except ZkNoNode:
            await self.read_state(topic, partition, entry)
            return False
        controller_metrics.count_leader_change(entry.state, state)
        entry.state, entry.zk_version, entry.controller_epoch = state, stat.version, self.epoch
        return True

    async def fenced_set(self, path: str, data: bytes, version: int) -> ZnodeStat:
        """``set`` with ``version``, in one transaction with a check that ``/controller_epoch`` is
        still at the version we wrote (Kafka's checkControllerEpoch multi-op)."""
        results = await self.zk.transaction([CheckVersionOp(znodes.CONTROLLER_EPOCH, self.epoch_version),
                                              SetOp(path, data, version)])
        written = results[1]
        assert isinstance(written, ZnodeStat)
        return written

    async def check_still_controller(self) -> None:
        try:
            data, stat = await self.zk.get(znodes.CONTROLLER_EPOCH)
        except ZkNoNode as exc:
            raise Resigned("/controller_epoch is gone") from exc
        if stat.version != self.epoch_version:
            raise Resigned(f"/controller_epoch moved to {data.decode(errors='replace')}; another controller "
                           "was elected")

    # -- requests to brokers (Kafka's ControllerBrokerRequestBatch) ----------------------------

    def add_to_channel(self, broker: BrokerEntry) -> None:
        endpoint = broker.info.inter_broker_endpoint(self.config)
        if endpoint is None:
            log.error("broker %d registered no endpoint; the controller cannot reach it", broker.info.broker_id)
            return
        self.channel.add_broker(broker.info.broker_id, endpoint.host or "127.0.0.1", endpoint.port)

    def send_leader_and_isr(self, partitions: Sequence[tuple[str, int]], *, is_new: bool = False,
                             only: set[int] | None = None) -> None:
        """LeaderAndIsr to every live replica of ``partitions`` (``only`` those brokers)."""
        by_broker: dict[int, dict[str, list[LeaderAndIsrRequest.LeaderAndIsrPartitionState]]] = {}
        leaders: set[int] = set()
        for name, p in partitions:
            topic = self.topics.get(name)
            entry = topic.partitions.get(p) if topic is not None else None
            if entry is None or entry.state is None:
                continue
            state = LeaderAndIsrRequest.LeaderAndIsrPartitionState(
                topic_name=name, partition_index=p, controller_epoch=entry.controller_epoch,
                leader=entry.state.leader, leader_epoch=entry.state.leader_epoch, isr=list(entry.state.isr),
                partition_epoch=entry.zk_version, replicas=list(entry.replicas), is_new=is_new)
            leaders.add(entry.state.leader)
            for b in entry.replicas:
                if b in self.brokers and (only is None or b in only):
                    by_broker.setdefault(b, {}).setdefault(name, []).append(state)
        for b, topics in by_broker.items():
            live_leaders = []
            for leader in sorted(leaders):
                address = self._channel_address(leader)
                if address is not None:
                    live_leaders.append(LeaderAndIsrRequest.LeaderAndIsrLiveLeader(
                        broker_id=leader, host_name=address[0], port=address[1]))
            request = LeaderAndIsrRequest(
                controller_id=self.broker_id, controller_epoch=self.epoch, broker_epoch=self.brokers[b].epoch,
                topic_states=[LeaderAndIsrRequest.LeaderAndIsrTopicState(
                    topic_name=name, topic_id=self.topics[name].topic_id, partition_states=states)
                    for name, states in topics.items()],
                live_leaders=live_leaders)
            self.channel.send(b, request, self._leader_and_isr_answered(b))

    def announce(self, partitions: Sequence[tuple[str, int]]) -> None:
        """New states of ``partitions``: LeaderAndIsr to their replicas, UpdateMetadata to every broker."""
        self.send_leader_and_isr(partitions)
        self.send_update_metadata(set(self.brokers), partitions)

    def send_stop_replica_delete(self, broker_id: int, topic: str, leader_epochs: Mapping[int, int],
                                 answered: Callable[[Any], None]) -> None:
        """StopReplica with delete to ``broker_id`` (registered) for the partitions of ``topic`` in
        ``leader_epochs`` (partition -> the leader epoch the request carries); ``answered``
        hears its answer."""
        request = StopReplicaRequest(
            controller_id=self.broker_id, controller_epoch=self.epoch, broker_epoch=self.brokers[broker_id].epoch,
            topic_states=[StopReplicaRequest.StopReplicaTopicState(
                topic_name=topic,
                partition_states=[StopReplicaRequest.StopReplicaPartitionState(
                    partition_index=p, leader_epoch=epoch, delete_partition=True)
                    for p, epoch in leader_epochs.items()])])
        self.channel.send(broker_id, request, answered)

    def _leader_and_isr_answered(self, broker_id: int) -> Callable[[Any], None]:
        def check(response: Any) -> None:
            if response.error_code:
                log.warning("broker %d refused LeaderAndIsr: %s", broker_id, ErrorCode(response.error_code).name)
                return
            for topic in response.topics:
                for p in topic.partition_errors:
                    if p.error_code and p.error_code != ErrorCode.KAFKA_STORAGE_ERROR:
                        log.warning("broker %d: LeaderAndIsr for partition %d of topic %s: %s", broker_id,
                                    p.partition_index, topic.topic_id, ErrorCode(p.error_code).name)
            # Which of its replicas are in offline log dirs: an event of its own.
            self.submit(partial(self._on_leader_and_isr_answer, broker_id, response))
        return check

    def _channel_address(self, broker_id: int) -> tuple[str, int] | None:
        broker = self.brokers.get(broker_id)
        endpoint = broker.info.inter_broker_endpoint(self.config) if broker is not None else None
        return (endpoint.host, endpoint.port) if endpoint is not None else None

    def send_update_metadata(self, targets: Iterable[int], partitions: Sequence[tuple[str, int]], *,
                              deleting: bool = False) -> None:
        live_brokers = [
            UpdateMetadataRequest.UpdateMetadataBroker(
                id=b, rack=broker.info.rack,
                endpoints=[UpdateMetadataRequest.UpdateMetadataEndpoint(
                    port=spec.port, host=spec.host, listener=spec.name,
                    security_protocol=SECURITY_PROTOCOL_IDS.get(broker.protocols.get(spec.name, "PLAINTEXT"), 0))
                    for spec in broker.info.endpoints])
            for b, broker in sorted(self.brokers.items())]
        topics: dict[str, list[UpdateMetadataRequest.UpdateMetadataPartitionState]] = {}
        for name, p in partitions:
            topic = self.topics.get(name)
            entry = topic.partitions.get(p) if topic is not None else None
            if entry is None or (entry.state is None and not deleting):
                continue
            state = entry.state or LeaderAndIsr(NO_LEADER, 0, ())
            topics.setdefault(name, []).append(UpdateMetadataRequest.UpdateMetadataPartitionState(
                topic_name=name, partition_index=p, controller_epoch=entry.controller_epoch,
                leader=LEADER_DURING_DELETE if deleting else state.leader, leader_epoch=state.leader_epoch,
                isr=list(state.isr), zk_version=entry.zk_version, replicas=list(entry.replicas),
                offline_replicas=[b for b in entry.replicas
                                  if b not in self.brokers or (name, p) in self.offline.get(b, ())]))
        for b in targets:
            broker = self.brokers.get(b)
            if broker is None:
                continue
            request = UpdateMetadataRequest(
                controller_id=self.broker_id, controller_epoch=self.epoch, broker_epoch=broker.epoch,
                topic_states=[UpdateMetadataRequest.UpdateMetadataTopicState(
                    topic_name=name, topic_id=self.topics[name].topic_id, partition_states=states)
                    for name, states in topics.items()],
                live_brokers=live_brokers)
            self.channel.send(b, request)
