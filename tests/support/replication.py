"""Two or three broker cores in one trio test, replicating over real sockets.

Each core is what ``run_broker`` assembles minus the controller: its own log dirs, LogManager,
ReplicaManager (with its task tree: fetchers, ISR changes, the ISR check), the real Dispatcher and
listeners on 127.0.0.1 port 0. The one stand-in is :class:`FixedController`, a tiny cluster
metadata object shared by the cores: it answers Metadata (brokers, leaders, ISR) and writes ISR
changes the way the ZooKeeper controller does (a new partition epoch per change), so clients find
leaders and leaders shrink and expand ISRs. Partition states reach the cores through
``ReplicaManager.apply_leader_and_isr``, exactly as the controller's LeaderAndIsr would.

    async with replication_cluster(tmp_path, 3, lag_ms=500) as cluster:
        cluster.create("t", replicas=(1, 2, 3), leader=1, configs={"min.insync.replicas": "2"})
        await cluster.elect("t", 0, leader=1)
        ...
        await cluster.stop(3)          # a dead broker: listeners and fetchers gone, logs closed
        await cluster.start(3)         # back from the same log dirs
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import trio

from broker.clock import now_ms
from broker.config import BrokerConfig, ListenerSpec
from broker.controller.model import BrokerInfo, PartitionInfo, TopicInfo
from broker.ids import random_uuid_text
from broker.protocol.errors import ErrorCode, KafkaError
from broker.replication.partition import Partition
from broker.replication.replica_manager import ReplicaManager, broker_log_config
from broker.server.connection import ConnectionLimits, serve_connection
from broker.server.context import BrokerServices, ConnectionInfo
from broker.server.dispatch import Dispatcher
from broker.server.listeners import BoundListener, serve_listeners
from broker.server.memory import RequestMemoryPool, ResponseMemoryPool
from broker.storage import LogManager

__all__ = ["Core", "FixedController", "ReplicationCluster", "replication_cluster"]


class FixedController:
    """Cluster metadata for the cores: brokers, topics, partition states (the stand-in for the
    ZooKeeper controller, which is built elsewhere). Also every leader's IsrChannel."""

    def __init__(self) -> None:
        self.cluster_id = random_uuid_text()
        self.controller_id = 1
        self.controller_epoch = 1
        self._brokers: dict[int, BrokerInfo] = {}
        self._topics: dict[str, TopicInfo] = {}
        self.isr_changes: list[tuple[str, int, tuple[int, ...]]] = []

    def brokers(self) -> Sequence[BrokerInfo]:
        return [self._brokers[b] for b in sorted(self._brokers)]

    def live(self) -> dict[int, BrokerInfo]:
        return dict(self._brokers)

    def topics(self) -> Mapping[str, TopicInfo]:
        return self._topics

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return next((t for t in self._topics.values() if t.topic_id == topic_id), None)

    def register_local_broker(self, info: BrokerInfo) -> None:
        self._brokers[info.broker_id] = info

    def unregister(self, broker_id: int) -> None:
        self._brokers.pop(broker_id, None)

    async def allocate_producer_id(self) -> int:
        self._next_pid = getattr(self, "_next_pid", 1000) + 1
        return self._next_pid

    async def create_topic(self, *args: object, **kwargs: object) -> TopicInfo:
        raise KafkaError(ErrorCode.POLICY_VIOLATION, "the test cluster creates topics itself")

    async def create_topics(self, topics: Sequence[object], **kwargs: object) -> list[TopicInfo | KafkaError]:
        return [KafkaError(ErrorCode.POLICY_VIOLATION, "the test cluster creates topics itself") for _ in topics]

    async def delete_topic(self, name: str, **kwargs: object) -> None:
        raise KafkaError(ErrorCode.POLICY_VIOLATION, "not in the test cluster")

    async def create_partitions(self, name: str, total: int, *, validate_only: bool = False,
                                **kwargs: object) -> None:
        raise KafkaError(ErrorCode.POLICY_VIOLATION, "not in the test cluster")

    async def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        raise KafkaError(ErrorCode.POLICY_VIOLATION, "not in the test cluster")

    # -- partition states -----------------------------------------------------------------

    def state(self, topic: str, partition: int) -> PartitionInfo:
        return self._topics[topic].partitions[partition]

    def set_state(self, topic: str, info: PartitionInfo) -> None:
        t = self._topics[topic]
        parts = list(t.partitions)
        parts[info.partition] = info
        self._topics[topic] = replace(t, partitions=tuple(parts))

    def add_topic(self, topic: TopicInfo) -> None:
        self._topics[topic.name] = topic

    async def alter_partition(self, topic: str, topic_id: uuid.UUID, partition: int, leader_epoch: int,
                              new_isr: Sequence[int], partition_epoch: int) -> PartitionInfo:
        """What the controller does with AlterPartition: a conditional write on the epoch."""
        current = self.state(topic, partition)
        if leader_epoch != current.leader_epoch:
            raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH)
        if partition_epoch != current.partition_epoch:
            raise KafkaError(ErrorCode.INVALID_UPDATE_VERSION)
        written = replace(current, isr=tuple(new_isr), partition_epoch=current.partition_epoch + 1)
        self.set_state(topic, written)
        self.isr_changes.append((topic, partition, tuple(new_isr)))
        return written


@dataclass
class Core:
    """One broker's storage, replica manager and listeners."""

    broker_id: int
    config: BrokerConfig
    logs: LogManager
    replicas: ReplicaManager
    listeners: list[BoundListener]
    scope: trio.CancelScope
    stopped: trio.Event = field(default_factory=trio.Event)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.listeners[0].port}"

    def partition(self, topic: str, index: int = 0) -> Partition:
        return self.replicas.get(topic, index)

    def log_bytes(self, topic: str, index: int = 0) -> bytes:
        """Every byte of the partition's segment files, in order."""
        log = self.logs.get(topic, index)
        return b"".join(s.read(0, s.size) for s in log.segments)


class ReplicationCluster:
    def __init__(self, root: Path, nursery: trio.Nursery, *, lag_ms: int, overrides: Mapping[str, str]) -> None:
        self.root = root
        self.nursery = nursery
        self.lag_ms = lag_ms
        self.overrides = dict(overrides)
        self.controller = FixedController()
        self.cores: dict[int, Core] = {}
        self._ports: dict[int, int] = {}

    def config(self, broker_id: int) -> BrokerConfig:
        port = self._ports.get(broker_id, 0)
        props = {
            "node.id": str(broker_id),
            "listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "log.dirs": str(self.root / f"broker-{broker_id}"),
            "replica.lag.time.max.ms": str(self.lag_ms),
            "replica.fetch.wait.max.ms": "100",
            "replica.fetch.backoff.ms": "100",
            "auto.create.topics.enable": "false",
            # ZooKeeper mode for the replica manager (roles from LeaderAndIsr, configs from topic
            # changes); nothing here contacts it: the FixedController stands in.
            "zookeeper.connect": "127.0.0.1:1",
            **self.overrides,
        }
        return BrokerConfig.from_properties(props)

    async def start(self, broker_id: int) -> Core:
        """Start a core (again, from its log dirs); its listener keeps its port across restarts."""
        core: Core = await self.nursery.start(self._run_core, broker_id)
        self.cores[broker_id] = core
        self._ports[broker_id] = core.listeners[0].port
        return core

    async def stop(self, broker_id: int) -> None:
        """Stop a core as a dead broker stops: listeners and fetchers gone, logs closed."""
        core = self.cores.pop(broker_id)
        self.controller.unregister(broker_id)
        core.scope.cancel()
        await core.stopped.wait()

    async def _run_core(self, broker_id: int, *, task_status: trio.TaskStatus[Core]) -> None:
        config = self.config(broker_id)
        logs = LogManager(list(config.log_dirs), broker_log_config(config))
        await trio.to_thread.run_sync(logs.load_all, now_ms())
        replicas = ReplicaManager(config, logs)
        replicas.set_isr_channel(self.controller)
        services = BrokerServices(config, self.controller, replicas)  # type: ignore[arg-type]
        dispatcher = Dispatcher(services)
        pool = RequestMemoryPool(config.queued_max_request_bytes, config.socket_request_max_bytes)
        responses = ResponseMemoryPool(config.fetch_max_bytes)
        limits = ConnectionLimits.from_config(config)

        async def on_connection(stream: trio.SocketStream, spec: ListenerSpec) -> None:
            info = ConnectionInfo(spec.name, "peer", "PLAINTEXT")
            await serve_connection(stream, info, dispatcher, pool, limits=limits, responses=responses)

        stopped = trio.Event()
        try:
            with trio.CancelScope() as scope:
                async with trio.open_nursery() as nursery:
                    await nursery.start(replicas.run)
                    bound: list[BoundListener] = await nursery.start(serve_listeners, config.listeners, on_connection)
                    spec = ListenerSpec(bound[0].spec.name, "127.0.0.1", bound[0].port)
                    self.controller.register_local_broker(BrokerInfo(broker_id, (spec,)))
                    task_status.started(Core(broker_id, config, logs, replicas, bound, scope, stopped))
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(_close, logs)
            stopped.set()

    # -- topics and elections -------------------------------------------------------------

    def create(self, name: str, *, replicas: Sequence[int], leader: int, partitions: int = 1,
               configs: Mapping[str, str] | None = None) -> TopicInfo:
        """Add a topic to the metadata (leader epoch 0, ISR = every replica); nothing is sent."""
        topic = TopicInfo(name, uuid.uuid4(), tuple(
            PartitionInfo(p, leader, 0, tuple(replicas), tuple(replicas)) for p in range(partitions)),
            configs=dict(configs or {}))
        self.controller.add_topic(topic)
        return topic

    async def send_states(self, topic: str, partition: int, to: Sequence[int] | None = None) -> dict[int, ErrorCode]:
        """LeaderAndIsr of the partition's current state to the live replicas (or `to`)."""
        info = self.controller.state(topic, partition)
        t = self.controller.topics()[topic]
        out = {}
        for broker_id in to if to is not None else info.replicas:
            core = self.cores.get(broker_id)
            if core is None:
                continue
            await core.replicas.on_topic_changed(t)  # ZooKeeper mode: the topic's configs only
            result = await core.replicas.apply_leader_and_isr(
                self.controller.controller_id, self.controller.controller_epoch,
                [(topic, t.topic_id, info, False)], self.controller.live())
            out[broker_id] = result[(topic, partition)]
        return out

    async def elect(self, topic: str, partition: int, *, leader: int, isr: Sequence[int] | None = None,
                    to: Sequence[int] | None = None) -> PartitionInfo:
        """A new leader epoch with `leader` (and `isr`), sent to the live replicas (or `to`)."""
        current = self.controller.state(topic, partition)
        info = replace(current, leader=leader, leader_epoch=current.leader_epoch + 1,
                       isr=tuple(isr) if isr is not None else current.isr,
                       partition_epoch=current.partition_epoch + 1)
        self.controller.set_state(topic, info)
        await self.send_states(topic, partition, to)
        return info


def _close(logs: LogManager) -> None:
    logs.checkpoint()
    logs.close()


@asynccontextmanager
async def replication_cluster(root: Path, brokers: int, *, lag_ms: int = 10_000,
                              overrides: Mapping[str, str] | None = None) -> AsyncIterator[ReplicationCluster]:
    async with trio.open_nursery() as nursery:
        cluster = ReplicationCluster(root, nursery, lag_ms=lag_ms, overrides=overrides or {})
        for broker_id in range(1, brokers + 1):
            await cluster.start(broker_id)
        try:
            yield cluster
        finally:
            nursery.cancel_scope.cancel()
