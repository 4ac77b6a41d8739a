"""The partitions this broker hosts, kept in step with the controller's metadata.

Standalone, the controller's topic changes (:meth:`ReplicaManager.on_topic_changed`) create the
logs and every replica leads an ISR of one. In ZooKeeper mode the controller's LeaderAndIsr
decides (:meth:`ReplicaManager.apply_leader_and_isr`, Kafka's becomeLeaderOrFollower): each
partition becomes leader (its ISR from the controller) or follower (fetched from its leader by
a :class:`~broker.replication.fetcher.Fetcher`, one per source broker), fenced by controller
epoch and leader epoch; StopReplica stops (and may delete) a replica. The replica manager's own
task tree (:meth:`ReplicaManager.run`) holds the fetchers, the ISR changes sent to the
controller and the periodic ISR shrink check (every half ``replica.lag.time.max.ms``).

A log dir that fails a write in ZooKeeper mode goes offline (Kafka's handleLogDirFailure; see
broker/replication/dir_health.py): its replicas stop leading and following, LeaderAndIsr answers
KAFKA_STORAGE_ERROR for them, and the controller is told through ``/log_dir_event_notification``.
Unlike Kafka, which waits for a restart, the dir is probed every ``LOG_DIR_PROBE_INTERVAL_S`` and
comes back when it takes a write of ``message.max.bytes``: the controller is told again and its
LeaderAndIsr gives the replicas their roles back.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from broker import metrics
from broker.config import BrokerConfig
from broker.controller.model import BrokerInfo, PartitionInfo, TopicInfo
from broker.protocol.errors import ErrorCode, KafkaError
from broker.replication import replica_metrics
from broker.replication.dir_health import DirHealth, probe_writable
from broker.replication.fetcher import Fetcher, FetcherSettings
from broker.replication.isr import IsrChannel
from broker.replication.leadership import LeadershipListener
from broker.replication.partition import Partition, monotonic_ms
from broker.storage import Log, LogConfig, LogManager

if TYPE_CHECKING:
    from broker.client.connection import ClientSecurity

__all__ = ["ReplicaManager", "broker_log_config", "CREATE_CHUNK", "LOG_DIR_PROBE_INTERVAL_S"]

log = logging.getLogger(__name__)

# Logs opened per worker-thread call when a topic gains partitions: each call is short, and the
# loop registers each chunk's partitions as it comes back (they become writable chunk by chunk).
CREATE_CHUNK = 256
# How often an offline log dir is probed for writes (a statvfs, and a write only once it has room).
LOG_DIR_PROBE_INTERVAL_S = 2.0


def broker_log_config(config: BrokerConfig) -> LogConfig:
    """The log config every topic inherits: Kafka's defaults overlaid with the broker's keys."""
    return LogConfig.from_topic_configs(config.topic_defaults(), LogConfig())


def _open_logs(wanted: list[tuple[Path, str, int]], config: LogConfig) -> list[Log]:
    """Open (creating) the logs of a chunk of new partitions; runs in a worker thread. On an
    error the logs already opened are closed, so no descriptor leaks."""
    opened: list[Log] = []
    try:
        for root, topic, partition in wanted:
            opened.append(Log.open(root / f"{topic}-{partition}", config, recovery_point=0))
    except BaseException:
        for done in opened:
            done.close()
        raise
    return opened


def _delete_logs(doomed: list[Log]) -> None:
    """Remove the directories of deleted partitions; runs in a worker thread."""
    for partition_log in doomed:
        partition_log.delete()


class ReplicaManager:
    """Creates, reconfigures and deletes local logs as topics change (a MetadataListener)."""

    def __init__(self, config: BrokerConfig, logs: LogManager, *, security: ClientSecurity | None = None) -> None:
        """`security`: how the followers reach the leaders' inter-broker listener
        (``security.client.inter_broker_security``); None: PLAINTEXT."""
        self._config = config
        self._logs = logs
        self._defaults = broker_log_config(config)
        self._partitions: dict[tuple[str, int], Partition] = {}
        # Changes to one topic are applied one at a time: its partitions are being created in
        # worker threads while another request may grow or delete the same topic. Other topics
        # go ahead meanwhile: a small CreateTopics never waits behind a creation of thousands.
        self._topic_locks: dict[str, trio.Lock] = {}
        self.health = DirHealth()
        logs.place_only_online(self.health.is_offline)
        self._leadership: list[LeadershipListener] = []
        self._zk_mode = config.zookeeper_connect is not None
        # LeaderAndIsr and StopReplica are applied one at a time (Kafka's replicaStateChangeLock).
        self._state_lock = trio.Lock()
        self._controller_epoch = -1
        self._isr_channel: IsrChannel | None = None
        self._nursery: trio.Nursery | None = None
        self._fetchers: dict[int, Fetcher] = {}
        self._topic_ids: dict[uuid.UUID, str] = {}
        self._topic_configs: dict[str, LogConfig] = {}  # from the controller's topic changes
        self._listener_name = config.inter_broker_listener
        # Log dirs that failed a write, queued by DirHealth for _handle_log_dir_failures (each dir at
        # most once until it is back: bounded by log.dirs), and how the controller is told.
        self._failed_dirs_send, self._failed_dirs = trio.open_memory_channel[Path](math.inf)
        self._log_dir_event: Callable[[], Awaitable[None]] | None = None
        if self._zk_mode:
            self.health.take_offline_on_failure(self._failed_dirs_send.send_nowait)
        replica_metrics.track_partitions(lambda: self._partitions)
        self.fetcher_settings = FetcherSettings(
            config.broker_id, max_bytes=config.replica_fetch_max_bytes, wait_max_ms=config.replica_fetch_wait_max_ms,
            min_bytes=config.replica_fetch_min_bytes, backoff_ms=config.replica_fetch_backoff_ms, security=security)

    def add_leadership_listener(self, listener: LeadershipListener) -> None:
        """Tell `listener` of every role change of a hosted partition from now on (the group
        coordinator follows the `__consumer_offsets` leaders so)."""
        self._leadership.append(listener)

    def reconfigure(self, config: BrokerConfig) -> None:
        """Dynamic broker configs changed: new topic defaults, applied to each topic's logs by the
        caller's next on_topic_changed (which lays the topic's overrides over them)."""
        self._config = config
        self._defaults = broker_log_config(config)

    # -- the task tree -------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Own the fetchers, ISR changes and the ISR shrink check until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for partition in self._partitions.values():
                partition.spawn = self._spawn
            nursery.start_soon(self._check_isr_forever)
            if self._zk_mode:
                nursery.start_soon(self._handle_log_dir_failures)
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                self._nursery = None
                nursery.cancel_scope.cancel()

    def _spawn(self, job: Callable[[], Awaitable[None]]) -> None:
        if self._nursery is not None:
            self._nursery.start_soon(job)

    def set_isr_channel(self, channel: IsrChannel) -> None:
        """Where leaders send ISR changes (ZooKeeper mode: AlterPartition to the controller)."""
        self._isr_channel = channel
        for partition in self._partitions.values():
            partition.isr_channel = channel

    async def _check_isr_forever(self) -> None:
        """Shrink the ISR of led partitions whose followers lag (Kafka's isr-expiration task,
        every half of replica.lag.time.max.ms)."""
        lag_ms = self._config.replica_lag_time_max_ms
        while True:
            await trio.sleep(lag_ms / 2 / 1000)
            self.check_isr(monotonic_ms())

    def check_isr(self, now: int) -> None:
        lag_ms = self._config.replica_lag_time_max_ms
        for partition in list(self._partitions.values()):
            if partition.is_leader and len(partition.isr) > 1:
                partition.maybe_shrink_isr(now, lag_ms)

    def get(self, topic: str, partition: int) -> Partition:
        """The hosted partition. Raises KafkaError(UNKNOWN_TOPIC_OR_PARTITION) when absent."""
        found = self._partitions.get((topic, partition))
        if found is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return found

    def hosts(self, topic: str, partition: int) -> bool:
        """Whether the partition's log is open here (creation may still be under way)."""
        return (topic, partition) in self._partitions

    def partitions(self) -> list[Partition]:
        return list(self._partitions.values())

    def name_of(self, topic_id: uuid.UUID) -> str | None:
        """The name of a hosted topic by its id (follower fetches v13+)."""
        return self._topic_ids.get(topic_id)

    def fetcher_for(self, broker_id: int) -> Fetcher | None:
        return self._fetchers.get(broker_id)

    def log_config_for(self, topic: TopicInfo) -> LogConfig:
        return LogConfig.from_topic_configs(topic.configs, self._defaults)

    # -- MetadataListener ----------------------------------------------------------------

    @asynccontextmanager
    async def _changing(self, name: str) -> AsyncIterator[None]:
        lock = self._topic_locks.setdefault(name, trio.Lock())
        try:
            async with lock:
                yield
        finally:
            # Forget the lock once nobody holds or waits for it: topic names come from peers.
            if not lock.locked() and lock.statistics().tasks_waiting == 0:
                self._topic_locks.pop(name, None)

    async def on_topic_changed(self, topic: TopicInfo) -> None:
        if self._zk_mode:
            # Roles and logs come from LeaderAndIsr; a topic change brings its configs.
            config = self.log_config_for(topic)
            self._topic_configs[topic.name] = config
            for info in topic.partitions:
                existing = self._partitions.get((topic.name, info.partition))
                if existing is not None:
                    existing.log.update_config(config)
            return
        async with self._changing(topic.name):
            await self._apply(topic)

    async def _apply(self, topic: TopicInfo) -> None:
        config = self.log_config_for(topic)
        me = self._config.broker_id
        missing = []
        for info in topic.partitions:
            if me not in info.replicas:
                continue
            existing = self._partitions.get((topic.name, info.partition))
            if existing is not None:
                existing.log.update_config(config)
                if info.leader == me and info.leader_epoch > existing.leader_epoch:
                    # A new epoch (raised to a link source's): it starts at the log end, as at
                    # any leader change, and the next append records it in the epoch cache.
                    existing.make_leader(info, monotonic_ms())
                    continue
                existing.leader_epoch = info.leader_epoch
                existing.is_leader = info.leader == me
                continue
            try:
                # Loaded at start (LogManager.load_all) or earlier: no file work left.
                self._host(topic.name, info.partition, self._logs.get(topic.name, info.partition),
                           config, info.leader_epoch, info.leader == me, topic.topic_id)
            except KafkaError:
                missing.append(info)
        for start in range(0, len(missing), CREATE_CHUNK):
            chunk = missing[start:start + CREATE_CHUNK]
            roots = self._logs.place(len(chunk))
            wanted = [(root, topic.name, info.partition) for root, info in zip(roots, chunk, strict=True)]
            try:
                opened = await trio.to_thread.run_sync(_open_logs, wanted, config)
            except OSError as exc:
                log.error("creating partitions of %s failed: %s", topic.name, exc)
                raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                                 f"creating the logs of {topic.name} failed: {exc.strerror or exc}") from exc
            for (root, _, index), info, new_log in zip(wanted, chunk, opened, strict=True):
                adopted = self._logs.adopt(topic.name, index, root, new_log)
                if adopted is not new_log:
                    new_log.close()
                self._host(topic.name, index, adopted, config, info.leader_epoch, info.leader == me, topic.topic_id)
        if missing:
            log.info("created %d partition logs of %s", len(missing), topic.name)

    def _host(self, topic: str, index: int, partition_log: Log, config: LogConfig, leader_epoch: int,
              is_leader: bool, topic_id: uuid.UUID, info: PartitionInfo | None = None) -> Partition:
        partition_log.update_config(config)
        me = self._config.broker_id
        partition = Partition(
            topic, index, partition_log, leader_epoch=leader_epoch, is_leader=is_leader, health=self.health,
            broker_id=me, topic_id=topic_id,
            replicas=info.replicas if info is not None else None, isr=info.isr if info is not None else None,
            leader_id=info.leader if info is not None else None,
            partition_epoch=info.partition_epoch if info is not None else 0)
        partition.isr_channel = self._isr_channel
        partition.spawn = self._spawn if self._nursery is not None else None
        self._partitions[(topic, index)] = partition
        self._topic_ids[topic_id] = topic
        return partition

    async def _logs_for(self, topic: str, indexes: list[int], config: LogConfig) -> dict[int, Log]:
        """The logs of `indexes`, loaded at start or created now (in worker threads, in chunks)."""
        found: dict[int, Log] = {}
        missing = []
        for index in indexes:
            try:
                found[index] = self._logs.get(topic, index)
            except KafkaError:
                missing.append(index)
        for start in range(0, len(missing), CREATE_CHUNK):
            chunk = missing[start:start + CREATE_CHUNK]
            roots = self._logs.place(len(chunk))
            wanted = [(root, topic, index) for root, index in zip(roots, chunk, strict=True)]
            try:
                opened = await trio.to_thread.run_sync(_open_logs, wanted, config)
            except OSError as exc:
                log.error("creating partitions of %s failed: %s", topic, exc)
                raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                                 f"creating the logs of {topic} failed: {exc.strerror or exc}") from exc
            for (root, _, index), new_log in zip(wanted, opened, strict=True):
                adopted = self._logs.adopt(topic, index, root, new_log)
                if adopted is not new_log:
                    new_log.close()
                found[index] = adopted
        return found

    # -- log dir failures (ZooKeeper mode) -------------------------------------------------------

    def on_log_dir_event(self, announce: Callable[[], Awaitable[None]]) -> None:
        """How the controller hears that a log dir went offline or came back (ZkMetadata writes
        ``/log_dir_event_notification``; it returns once the znode is written)."""
        self._log_dir_event = announce

    async def _handle_log_dir_failures(self) -> None:
        assert self._nursery is not None
        async for root in self._failed_dirs:
            await self._take_offline(root)
            self._nursery.start_soon(self._bring_back, root)

    def _in_dir(self, root: Path) -> list[Partition]:
        return [p for p in self._partitions.values() if p.log.directory.parent == root]

    async def _take_offline(self, root: Path) -> None:
        """Kafka's handleLogDirFailure: every replica in ``root`` stops leading (waiting acks=all
        produces are answered NOT_LEADER_OR_FOLLOWER, so producers look for the new leader) and
        following; the controller is told, and moves their leadership to in-sync replicas."""
        async with self._state_lock:
            stopped = self._in_dir(root)
            led = 0
            for partition in stopped:
                await self._stop_fetching((partition.topic, partition.index))
                led += partition.is_leader
                partition.make_offline()
                for listener in self._leadership:
                    listener.on_resigned(partition.topic, partition.index, None)
        log.error("log dir %s is offline: %d replicas stopped (%d of them leaders); telling the controller",
                  root, len(stopped), led)
        await self._announce()

    async def _bring_back(self, root: Path) -> None:
        """Probe ``root`` until it takes a write of message.max.bytes, then put it online and tell
        the controller, whose LeaderAndIsr gives its replicas their roles again (followers
        truncate to their leader's log by epoch, then catch up)."""
        while True:  # polled: no event says a disk has room again
            if await trio.to_thread.run_sync(probe_writable, root, self._config.message_max_bytes):
                break
            await trio.sleep(LOG_DIR_PROBE_INTERVAL_S)
        async with self._state_lock:
            self.health.back_online(root)
        await self._announce()

    async def _announce(self) -> None:
        if self._log_dir_event is not None:
            await self._log_dir_event()

    def _offline_dir_of(self, topic: str, partition: int) -> Path | None:
        """The offline log dir holding this replica's log, if it is in one."""
        hosted = self._partitions.get((topic, partition))
        if hosted is not None:
            root = hosted.log.directory.parent
        else:
            try:
                root = self._logs.get(topic, partition).directory.parent
            except KafkaError:
                # A new replica: LogManager.place puts it in an online dir, or answers
                # KAFKA_STORAGE_ERROR (through _logs_for) when none is.
                return None
        return root if self.health.is_offline(root) else None

    # -- LeaderAndIsr and StopReplica (ZooKeeper mode) ------------------------------------------

    async def apply_leader_and_isr(
        self, controller_id: int, controller_epoch: int,
        states: Sequence[tuple[str, uuid.UUID, PartitionInfo, bool]],
        brokers: Mapping[int, BrokerInfo],
    ) -> dict[tuple[str, int], ErrorCode]:
        """Become leader or follower of each partition as the controller says (Kafka's
        becomeLeaderOrFollower). Per partition: STALE_CONTROLLER_EPOCH when ``controller_epoch``
        is older than the newest seen; FENCED_LEADER_EPOCH (and nothing changes) when the leader
        epoch is older than the partition's; UNKNOWN_TOPIC_OR_PARTITION (ignored) when this
        broker is not one of its replicas; NONE otherwise. The log is created when missing.
        A new leader stops fetching the partition first; a new follower stops serving produces
        (waiting acks=all produces get NOT_LEADER_OR_FOLLOWER), then truncates by
        OffsetForLeaderEpoch against its leader and fetches from it. ``brokers`` gives the
        leaders' addresses (the inter-broker listener)."""
        results: dict[tuple[str, int], ErrorCode] = {}
        async with self._state_lock:
            if controller_epoch < self._controller_epoch:
                log.warning("ignored LeaderAndIsr from controller %d with epoch %d: the newest seen is %d",
                            controller_id, controller_epoch, self._controller_epoch)
                return {(name, info.partition): ErrorCode.STALE_CONTROLLER_EPOCH for name, _, info, _ in states}
            self._controller_epoch = controller_epoch
            me = self._config.broker_id
            accepted: list[tuple[str, uuid.UUID, PartitionInfo]] = []
            for name, topic_id, info, _is_new in states:
                key = (name, info.partition)
                if me not in info.replicas:
                    log.warning("ignored LeaderAndIsr for %s-%d: broker %d is not one of its replicas %s",
                                name, info.partition, me, list(info.replicas))
                    results[key] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                offline = self._offline_dir_of(name, info.partition)
                if offline is not None:
                    # Kafka's answer for a replica in an offline dir: the controller learns it is
                    # offline and elects elsewhere.
                    results[key] = ErrorCode.KAFKA_STORAGE_ERROR
                    continue
                existing = self._partitions.get(key)
                if existing is not None and info.leader_epoch < existing.leader_epoch:
                    log.warning("ignored LeaderAndIsr for %s-%d: leader epoch %d is older than %d", name,
                                info.partition, info.leader_epoch, existing.leader_epoch)
                    results[key] = ErrorCode.FENCED_LEADER_EPOCH
                    continue
                if (existing is not None and info.leader_epoch == existing.leader_epoch
                        and info.partition_epoch <= existing.partition_epoch and self._serving(existing, info)):
                    results[key] = ErrorCode.NONE  # nothing new (a repeated request)
                    continue
                accepted.append((name, topic_id, info))
            by_topic: dict[str, list[tuple[uuid.UUID, PartitionInfo]]] = {}
            for name, topic_id, info in accepted:
                by_topic.setdefault(name, []).append((topic_id, info))
            for name, entries in by_topic.items():
                config = self._topic_configs.get(name, self._defaults)
                try:
                    logs = await self._logs_for(name, [info.partition for _, info in entries], config)
                except KafkaError as exc:
                    for _, info in entries:
                        results[(name, info.partition)] = exc.code
                    continue
                for topic_id, info in entries:
                    results[(name, info.partition)] = await self._become(
                        name, topic_id, info, logs[info.partition], config, brokers)
        return results

    def _serving(self, partition: Partition, info: PartitionInfo) -> bool:
        """Whether `partition` already plays the role `info` gives it (leads, or is fetched
        from that leader)."""
        if info.leader == self._config.broker_id:
            return partition.is_leader
        fetcher = self._fetchers.get(info.leader)
        return fetcher is not None and fetcher.follows((partition.topic, partition.index))

    async def _become(self, name: str, topic_id: uuid.UUID, info: PartitionInfo, partition_log: Log,
                      config: LogConfig, brokers: Mapping[int, BrokerInfo]) -> ErrorCode:
        me = self._config.broker_id
        key = (name, info.partition)
        partition = self._partitions.get(key)
        if partition is None:
            partition = self._host(name, info.partition, partition_log, config, info.leader_epoch, False,
                                   topic_id, info)
        # Whatever it becomes, no fetcher may append to it meanwhile (and none mid-truncation).
        await self._stop_fetching(key)
        if info.leader == me:
            partition.make_leader(info, monotonic_ms())
            for listener in self._leadership:
                listener.on_became_leader(name, info.partition, info.leader_epoch)
            log.info("%s-%d: leader in epoch %d, ISR %s, log end %d, high watermark %d", name, info.partition,
                     info.leader_epoch, list(info.isr), partition.log.log_end_offset, partition.high_watermark)
            return ErrorCode.NONE
        partition.make_follower(info)
        for listener in self._leadership:
            listener.on_resigned(name, info.partition, info.leader_epoch)
        leader = brokers.get(info.leader)
        endpoint = leader.endpoint(self._listener_name) if leader is not None else None
        if endpoint is None:
            log.warning("%s-%d: follower in epoch %d, leader %d has no %s endpoint (not alive?): not fetching",
                        name, info.partition, info.leader_epoch, info.leader, self._listener_name)
            return ErrorCode.NONE
        (await self._fetcher(info.leader, endpoint.host, endpoint.port)).add(partition)
        log.info("%s-%d: follower of broker %d in epoch %d", name, info.partition, info.leader, info.leader_epoch)
        return ErrorCode.NONE

    async def _fetcher(self, source: int, host: str, port: int) -> Fetcher:
        fetcher = self._fetchers.get(source)
        if fetcher is not None and (fetcher.host, fetcher.port) != (host, port):
            # The leader came back at another address: the old fetcher's partitions move over,
            # once no truncation of theirs is under way.
            moving = [p for k in fetcher.partitions() if (p := await fetcher.remove(k)) is not None]
            fetcher.stop()
            del self._fetchers[source]
            fetcher = None
        else:
            moving = []
        if fetcher is None:
            fetcher = Fetcher(self.fetcher_settings, source, host, port, health=self.health)
            self._fetchers[source] = fetcher
            if self._nursery is None:
                raise RuntimeError("ReplicaManager.run is not running: followers cannot fetch")
            self._nursery.start_soon(fetcher.run)
        for partition in moving:
            fetcher.add(partition)
        return fetcher

    async def _stop_fetching(self, key: tuple[str, int]) -> None:
        for source, fetcher in list(self._fetchers.items()):
            if fetcher.follows(key):
                await fetcher.remove(key)
            if not fetcher.partitions() and self._fetchers.get(source) is fetcher:
                fetcher.stop()
                del self._fetchers[source]

    async def stop_replica(self, topic: str, partition: int, *, delete: bool) -> ErrorCode:
        """Stop fetching or leading the replica (Kafka's StopReplica); with `delete` its log goes
        too (in a worker thread). A replica not hosted here is answered NONE, as in Kafka."""
        key = (topic, partition)
        async with self._state_lock:
            await self._stop_fetching(key)
            hosted = self._partitions.get(key)
            if hosted is not None:
                hosted.make_offline()
                for listener in self._leadership:
                    listener.on_resigned(topic, partition, None)
            if not delete:
                return ErrorCode.NONE
            self._partitions.pop(key, None)
            detached = self._logs.detach(topic, partition)
            if detached is not None:
                await trio.to_thread.run_sync(_delete_logs, [detached])
                log.info("deleted replica %s-%d", topic, partition)
        return ErrorCode.NONE

    async def on_topic_deleted(self, topic: TopicInfo) -> None:
        async with self._changing(topic.name):
            doomed: list[Log] = []
            self._topic_configs.pop(topic.name, None)
            for info in topic.partitions:
                key = (topic.name, info.partition)
                if self._fetchers:
                    await self._stop_fetching(key)  # no fetcher may append to a log being deleted
                hosted = self._partitions.pop(key, None)
                if hosted is not None:
                    hosted.make_offline()
                    for listener in self._leadership:
                        listener.on_resigned(topic.name, info.partition, None)
                    if self._topic_ids.get(hosted.topic_id) == topic.name:
                        del self._topic_ids[hosted.topic_id]
                detached = self._logs.detach(topic.name, info.partition)
                if detached is not None:
                    doomed.append(detached)
            # Unregistered on the loop; the files go in a worker thread, chunk by chunk.
            for start in range(0, len(doomed), CREATE_CHUNK):
                await trio.to_thread.run_sync(_delete_logs, doomed[start:start + CREATE_CHUNK])
        metrics.forget_topic(topic.name)
        log.info("deleted topic %s (%d partitions)", topic.name, len(topic.partitions))
