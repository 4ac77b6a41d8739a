"""The partitions this broker hosts, kept in step with the controller's metadata."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from broker.config import BrokerConfig
from broker.controller.model import TopicInfo
from broker.protocol.errors import ErrorCode, KafkaError
from broker.replication.dir_health import DirHealth
from broker.replication.partition import Partition
from broker.storage import Log, LogConfig, LogManager

__all__ = ["ReplicaManager", "broker_log_config", "CREATE_CHUNK"]

log = logging.getLogger(__name__)

# Logs opened per worker-thread call when a topic gains partitions: each call is short, and the
# loop registers each chunk's partitions as it comes back (they become writable chunk by chunk).
CREATE_CHUNK = 256


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

    def __init__(self, config: BrokerConfig, logs: LogManager) -> None:
        self._config = config
        self._logs = logs
        self._defaults = broker_log_config(config)
        self._partitions: dict[tuple[str, int], Partition] = {}
        # Changes to one topic are applied one at a time: its partitions are being created in
        # worker threads while another request may grow or delete the same topic. Other topics
        # go ahead meanwhile: a small CreateTopics never waits behind a creation of thousands.
        self._topic_locks: dict[str, trio.Lock] = {}
        self.health = DirHealth()

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
                existing.leader_epoch = info.leader_epoch
                existing.is_leader = info.leader == me
                continue
            try:
                # Loaded at start (LogManager.load_all) or earlier: no file work left.
                self._host(topic.name, info.partition, self._logs.get(topic.name, info.partition),
                           config, info.leader_epoch, info.leader == me)
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
                self._host(topic.name, index, adopted, config, info.leader_epoch, info.leader == me)
        if missing:
            log.info("created %d partition logs of %s", len(missing), topic.name)

    def _host(self, topic: str, index: int, partition_log: Log, config: LogConfig, leader_epoch: int,
              is_leader: bool) -> None:
        partition_log.update_config(config)
        self._partitions[(topic, index)] = Partition(topic, index, partition_log, leader_epoch=leader_epoch,
                                                     is_leader=is_leader, health=self.health)

    async def on_topic_deleted(self, topic: TopicInfo) -> None:
        async with self._changing(topic.name):
            doomed: list[Log] = []
            for info in topic.partitions:
                self._partitions.pop((topic.name, info.partition), None)
                detached = self._logs.detach(topic.name, info.partition)
                if detached is not None:
                    doomed.append(detached)
            # Unregistered on the loop; the files go in a worker thread, chunk by chunk.
            for start in range(0, len(doomed), CREATE_CHUNK):
                await trio.to_thread.run_sync(_delete_logs, doomed[start:start + CREATE_CHUNK])
        log.info("deleted topic %s (%d partitions)", topic.name, len(topic.partitions))
