"""`__consumer_offsets` as the group coordinator's store: create it, append to it, replay it."""

from __future__ import annotations

import logging
from collections.abc import Iterator

from broker.clock import now_ms
from broker.config import BrokerConfig
from broker.controller.base import Controller
from broker.coordinator.coordinator import OFFSETS_TOPIC
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import Record, build_batch, decode_batch, split_batches
from broker.replication.replica_manager import ReplicaManager
from broker.storage import Log

__all__ = ["OffsetsStore"]

log = logging.getLogger(__name__)

READ_CHUNK = 4 << 20


class OffsetsStore:
    def __init__(self, config: BrokerConfig, controller: Controller, replicas: ReplicaManager) -> None:
        self._config = config
        self._controller = controller
        self._replicas = replicas

    async def ensure_topic(self) -> None:
        """Create `__consumer_offsets` (compacted, as Kafka makes it) if it does not exist."""
        if OFFSETS_TOPIC in self._controller.topics():
            return
        try:
            await self._controller.create_topic(
                OFFSETS_TOPIC,
                self._config.offsets_topic_num_partitions,
                1,
                {
                    "cleanup.policy": "compact",
                    "compression.type": "producer",
                    "segment.bytes": str(self._config.offsets_topic_segment_bytes),
                },
            )
        except KafkaError as exc:
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise

    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> None:
        """Write records to one partition; acknowledged once in the log (one replica here)."""
        timestamp = now_ms()
        batch = build_batch([Record(key, value) for key, value in records], base_timestamp=timestamp)
        replica = self._replicas.get(OFFSETS_TOPIC, partition)
        # At flush.messages, a commit is answered after its fsync (in a worker thread).
        await replica.wait_flushed(replica.append(batch, now_ms=timestamp))

    def replay(self) -> Iterator[tuple[bytes | None, bytes | None]]:
        """Every record of every partition, oldest first within each partition."""
        topic = self._controller.topics().get(OFFSETS_TOPIC)
        if topic is None:
            return
        for info in topic.partitions:
            yield from _records(self._replicas.get(OFFSETS_TOPIC, info.partition).log)


def _records(partition_log: Log) -> Iterator[tuple[bytes | None, bytes | None]]:
    offset = partition_log.log_start_offset
    end = partition_log.log_end_offset
    while offset < end:
        data = partition_log.read(offset, READ_CHUNK).data
        batches = split_batches(data, allow_partial_tail=True)
        if not batches:
            log.warning("%s: unreadable data at offset %d; stopping its replay", partition_log, offset)
            return
        for pos, header in batches:
            if header.is_control:
                offset = header.last_offset + 1
                continue
            _, records = decode_batch(data, pos)
            for record in records:
                if record.offset >= offset:
                    yield record.key, record.value
            offset = header.last_offset + 1
