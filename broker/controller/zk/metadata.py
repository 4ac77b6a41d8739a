"""A broker's view of a ZooKeeper-mode cluster: the ``Controller`` interface in ZooKeeper mode.

Reads (brokers, topics, leaders, ISRs) come from the metadata cache that the elected controller
fills with UpdateMetadata, as Kafka's MetadataCache; topic configs come from
``/config/topics/<t>``, re-read when a ``/config/changes/config_change_*`` notification names
the topic. Changes are written to ZooKeeper as Kafka's AdminZkClient writes them, and the
controller (wherever it runs) does the rest:

* create a topic: ``/config/topics/<t>``, then ``/brokers/topics/<t>`` with the replica
  assignment and a topic id; the call returns once this broker's cache shows the topic with
  leaders (bounded: the topic exists even if the wait runs out);
* delete: ``/admin/delete_topics/<t>``;
* add partitions: the assignment grows (a conditional write on its version);
* topic configs: ``/config/topics/<t>`` plus a change notification;
* dynamic broker configs: ``/config/brokers/<id>`` or ``/config/brokers/<default>`` plus a change
  notification (``brokers/<id>``, ``brokers/<default>``); every broker re-reads both layers when
  one names it or the default, builds its effective config (BrokerConfig.with_dynamic) and hands
  it to whoever listens (the request handlers, the replica manager, the controller).

This object also owns the broker's ZooKeeper life: its registration (``/brokers/ids/<id>``, whose
czxid is the broker epoch), its part in controller elections, and its reaction to a lost session
(leaderships fenced, registration renewed).
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import trio

from broker.client.connection import ClientError, open_connection
from broker.config import DYNAMIC_BROKER_KEYS, IGNORED_DYNAMIC_KEYS, BrokerConfig, ListenerSpec
from broker.controller.assignment import (
    assign_replicas,
    check_partition_limits,
    replicas_per_broker,
    start_index_for_growth,
    validate_assignment,
)
from broker.controller.base import Controller, MetadataListener, NewTopic, PartitionBudget
from broker.controller.model import (
    BrokerInfo,
    PartitionInfo,
    TopicInfo,
    is_internal_topic,
    validate_topic_name,
)
from broker.controller.zk import znodes
from broker.controller.zk.acls import ZkAclZnodes
from broker.controller.zk.client import ZkBadVersion, ZkClient, ZkError, ZkNodeExists, ZkNoNode, ZkSessionState
from broker.controller.zk.context import LEADER_DURING_DELETE
from broker.controller.zk.controller import ZkController, run_controller_election
from broker.controller.zk.producer_ids import allocate_producer_id_block
from broker.controller.zk.registration import register_broker
from broker.ids import random_uuid
from broker.log_limits import limiter
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.messages import (
    AlterPartitionRequest,
    ControlledShutdownRequest,
    LeaderAndIsrRequest,
    UpdateMetadataRequest,
)
from broker.retry import Backoff, retry, worth_reporting

if TYPE_CHECKING:
    from broker.client.connection import ClientSecurity

__all__ = ["LocalReplicas", "ZkMetadata"]

log = logging.getLogger(__name__)
_limited = limiter(log)

# How long a change the broker asks for itself (__consumer_offsets, auto-created topics) waits
# for the controller to make it visible in this broker's cache. Admin requests wait up to their
# own timeout_ms instead (the ``deadline`` of create_topic, delete_topic, create_partitions).
ADMIN_WAIT_S = 30.0
# Config change notifications older than this are removed (Kafka's changeExpirationMs).
CONFIG_CHANGE_EXPIRY_MS = 15 * 60 * 1000
# Reads of /controller and /controller_epoch before a request claiming a newer epoch is refused.
_CONTROLLER_READS = 4


def _fold_names(names: Iterable[str]) -> dict[str, list[str]]:
    """Topic names by their metric name ('.' and '_' are the same there): names that collide."""
    folded: dict[str, list[str]] = {}
    for name in names:
        folded.setdefault(name.replace(".", "_"), []).append(name)
    return folded


@dataclass(slots=True)
class _Existing:
    """The cluster as one CreateTopics request checks its topics against it: read from ZooKeeper
    once for the request (``ZkMetadata._read_existing``), then each topic it writes added, so the
    later topics of the request are checked with the earlier ones counted and the work per topic
    is proportional to the topic, not to the cluster."""

    brokers: list[int]
    names: set[str]
    folded: dict[str, list[str]]
    held: Counter[int]  # broker -> partition replicas it holds
    partitions: int

    def add(self, name: str, replicas: Mapping[int, int], partitions: int) -> None:
        self.names.add(name)
        self.folded.setdefault(name.replace(".", "_"), []).append(name)
        self.held.update(replicas)
        self.partitions += partitions


class LocalPartition(Protocol):
    is_leader: bool

    def make_offline(self) -> None:
        """Stop leading."""


class LocalReplicas(MetadataListener, Protocol):
    """What this broker's metadata asks of the replicas it hosts (the replica manager, which
    sits above the controller): topic changes and dynamic configs to apply, leaderships to fence
    when the session is lost, and a way to hear of log dir events."""

    def partitions(self) -> Sequence[LocalPartition]: ...

    def reconfigure(self, config: BrokerConfig) -> None: ...

    def on_log_dir_event(self, announce: Callable[[], Awaitable[None]]) -> None:
        """``announce`` is called when a log dir went offline or came back."""


class ZkMetadata(Controller):
    """The ``Controller`` of a broker in ZooKeeper mode; see the module docstring."""

    def __init__(self, config: BrokerConfig, zk: ZkClient, cluster_id: str, replicas: LocalReplicas, *,
                 security: ClientSecurity | None = None) -> None:
        """`security`: how this broker reaches its peers' inter-broker listener (the controller's
        requests, ControlledShutdown, AlterPartition); None: PLAINTEXT."""
        self._config = config
        self.inter_broker_security = security
        self._zk = zk
        self._cluster_id = cluster_id
        self._replicas = replicas
        self._local: BrokerInfo | None = None
        self.broker_epoch = -1
        # The metadata cache, as the last UpdateMetadata left it.
        self._controller_id = -1
        self._brokers: dict[int, BrokerInfo] = {}
        self._topics: dict[str, TopicInfo] = {}
        self._configs: dict[str, dict[str, str]] = {}
        self._changed = trio.Event()
        # (controller id, epoch) of the newest controller seen, checked against ZooKeeper.
        self._known_controller = (-1, -1)
        self._active: ZkController | None = None
        self._registered = trio.Event()
        self._term_scope: trio.CancelScope | None = None
        self._producer_ids: range = range(0)
        # One growth of the cluster at a time from this broker, counted and written under it, so
        # that two creations here never both fit under a partition limit only one fits under.
        self._placing = trio.Lock()
        self._static_config = config
        self._broker_config_listeners: list[Callable[[BrokerConfig], None]] = []
        replicas.on_log_dir_event(self._propagate_log_dir_event)

    # -- Controller: reads ------------------------------------------------------------------

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    @property
    def controller_id(self) -> int:
        return self._controller_id

    def brokers(self) -> Sequence[BrokerInfo]:
        if self._local is not None and self._local.broker_id not in self._brokers:
            # Before the first UpdateMetadata: at least this broker (FindCoordinator needs it).
            return (*self._brokers.values(), self._local)
        return tuple(self._brokers.values())

    def topics(self) -> Mapping[str, TopicInfo]:
        return self._topics

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        for topic in self._topics.values():
            if topic.topic_id == topic_id:
                return topic
        return None

    def zookeeper(self) -> ZkMetadata:
        """This broker is in ZooKeeper mode: this object is its ZooKeeperSupport too."""
        return self

    def register_local_broker(self, info: BrokerInfo) -> None:
        self._local = info

    @property
    def config(self) -> BrokerConfig:
        """This broker's config as it is now: the dynamic broker configs applied."""
        return self._config

    def active_controller(self) -> ZkController | None:
        """This broker's controller term, when it is the controller."""
        return self._active

    # -- the broker's ZooKeeper life ----------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Register this broker, take part in controller elections, follow config changes and
        survive session losses, until cancelled. Ready once registered (dynamic broker configs
        applied first)."""
        await self._load_broker_configs()
        await self._register()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._follow_session)
            nursery.start_soon(self._elections)
            nursery.start_soon(self._follow_config_changes)
            task_status.started()

    async def _register(self) -> None:
        assert self._local is not None, "register_local_broker first"
        self.broker_epoch = await register_broker(self._zk, self._local, self._config.security_protocols)
        self._registered.set()

    async def _elections(self) -> None:
        while True:
            await self._registered.wait()
            self._term_scope = trio.CancelScope()
            with self._term_scope:
                await run_controller_election(self._config, self._zk, self._on_term,
                                              security=self.inter_broker_security)

    def _on_term(self, controller: ZkController | None) -> None:
        self._active = controller
        if controller is not None:
            controller.reconfigure(self._config)  # the dynamic configs of now, not the term's start

    async def _follow_session(self) -> None:
        events = self._zk.session_events()
        async for event in events:
            if event.state is ZkSessionState.LOST:
                await self._session_lost()

    async def _session_lost(self) -> None:
        """Kafka's session-expiry handling: stop acting on a registration that no longer exists.
        The controller term ends, leaderships stop (a new controller has moved them, or will), and
        the broker registers again with a new broker epoch."""
        log.warning("ZooKeeper session of broker %d expired: fencing its leaderships and registering again",
                    self._config.broker_id)
        self._registered = trio.Event()
        if self._term_scope is not None:
            self._term_scope.cancel()
        fenced = 0
        for partition in self._replicas.partitions():
            if partition.is_leader:
                partition.make_offline()
                fenced += 1
        if fenced:
            log.warning("broker %d stopped leading %d partitions until the controller says otherwise",
                        self._config.broker_id, fenced)
        while True:
            try:
                await self._register()
                return
            except ZkError as exc:
                log.warning("registering broker %d again failed (%s); retrying", self._config.broker_id, exc)
                await trio.sleep(1.0)

    async def _propagate_log_dir_event(self) -> None:
        """Kafka's propagateLogDirEvent: a sequential ``/log_dir_event_notification`` znode naming
        this broker, after one of its log dirs went offline or came back; the controller then
        asks it for its replicas' state. Retried until written (ZooKeeper may be away a while)."""
        def report(exc: Exception, failures: int) -> None:
            if worth_reporting(failures):
                log.warning("cannot tell the controller of a log dir event of broker %d (%s); retrying (failure %d)",
                            self._config.broker_id, exc, failures)

        await retry(lambda: self._zk.create(znodes.log_dir_event_prefix_path(),
                                            znodes.encode_log_dir_event(self._config.broker_id), sequence=True),
                    retriable=ZkError, backoff=Backoff(0.5, 10.0), on_failure=report, deadline=math.inf)

    async def _follow_config_changes(self) -> None:
        """Apply the config changes announced under /config/changes (Kafka's
        ZkNodeChangeNotificationListener), and remove notifications older than 15 minutes, as
        every Kafka broker does, so they do not pile up.

        The notifications already there when the watch starts are applied too, as Kafka's
        listener does on startup: a change announced between this broker's first read of its
        configs and its watch would otherwise be missed until the next one. Applying one is
        re-reading its entity's configs, so applying it twice is harmless; each entity is
        re-read once per batch however many notifications name it."""
        seen: set[str] = set()
        with self._zk.watch_children(znodes.CONFIG_CHANGES) as changes:
            async for children in changes:
                names = set(children)
                fresh = names - seen
                seen = names
                entities: set[str] = set()
                for child in sorted(fresh):
                    path = f"{znodes.CONFIG_CHANGES}/{child}"
                    try:
                        data, _ = await self._zk.get(path)
                        entities.add(znodes.parse_config_change(path, data))
                    except ZkNoNode:
                        continue
                    except znodes.ZnodeError as exc:
                        # Anyone with write access to ZooKeeper can create these: one line per
                        # window, then counted (each broker would otherwise log each one).
                        _limited.error("config change notification", "ignoring config change notification: %s",
                                       exc)
                for entity in sorted(entities):
                    kind, _, name = entity.partition("/")
                    if kind == "topics" and name in self._topics:
                        await self._load_topic_configs(name)
                    elif kind == "brokers" and name in (znodes.DEFAULT_ENTITY, str(self._config.broker_id)):
                        await self._load_broker_configs()
                if fresh:
                    await self._purge_config_changes(sorted(names - fresh))

    async def _purge_config_changes(self, children: Sequence[str]) -> None:
        expired_before = time.time() * 1000 - CONFIG_CHANGE_EXPIRY_MS
        for child in children:
            path = f"{znodes.CONFIG_CHANGES}/{child}"
            try:
                stat = await self._zk.exists(path)
                if stat is not None and stat.ctime < expired_before:
                    await self._zk.delete(path, version=stat.version)
            except ZkError:
                continue  # another broker purged it first

    async def _load_topic_configs(self, name: str) -> None:
        path = znodes.topic_config_path(name)
        try:
            data, _ = await self._zk.get(path)
            configs = znodes.parse_config(path, data)
        except ZkNoNode:
            configs = {}
        except znodes.ZnodeError as exc:
            _limited.error("topic config znode", "keeping the previous configs of topic %s: %s", name, exc)
            return
        self._configs[name] = configs
        topic = self._topics.get(name)
        if topic is not None:
            topic = TopicInfo(topic.name, topic.topic_id, topic.partitions, dict(configs), topic.is_internal)
            self._topics[name] = topic
            await self._replicas.on_topic_changed(topic)
            self._signal()

    # -- dynamic broker configs -------------------------------------------------------------

    def on_broker_config(self, listener: Callable[[BrokerConfig], None]) -> None:
        """Call ``listener`` with the effective config each time dynamic broker configs change."""
        self._broker_config_listeners.append(listener)

    async def broker_configs(self, entity: str) -> dict[str, str]:
        """The dynamic configs in ``/config/brokers/<entity>`` (a broker id or ``<default>``)."""
        return await self._entity_configs("brokers", entity)

    async def set_broker_configs(self, entity: str, configs: Mapping[str, str]) -> None:
        """Write ``/config/brokers/<entity>`` and announce it (AdminZkClient.changeBrokerConfig),
        then apply it here; the other brokers apply it on the notification."""
        await self._set_entity_configs("brokers", entity, configs)
        await self._load_broker_configs()

    async def user_configs(self, user: str) -> dict[str, str]:
        return await self._entity_configs("users", znodes.sanitized(user))

    async def set_user_configs(self, user: str, configs: Mapping[str, str]) -> None:
        await self._set_entity_configs("users", znodes.sanitized(user), configs)

    async def users_with_configs(self) -> list[str]:
        try:
            children = await self._zk.get_children(f"{znodes.CONFIG}/users")
        except ZkNoNode:
            return []
        except ZkError as exc:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"cannot list {znodes.CONFIG}/users: {exc}") from exc
        return sorted(znodes.desanitized(child) for child in children)

    def acl_znodes(self) -> ZkAclZnodes:
        return ZkAclZnodes(self._zk)

    async def _entity_configs(self, entity_type: str, name: str) -> dict[str, str]:
        path = znodes.config_entity_path(entity_type, name)
        try:
            data, _ = await self._zk.get(path)
            return znodes.parse_config(path, data)
        except ZkNoNode:
            return {}
        except znodes.ZnodeError as exc:
            raise KafkaError(ErrorCode.INVALID_CONFIG, str(exc)) from exc
        except ZkError as exc:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"cannot read {path} from ZooKeeper: {exc}") from exc

    async def _set_entity_configs(self, entity_type: str, name: str, configs: Mapping[str, str]) -> None:
        """Write ``/config/<type>/<name>`` and announce the change, as Kafka's AdminZkClient."""
        path = znodes.config_entity_path(entity_type, name)
        try:
            try:
                await self._zk.set(path, znodes.encode_config(configs))
            except ZkNoNode:
                await self._zk.create(path, znodes.encode_config(configs), make_parents=True)
        except ZkError as exc:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"cannot write {path}: {exc}") from exc
        try:
            await self._zk.create(znodes.config_change_prefix_path(),
                                  znodes.encode_config_change(f"{entity_type}/{name}"), sequence=True)
        except ZkError as exc:
            log.warning("%s written, but the change notification failed: %s", path, exc)

    async def _load_broker_configs(self) -> None:
        """Read both dynamic layers and apply the result. Keys that cannot change at run time
        (written by hand or by another version) and values that do not parse are left out with
        an error naming the znode, as Kafka skips an invalid dynamic config: the broker runs on."""
        layers: list[dict[str, str]] = []
        for entity in (znodes.DEFAULT_ENTITY, str(self._config.broker_id)):
            path = znodes.config_entity_path("brokers", entity)
            try:
                configs = await self.broker_configs(entity)
            except KafkaError as exc:
                _limited.error("broker config znode", "dynamic broker configs of %s left out: %s", path,
                               exc.message)
                configs = {}
            refused = sorted(k for k in configs if k not in DYNAMIC_BROKER_KEYS | IGNORED_DYNAMIC_KEYS)
            if refused:
                _limited.error("broker config znode keys", "znode %s: ignoring %s: not dynamically updatable",
                               path, ", ".join(refused))
            layers.append({k: v for k, v in configs.items() if k not in refused})
        default, per_broker = layers
        if (default, per_broker) == (dict(self._config.dynamic_default), dict(self._config.dynamic_broker)):
            return
        try:
            config = self._static_config.with_dynamic(default, per_broker)
        except ValueError as exc:  # ConfigError
            _limited.error("broker config values", "dynamic broker configs not applied: %s (default %s, "
                           "broker %d %s)", exc, default, self._config.broker_id, per_broker)
            return
        log.info("broker %d applies dynamic configs: default %s, its own %s", config.broker_id, default, per_broker)
        self._config = config
        if self._active is not None:
            self._active.reconfigure(config)
        self._replicas.reconfigure(config)
        for topic in list(self._topics.values()):
            await self._replicas.on_topic_changed(topic)
        for listener in self._broker_config_listeners:
            listener(config)

    # -- requests from the controller ---------------------------------------------------------

    async def check_controller(self, controller_id: int, controller_epoch: int, broker_epoch: int) -> ErrorCode:
        """NONE when the sender is ZooKeeper's current controller and the request is for this
        broker's current registration."""
        known_id, known_epoch = self._known_controller
        if controller_epoch < known_epoch:
            return ErrorCode.STALE_CONTROLLER_EPOCH
        if (controller_id, controller_epoch) != (known_id, known_epoch):
            # A new controller (or an impostor): ask ZooKeeper who it is. The ZooKeeper server
            # this broker talks to may lag the one the controller wrote to by a moment: a newer
            # epoch than it shows is asked again a few times before it is refused.
            for attempt in range(_CONTROLLER_READS):
                try:
                    raw_id, _ = await self._zk.get(znodes.CONTROLLER)
                    raw_epoch, _ = await self._zk.get(znodes.CONTROLLER_EPOCH)
                    current_id = znodes.parse_controller(znodes.CONTROLLER, raw_id).brokerid
                    current_epoch = znodes.parse_controller_epoch(znodes.CONTROLLER_EPOCH, raw_epoch)
                except (ZkError, znodes.ZnodeError) as exc:
                    log.warning("cannot check the controller in ZooKeeper: %s", exc)
                    return ErrorCode.STALE_CONTROLLER_EPOCH
                if (controller_id, controller_epoch) == (current_id, current_epoch):
                    break
                if controller_epoch <= current_epoch or attempt == _CONTROLLER_READS - 1:
                    return ErrorCode.STALE_CONTROLLER_EPOCH
                await trio.sleep(0.1 * (attempt + 1))
            self._known_controller = (current_id, current_epoch)
        if broker_epoch != self.broker_epoch:
            return ErrorCode.STALE_BROKER_EPOCH
        return ErrorCode.NONE

    def brokers_for_leader_and_isr(self, live_leaders: Sequence[LeaderAndIsrRequest.LeaderAndIsrLiveLeader],
                                   ) -> dict[int, BrokerInfo]:
        """The brokers a LeaderAndIsr names, with the leaders' inter-broker addresses from the
        request itself (the cache may not know a new leader yet)."""
        out = dict(self._brokers)
        listener = self._config.inter_broker_listener
        for leader in live_leaders:
            known = out.get(leader.broker_id)
            endpoint = ListenerSpec(listener, leader.host_name, leader.port)
            if known is None:
                out[leader.broker_id] = BrokerInfo(leader.broker_id, (endpoint,))
            elif known.endpoint(listener) is None:
                out[leader.broker_id] = BrokerInfo(known.broker_id, (*known.endpoints, endpoint), known.rack)
        return out

    async def before_leader_and_isr(self, states: Sequence[tuple[str, uuid.UUID, PartitionInfo, bool]]) -> None:
        """The topics of a LeaderAndIsr that this broker has not seen yet: their configs are read
        and handed to the replica manager first, so new logs are made with them."""
        for name, topic_id in {(state[0], state[1]) for state in states}:
            if name not in self._configs:
                await self._load_topic_configs_only(name)
                await self._replicas.on_topic_changed(TopicInfo(name, topic_id, (), dict(self._configs[name]),
                                                                is_internal_topic(name)))

    async def _load_topic_configs_only(self, name: str) -> None:
        path = znodes.topic_config_path(name)
        try:
            data, _ = await self._zk.get(path)
            self._configs[name] = znodes.parse_config(path, data)
        except ZkNoNode:
            self._configs[name] = {}
        except znodes.ZnodeError as exc:
            log.error("topic %s keeps the broker's defaults: %s", name, exc)
            self._configs[name] = {}

    async def apply_update_metadata(self, request: UpdateMetadataRequest) -> None:
        """Merge an UpdateMetadata into the cache (Kafka's MetadataCache.updateMetadata)."""
        self._controller_id = request.controller_id
        brokers: dict[int, BrokerInfo] = {}
        for broker in request.live_brokers:
            endpoints = tuple(ListenerSpec(e.listener.upper(), e.host, e.port) for e in broker.endpoints)
            brokers[broker.id] = BrokerInfo(broker.id, endpoints, broker.rack)
        self._brokers = brokers
        for topic_state in request.topic_states:
            name = topic_state.topic_name
            if validate_topic_name(name) is not None:
                continue
            existing = self._topics.get(name)
            partitions = {p.partition: p for p in existing.partitions} if existing is not None else {}
            for p in topic_state.partition_states:
                if p.leader == LEADER_DURING_DELETE:
                    partitions.pop(p.partition_index, None)
                    continue
                partitions[p.partition_index] = PartitionInfo(
                    partition=p.partition_index, leader=p.leader, leader_epoch=p.leader_epoch,
                    replicas=tuple(p.replicas), isr=tuple(p.isr), partition_epoch=p.zk_version)
            if not partitions:
                self._topics.pop(name, None)
                self._configs.pop(name, None)
                continue
            if name not in self._configs:
                await self._load_topic_configs_only(name)
            topic_id = topic_state.topic_id if existing is None else existing.topic_id
            self._topics[name] = TopicInfo(
                name, topic_id, tuple(partitions[i] for i in sorted(partitions)),
                dict(self._configs.get(name, {})), is_internal_topic(name))
        self._signal()

    def _signal(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def _wait_for(self, ready: Any, what: str, deadline: float | None) -> None:
        """Wait until ``ready()`` holds in this broker's cache, once the change is in ZooKeeper.

        ``deadline`` (trio clock) is an admin request's: past it, the change is still pending and
        the caller gets REQUEST_TIMED_OUT while the controller goes on with it (Kafka's
        DelayedCreatePartitions / DelayedDeleteTopics on expiry). A request whose timeout_ms is
        <= 0 has its deadline already past: it is answered REQUEST_TIMED_OUT right after the
        znodes are written, without looking at the metadata (Kafka's ZkAdminManager).
        ``None``: the broker's own change, waited for up to ADMIN_WAIT_S, then logged."""
        if deadline is None:
            with trio.move_on_after(ADMIN_WAIT_S):
                while not ready():
                    await self._changed.wait()
                return
            log.warning("%s after %gs (seen from broker %d); the controller goes on with it",
                        what, ADMIN_WAIT_S, self._config.broker_id)
            return
        if trio.current_time() < deadline:
            with trio.move_on_at(deadline):
                while not ready():
                    await self._changed.wait()
                return
        raise KafkaError(ErrorCode.REQUEST_TIMED_OUT,
                         f"{what} when the request's timeout passed; the controller goes on with it.")

    async def controlled_shutdown(self) -> None:
        """Ask the controller to move this broker's leaderships away before it stops (Kafka's
        controlled shutdown): ControlledShutdown, again after controlled.shutdown.retry.backoff.ms
        while partitions remain, at most controlled.shutdown.max.retries times. The controller
        itself just resigns (its session closes next), as Kafka's does."""
        config = self._config
        if not config.controlled_shutdown_enable or self.broker_epoch < 0:
            return
        request = ControlledShutdownRequest(broker_id=config.broker_id, broker_epoch=self.broker_epoch)
        for attempt in range(1, config.controlled_shutdown_max_retries + 1):
            # Who the controller is now (it may have moved while this broker stopped serving).
            try:
                raw, _ = await self._zk.get(znodes.CONTROLLER)
                controller_id = znodes.parse_controller(znodes.CONTROLLER, raw).brokerid
            except (ZkError, znodes.ZnodeError):
                controller_id = -1
            if controller_id == config.broker_id:
                return  # this broker is the controller: its term ends with its session
            broker = self._brokers.get(controller_id)
            endpoint = broker.inter_broker_endpoint(config) if broker is not None else None
            problem: str
            if endpoint is None:
                problem = "no controller known"
            else:
                try:
                    async with open_connection(endpoint.host, endpoint.port, client_id=f"broker-{config.broker_id}",
                                               request_timeout_s=config.controller_socket_timeout_ms / 1000,
                                               security=self.inter_broker_security) as conn:
                        response = await conn.request(request)
                except (ClientError, KafkaError) as exc:
                    problem = str(exc)
                else:
                    if response.error_code == 0 and not response.remaining_partitions:
                        log.info("controlled shutdown of broker %d done: it leads no replicated partition",
                                 config.broker_id)
                        return
                    problem = (ErrorCode(response.error_code).name if response.error_code else
                               f"{len(response.remaining_partitions)} partitions still led here")
            log.warning("controlled shutdown of broker %d, attempt %d of %d: %s", config.broker_id, attempt,
                        config.controlled_shutdown_max_retries, problem)
            if attempt < config.controlled_shutdown_max_retries:
                await trio.sleep(config.controlled_shutdown_retry_backoff_ms / 1000)
        log.warning("broker %d shuts down without a complete controlled shutdown; the controller moves what "
                    "it still leads when its session closes", config.broker_id)

    # -- services for the rest of the broker -------------------------------------------------

    def isr_channel(self) -> ControllerIsrChannel:
        """What the replica manager asks ISR changes through (AlterPartition to the controller)."""
        return ControllerIsrChannel(self)

    async def wait_for_controller(self) -> None:
        """Return once a controller's UpdateMetadata reached this broker. Until then Metadata
        answers name no controller and only this broker, and an admin request sent then (a
        CreateTopics right after start) waits in the client for its own timeout."""
        while self._controller_id < 0:
            await self._changed.wait()

    async def ensure_offsets_topic(self, ensure: Callable[[], Awaitable[None]]) -> None:
        """Create ``__consumer_offsets`` once a controller runs, with offsets.topic.replication.factor
        capped by the brokers registered then (Kafka creates it on the first FindCoordinator; the
        group coordinator then follows its partition leaders through the replica manager)."""
        while self._controller_id < 0:
            await self._changed.wait()
        wanted = self._config.offsets_topic_replication_factor
        # Give brokers starting together a moment to register, so the first one up does not
        # create the topic with fewer replicas than the cluster will have.
        with trio.move_on_after(self._config.zookeeper_session_timeout_ms / 1000):
            while len(self._brokers) < wanted:
                await self._changed.wait()
        def report(exc: Exception, failures: int) -> None:
            # A refusal that retrying does not cure (POLICY_VIOLATION under a partition limit)
            # must not write a line a second for as long as it lasts.
            if worth_reporting(failures):
                log.warning("cannot create __consumer_offsets yet (%s); retrying (failure %d)", exc, failures)

        await retry(ensure, retriable=KafkaError, backoff=Backoff(1.0, 30.0), on_failure=report, deadline=math.inf)

    # -- Controller: changes ------------------------------------------------------------------

    async def allocate_producer_id(self) -> int:
        if not self._producer_ids:
            try:
                self._producer_ids = await allocate_producer_id_block(self._zk, self._config.broker_id)
            except ZkError as exc:
                raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                 f"cannot allocate producer ids in ZooKeeper: {exc}") from exc
        producer_id = self._producer_ids[0]
        self._producer_ids = self._producer_ids[1:]
        return producer_id

    async def _live_broker_ids(self) -> list[int]:
        try:
            children = await self._zk.get_children(znodes.BROKER_IDS)
        except ZkError as exc:
            raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, f"cannot read the brokers from ZooKeeper: {exc}") from exc
        return sorted(int(c) for c in children if c.isdigit())

    async def create_topics(
        self,
        topics: Sequence[NewTopic],
        *,
        validate_only: bool = False,
        deadline: float | None = None,
        budget: PartitionBudget | None = None,
    ) -> list[TopicInfo | KafkaError]:
        """Each topic's znodes are written in request order, each checked with the ones before it
        in ZooKeeper (Kafka's AdminZkClient writes a CreateTopics topic by topic); then the
        leaders of all of them are waited for together, up to the request's one deadline."""
        results: list[TopicInfo | KafkaError] = []
        written: list[tuple[int, str, int]] = []
        async with self._placing:  # one request's topics are checked and written before another's
            existing: _Existing | None = None  # read once, at the first topic that needs it
            for new in topics:
                try:
                    if budget is not None and new.num_partitions >= 1:
                        budget.take(new.num_partitions)
                    problem = validate_topic_name(new.name)
                    if problem is not None:
                        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
                    if existing is None:
                        existing = await self._read_existing()
                    info, assignment = await self._write_new_topic(new, existing, validate_only)
                    if budget is not None:
                        budget.commit(new.num_partitions)
                except KafkaError as exc:
                    results.append(exc)
                    continue
                if not validate_only:
                    written.append((len(results), new.name, len(assignment)))
                results.append(info)

        async def wait_for_leaders(index: int, name: str, count: int) -> None:
            try:
                await self._wait_for(lambda: self._has_leaders(name, count),
                                     f"Topic '{name}' is written to ZooKeeper, but not every partition had a leader "
                                     "yet", deadline)
            except KafkaError as exc:
                results[index] = exc
            else:
                results[index] = self._topics.get(name, results[index])

        async with trio.open_nursery() as nursery:
            for index, name, count in written:
                nursery.start_soon(wait_for_leaders, index, name, count)
        return results

    async def _read_existing(self) -> _Existing:
        """What ZooKeeper holds now, for the topics of one CreateTopics request (Kafka's
        AdminZkClient reads the cluster's topics to check a new one): the live brokers, every
        topic's name (``/brokers/topics``), and the replicas each broker holds. Raises KafkaError."""
        brokers = await self._live_broker_ids()
        names = await self._topic_names()
        held = await self._held_replicas(names)
        return _Existing(brokers, set(names), _fold_names(names), replicas_per_broker(held), len(held))

    async def _write_new_topic(self, new: NewTopic, existing: _Existing, validate_only: bool
                               ) -> tuple[TopicInfo, dict[int, list[int]]]:
        """Check a new topic against ``existing`` (within the partition limits too) and, unless
        ``validate_only``, write its znodes and count it in ``existing``; returns it and its assignment."""
        name, replication_factor, configs = new.name, new.replication_factor, new.configs
        if name in existing.names:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        colliding = existing.folded.get(name.replace(".", "_"))
        if colliding:
            raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                             f"Topic '{name}' collides with existing topics: {', '.join(colliding)}")
        brokers = existing.brokers
        if new.assignments:
            assignment = {p: list(r) for p, r in new.assignments.items()}
            validate_assignment(assignment, brokers)
        else:
            if name == "__consumer_offsets":
                # offsets.topic.replication.factor, capped by the brokers present (plan of issue 12).
                replication_factor = max(1, min(self._config.offsets_topic_replication_factor, len(brokers)))
            assignment = assign_replicas(brokers, new.num_partitions, replication_factor)
        adding = replicas_per_broker(assignment.values())
        check_partition_limits(self._config, existing.held, existing.partitions, adding, len(assignment))
        topic_id = random_uuid()
        partitions = tuple(PartitionInfo(p, -1, 0, tuple(r), ()) for p, r in sorted(assignment.items()))
        info = TopicInfo(name, topic_id, partitions, dict(configs), is_internal_topic(name))
        if validate_only:
            return info, assignment
        try:
            # Kafka writes the config first: brokers that see the topic find its configs.
            config_path = znodes.topic_config_path(name)
            try:
                await self._zk.create(config_path, znodes.encode_config(configs), make_parents=True)
            except ZkNodeExists:
                await self._zk.set(config_path, znodes.encode_config(configs))
            await self._zk.create(znodes.topic_path(name), znodes.encode_topic(topic_id, assignment),
                                  make_parents=True)
        except ZkNodeExists:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.") from None
        except ZkError as exc:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"cannot write topic {name} to ZooKeeper: {exc}") from exc
        log.info("created topic %s: %d partitions, assignment %s", name, len(assignment),
                 {p: list(r) for p, r in sorted(assignment.items())})
        existing.add(name, adding, len(assignment))
        return info, assignment

    async def _topic_names(self) -> list[str]:
        try:
            return await self._zk.get_children(znodes.BROKER_TOPICS)
        except ZkError as exc:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"cannot read topics from ZooKeeper: {exc}") from exc

    async def _check_partition_limits(self, adding: Mapping[int, Sequence[int]], names: Sequence[str]) -> None:
        """KIP-578's limits against what ZooKeeper holds, the topics ``names`` (``/brokers/topics``)
        counted as ``_held_replicas`` does. Raises KafkaError(POLICY_VIOLATION)."""
        held = await self._held_replicas(names)
        check_partition_limits(self._config, replicas_per_broker(held), len(held),
                               replicas_per_broker(adding.values()), len(adding))

    async def _held_replicas(self, names: Sequence[str]) -> list[Sequence[int]]:
        """The replicas of every partition of the topics ``names``, each as this broker's cache
        shows it, or read from its znode when the cache does not have it yet (created a moment ago,
        perhaps by another broker). Topics marked for deletion do not count: a DeleteTopics
        answered makes room at once. Raises KafkaError(KAFKA_STORAGE_ERROR)."""
        try:
            deleting = set(await self._zk.get_children(znodes.DELETE_TOPICS))
        except ZkNoNode:
            deleting = set()
        except ZkError as exc:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"cannot read topics from ZooKeeper: {exc}") from exc
        held: list[Sequence[int]] = []
        for name in names:
            if name in deleting:
                continue
            cached = self._topics.get(name)
            if cached is not None:
                held.extend(p.replicas for p in cached.partitions)
                continue
            path = f"{znodes.BROKER_TOPICS}/{name}"
            try:
                data, _ = await self._zk.get(path)
                held.extend(znodes.parse_topic(path, data).replicas().values())
            except (ZkNoNode, znodes.ZnodeError, ValueError):
                continue  # gone, or a znode no controller serves a partition of
            except ZkError as exc:
                raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"cannot read {path}: {exc}") from exc
        return held

    async def wait_for_leaders(self, expected: Mapping[tuple[str, int], int], timeout_s: float
                               ) -> set[tuple[str, int]]:
        """Wait until this broker's cache shows each partition led by its expected leader, at most
        ``timeout_s`` (Kafka's DelayedElectLeader); returns the partitions it still does not."""
        def missing() -> set[tuple[str, int]]:
            seen = {(name, p.partition): p.leader for name, topic in self._topics.items() for p in topic.partitions}
            return {tp for tp, leader in expected.items() if seen.get(tp) != leader}

        with trio.move_on_after(timeout_s):
            while missing():
                await self._changed.wait()
        return missing()

    def _has_leaders(self, name: str, count: int) -> bool:
        topic = self._topics.get(name)
        return topic is not None and len(topic.partitions) >= count and all(p.leader >= 0 for p in topic.partitions)

    async def delete_topic(self, name: str, *, deadline: float | None = None) -> None:
        try:
            if await self._zk.exists(znodes.topic_path(name)) is None:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"This server does not host topic '{name}'.")
            await self._zk.create(znodes.delete_topic_path(name), b"", make_parents=True)
        except ZkNodeExists:
            pass  # deletion already asked for
        except ValueError as exc:
            raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, str(exc)) from exc
        except ZkError as exc:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"cannot mark {name} for deletion: {exc}") from exc
        await self._wait_for(lambda: name not in self._topics,
                             f"Topic '{name}' is marked for deletion, but was not deleted yet", deadline)

    async def raise_leader_epochs(self, wanted: Mapping[tuple[str, int], int]
                                  ) -> dict[tuple[str, int], tuple[ErrorCode, str | None, int]]:
        """The controller raises them (broker/controller/zk/leader_epochs.py); a broker that is
        not the controller answers NOT_CONTROLLER, as ElectLeaders."""
        active = self._active
        if active is None:
            return {tp: (ErrorCode.NOT_CONTROLLER, None, -1) for tp in wanted}
        try:
            return await active.raise_leader_epochs(wanted)
        except KafkaError as exc:  # the term ended meanwhile
            return {tp: (exc.code, exc.message or None, -1) for tp in wanted}

    async def create_partitions(self, name: str, total: int, *, validate_only: bool = False,
                                assignments: Sequence[Sequence[int]] | None = None,
                                deadline: float | None = None) -> None:
        async with self._placing:
            await self._write_growth(name, total, validate_only, assignments)
        if validate_only:
            return
        await self._wait_for(lambda: self._has_leaders(name, total),
                             f"The new partitions of '{name}' are in ZooKeeper, but not every one had a leader yet",
                             deadline)

    async def _write_growth(self, name: str, total: int, validate_only: bool,
                            assignments: Sequence[Sequence[int]] | None) -> None:
        """Check the growth of ``name`` to ``total`` partitions (within the partition limits too)
        and, unless ``validate_only``, write it to the topic znode."""
        path = znodes.topic_path(name)
        try:
            data, stat = await self._zk.get(path)
        except ZkNoNode:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"This server does not host topic '{name}'.") from None
        except ZkError as exc:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"cannot read topic {name}: {exc}") from exc
        try:
            current = znodes.parse_topic(path, data)
        except znodes.ZnodeError as exc:
            raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc)) from exc
        if current.adding() or current.removing():
            # Rewriting the znode would drop adding_replicas/removing_replicas (as Kafka refuses it).
            raise KafkaError(ErrorCode.REASSIGNMENT_IN_PROGRESS,
                             f"A partition reassignment is in progress for the topic '{name}'.")
        existing = current.replicas()
        if total <= len(existing):
            raise KafkaError(ErrorCode.INVALID_PARTITIONS,
                             f"Topic currently has {len(existing)} partitions, {total} would not be an increase.")
        brokers = await self._live_broker_ids()
        replication = len(existing[0]) if existing else 1
        if assignments:
            added = {len(existing) + i: list(r) for i, r in enumerate(assignments)}
            if len(added) != total - len(existing):
                raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"Increasing the number of partitions by {total - len(existing)} but "
                                 f"{len(added)} assignments provided.")
            validate_assignment(added, brokers, expected_replication=replication, first_partition=len(existing))
        else:
            start = start_index_for_growth(brokers, existing.get(0, ()))
            added = assign_replicas(brokers, total - len(existing), replication, start_index=start,
                                    start_partition=len(existing))
        await self._check_partition_limits(added, await self._topic_names())
        if validate_only:
            return
        grown = {**{p: list(r) for p, r in existing.items()}, **added}
        try:
            await self._zk.set(path, znodes.encode_topic(current.uuid(), grown), version=stat.version)
        except ZkBadVersion:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS,
                             f"topic {name} changed meanwhile; try again") from None
        except ZkError as exc:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"cannot grow topic {name}: {exc}") from exc

    async def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        if name not in self._topics:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"This server does not host topic '{name}'.")
        try:
            await self._zk.set(znodes.topic_config_path(name), znodes.encode_config(configs))
        except ZkNoNode:
            await self._zk.create(znodes.topic_config_path(name), znodes.encode_config(configs), make_parents=True)
        except ZkError as exc:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"cannot write the configs of {name}: {exc}") from exc
        try:
            await self._zk.create(znodes.config_change_prefix_path(), znodes.encode_config_change(f"topics/{name}"),
                                  sequence=True)
        except ZkError as exc:
            log.warning("configs of %s written, but the change notification failed: %s", name, exc)
        # This broker applies it now; the others on the notification.
        await self._load_topic_configs(name)


class ControllerIsrChannel:
    """The IsrChannel of a ZooKeeper-mode broker: AlterPartition to the current controller (KIP-497),
    straight to the controller object when this broker is the controller, else over a connection
    to the controller's inter-broker listener (one per change: ISR changes are rare)."""

    def __init__(self, metadata: ZkMetadata) -> None:
        self._metadata = metadata

    async def alter_partition(self, topic: str, topic_id: uuid.UUID, partition: int, leader_epoch: int,
                              new_isr: Sequence[int], partition_epoch: int) -> PartitionInfo:
        metadata = self._metadata
        config = metadata.config
        me = config.broker_id
        active = metadata.active_controller()
        if active is not None:
            return await active.alter_partition(me, topic_id, partition, leader_epoch, new_isr, partition_epoch)
        controller_id = metadata.controller_id
        broker = next((b for b in metadata.brokers() if b.broker_id == controller_id), None)
        endpoint = broker.inter_broker_endpoint(config) if broker is not None else None
        if endpoint is None:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "no controller known yet")
        request = AlterPartitionRequest(broker_id=me, broker_epoch=metadata.broker_epoch, topics=[
            AlterPartitionRequest.TopicData(topic_name=topic, topic_id=topic_id, partitions=[
                AlterPartitionRequest.PartitionData(
                    partition_index=partition, leader_epoch=leader_epoch, new_isr=list(new_isr),
                    new_isr_with_epochs=[AlterPartitionRequest.BrokerState(broker_id=b, broker_epoch=-1)
                                         for b in new_isr],
                    partition_epoch=partition_epoch)])])
        timeout_s = config.controller_socket_timeout_ms / 1000
        try:
            async with open_connection(endpoint.host, endpoint.port, client_id=f"broker-{me}-alter-partition",
                                       request_timeout_s=timeout_s, security=metadata.inter_broker_security) as conn:
                response = await conn.request(request)
        except ClientError as exc:
            raise KafkaError(ErrorCode.NOT_CONTROLLER,
                             f"AlterPartition to controller {controller_id} failed: {exc}") from exc
        if response.error_code:
            raise KafkaError(ErrorCode(response.error_code), "AlterPartition refused by the controller")
        for answer_topic in response.topics:
            for answer in answer_topic.partitions:
                if answer.partition_index != partition:
                    continue
                if answer.error_code:
                    raise KafkaError(ErrorCode(answer.error_code), f"AlterPartition of {topic}-{partition} refused")
                known = metadata.topics().get(topic)
                replicas = next((p.replicas for p in known.partitions if p.partition == partition), ()) if known else ()
                return PartitionInfo(partition, answer.leader_id, answer.leader_epoch, tuple(replicas),
                                     tuple(answer.isr), answer.partition_epoch)
        raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"AlterPartition answer has no {topic}-{partition}")
