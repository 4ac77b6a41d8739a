"""The partitions this broker hosts, kept in step with the controller's metadata."""

from __future__ import annotations

import logging

from broker.config import BrokerConfig
from broker.controller.model import TopicInfo
from broker.protocol.errors import ErrorCode, KafkaError
from broker.replication.partition import Partition
from broker.storage import LogConfig, LogManager

__all__ = ["ReplicaManager", "broker_log_config"]

log = logging.getLogger(__name__)


def broker_log_config(config: BrokerConfig) -> LogConfig:
    """The log config every topic inherits: Kafka's defaults overlaid with the broker's keys."""
    return LogConfig.from_topic_configs(config.topic_defaults(), LogConfig())


class ReplicaManager:
    """Creates, reconfigures and deletes local logs as topics change (a MetadataListener)."""

    def __init__(self, config: BrokerConfig, logs: LogManager) -> None:
        self._config = config
        self._logs = logs
        self._defaults = broker_log_config(config)
        self._partitions: dict[tuple[str, int], Partition] = {}

    def get(self, topic: str, partition: int) -> Partition:
        """The hosted partition. Raises KafkaError(UNKNOWN_TOPIC_OR_PARTITION) when absent."""
        found = self._partitions.get((topic, partition))
        if found is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return found

    def partitions(self) -> list[Partition]:
        return list(self._partitions.values())

    def log_config_for(self, topic: TopicInfo) -> LogConfig:
        return LogConfig.from_topic_configs(topic.configs, self._defaults)

    # -- MetadataListener ----------------------------------------------------------------

    def on_topic_changed(self, topic: TopicInfo) -> None:
        config = self.log_config_for(topic)
        me = self._config.broker_id
        for info in topic.partitions:
            if me not in info.replicas:
                continue
            key = (topic.name, info.partition)
            existing = self._partitions.get(key)
            if existing is None:
                log_ = self._logs.get_or_create(topic.name, info.partition, config)
                self._partitions[key] = Partition(
                    topic.name,
                    info.partition,
                    log_,
                    leader_epoch=info.leader_epoch,
                    is_leader=info.leader == me,
                )
            else:
                existing.log.update_config(config)
                existing.leader_epoch = info.leader_epoch
                existing.is_leader = info.leader == me

    def on_topic_deleted(self, topic: TopicInfo) -> None:
        for info in topic.partitions:
            partition = self._partitions.pop((topic.name, info.partition), None)
            if partition is not None:
                self._logs.delete(topic.name, info.partition)
        log.info("deleted topic %s (%d partitions)", topic.name, len(topic.partitions))
