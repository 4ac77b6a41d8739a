"""`__consumer_offsets` as the group coordinator's store: create it, append to it, replay it.

Appends go through the broker's one append path (broker/replication/append.py, as the
coordinator's: ``AppendOrigin.COORDINATOR``, the one origin allowed to write an internal topic)
and are acknowledged once committed: in the log of every ISR member (the high watermark passed
them), as Kafka appends group metadata and offset commits with acks=all semantics. Replays read
a partition up to its log end in chunks: each chunk is located on the trio thread, read and
decoded in a worker thread.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass

import trio

from broker.clock import now_ms
from broker.config import BrokerConfig
from broker.controller.base import Controller
from broker.coordinator.coordinator import OFFSETS_TOPIC
from broker.coordinator.loader import LoggedRecords, OffsetsLogSink, Records
from broker.coordinator.txn_records import TXN_STATE_TOPIC
from broker.protocol.control_records import ControlType, marker_of
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import BatchHeader, Record, build_batch, decode_batch, split_batches
from broker.replication.append import AppendEntry, AppendOrigin, LeaderAppend, append_to_leader, wait_for_acks
from broker.replication.replica_manager import ReplicaManager
from broker.storage import Log
from broker.storage.file_slice import FileSlice

__all__ = ["InternalTopic", "OffsetsStore"]

log = logging.getLogger(__name__)

# Bytes read per step of a load (Kafka's offsets.load.buffer.size is 5 MiB).
READ_CHUNK = 4 << 20


@dataclass(frozen=True, slots=True)
class InternalTopic:
    """A coordinator's compacted internal topic: how it is created and how long a write waits
    for its ISR. `__consumer_offsets` (:meth:`offsets`) and `__transaction_state` share the store."""

    name: str
    partitions: int
    replication_factor: int
    replication_key: str  # the broker key that sets replication_factor, named in the log
    configs: dict[str, str]
    commit_timeout_ms: int
    commit_timeout_key: str

    @classmethod
    def offsets(cls, config: BrokerConfig) -> InternalTopic:
        return cls(OFFSETS_TOPIC, config.offsets_topic_num_partitions, config.offsets_topic_replication_factor,
                   "offsets.topic.replication.factor",
                   {"cleanup.policy": "compact", "compression.type": "producer",
                    "segment.bytes": str(config.offsets_topic_segment_bytes)},
                   config.offsets_commit_timeout_ms, "offsets.commit.timeout.ms")

    @classmethod
    def transactions(cls, config: BrokerConfig) -> InternalTopic:
        """`__transaction_state`, as Kafka's TransactionStateManager creates it; its writes wait
        for the ISR up to request.timeout.ms (Kafka: transaction.state.log's own timeout)."""
        return cls(TXN_STATE_TOPIC, config.transaction_state_log_num_partitions,
                   config.transaction_state_log_replication_factor, "transaction.state.log.replication.factor",
                   {"cleanup.policy": "compact", "compression.type": "uncompressed",
                    "min.insync.replicas": str(config.transaction_state_log_min_isr),
                    "segment.bytes": str(config.transaction_state_log_segment_bytes),
                    "unclean.leader.election.enable": "false"},
                   config.request_timeout_ms, "request.timeout.ms")


class OffsetsStore:
    def __init__(self, config: BrokerConfig, controller: Controller, replicas: ReplicaManager,
                 topic: InternalTopic | None = None) -> None:
        self._config = config
        self._controller = controller
        self._replicas = replicas
        self._topic = topic if topic is not None else InternalTopic.offsets(config)
        self._load_limiter = trio.CapacityLimiter(1)

    async def ensure_topic(self) -> None:
        """Create `__consumer_offsets` (compacted, as Kafka makes it) if it does not exist, with
        offsets.topic.replication.factor replicas, capped by the brokers registered now."""
        topic = self._topic
        if topic.name in self._controller.topics():
            return
        present = len(self._controller.brokers())
        replication = max(1, min(topic.replication_factor, present))
        if replication < topic.replication_factor:
            log.info("creating %s with %d replicas (%s=%d, %d brokers present)",
                     topic.name, replication, topic.replication_key, topic.replication_factor, present)
        configs = dict(topic.configs)
        if "min.insync.replicas" in configs:  # never above the replicas the topic gets
            configs["min.insync.replicas"] = str(min(int(configs["min.insync.replicas"]), replication))
        try:
            await self._controller.create_topic(topic.name, topic.partitions, replication, configs)
        except KafkaError as exc:
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise

    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> None:
        """Write records to one partition as its leader; returns once the ISR has them (the
        errors of :meth:`write`)."""
        await self.write(partition, records)

    async def append_txn(self, partition: int, records: list[tuple[bytes, bytes | None]], producer_id: int,
                         producer_epoch: int) -> int:
        """Write records to one partition as a transactional batch of the producer (Kafka's
        TxnOffsetCommit records: no sequence, decided by the producer's marker there); returns
        the offset of the first once the ISR has them (the errors of :meth:`write`)."""
        return await self.write(partition, records, producer_id=producer_id, producer_epoch=producer_epoch)

    def write(self, partition: int, records: list[tuple[bytes, bytes | None]], *, producer_id: int = -1,
              producer_epoch: int = -1) -> Awaitable[int]:
        """Write records to one partition as its leader, now; the awaitable returned gives the
        log offset of the first record (the others follow it) once the ISR has them.

        Raises KafkaError at once: NOT_LEADER_OR_FOLLOWER (not leader), NOT_ENOUGH_REPLICAS (an
        ISR below min.insync.replicas: nothing written), and the log's own refusals. The
        awaitable raises KafkaError: NOT_LEADER_OR_FOLLOWER (it stopped leading while waiting),
        NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT (the ISR did not confirm within
        offsets.commit.timeout.ms), KAFKA_STORAGE_ERROR (the fsync at flush.messages failed).
        The coordinator maps them to what Kafka answers for a commit or a group write."""
        timestamp = now_ms()
        transactional = producer_id >= 0
        batch = build_batch([Record(key, value) for key, value in records], base_timestamp=timestamp,
                            producer_id=producer_id, producer_epoch=producer_epoch, is_transactional=transactional)
        appended = append_to_leader(self._replicas, AppendEntry(self._topic.name, partition, batch),
                                    origin=AppendOrigin.COORDINATOR, required_acks=-1, now_ms=timestamp,
                                    transactional=transactional)
        if appended.refused is not None:
            raise appended.refused
        return self._committed(appended)

    async def _committed(self, appended: LeaderAppend) -> int:
        # At flush.messages, a commit is answered after its fsync (in a worker thread).
        topic = self._topic
        await wait_for_acks([appended], required_acks=-1, timeout_ms=topic.commit_timeout_ms)
        if appended.refused is not None:
            raise appended.refused
        if appended.acks == ErrorCode.REQUEST_TIMED_OUT:
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT,
                             f"the ISR of {topic.name}-{appended.index} did not confirm the write within "
                             f"{topic.commit_timeout_key}={topic.commit_timeout_ms}")
        if appended.acks != ErrorCode.NONE:
            raise KafkaError(appended.acks, f"writing to {self._topic.name}-{appended.index}")
        assert appended.result is not None  # appended, not refused: a coordinator's batch is never a duplicate
        return appended.result.first_offset

    async def replay_partition(self, partition: int, sink: Callable[[Records], None],
                               still_wanted: Callable[[], bool]) -> None:
        """Feed the partition's records up to its log end (now) to `sink` as (key, value),
        oldest first, markers left out: :meth:`replay_log` for a reader that needs neither
        offsets nor transactions (the transaction coordinator's `__transaction_state`)."""
        await self.replay_log(partition, _PlainRecords(sink), still_wanted)

    async def replay_log(self, partition: int, sink: OffsetsLogSink, still_wanted: Callable[[], bool]) -> None:
        """Feed the partition's records up to its log end (now) to `sink` with their offsets,
        oldest first: plain records to `sink.apply`, transactional batches to `sink.apply_txn`
        and their markers to `sink.end_txn`, in the log's order.

        Each chunk is located here (the log's segment list is the trio thread's) on its own
        pinned descriptor, so a compaction or retention swapping segments meanwhile cannot pull
        the file away; the chunk is read, decoded and given to `sink` in a worker thread, one
        chunk of one partition at a time across the broker (Kafka loads on one thread too).
        Stops early when `still_wanted()` turns false. Raises KafkaError or OSError."""
        partition_log = self._replicas.get(self._topic.name, partition).log
        end = partition_log.log_end_offset
        offset = partition_log.log_start_offset
        while offset < end and still_wanted():
            # Retention or a truncation may have moved the log start past us: go on from there.
            offset = max(offset, partition_log.log_start_offset)
            found = partition_log.read(offset, READ_CHUNK, upper_bound=end)
            chunk = found.open_slice()
            if chunk is None:
                return
            try:
                next_offset = await trio.to_thread.run_sync(_replay_chunk, chunk, offset, sink,
                                                            limiter=self._load_limiter)
            finally:
                chunk.close()
            if next_offset is None:
                log.warning("%s-%d: unreadable data at offset %d; its load stops there", self._topic.name,
                            partition, offset)
                return
            offset = next_offset

    def partition_count(self) -> int | None:
        """How many partitions `__consumer_offsets` has; None before it exists."""
        topic = self._controller.topics().get(self._topic.name)
        return len(topic.partitions) if topic is not None else None

    def led_partitions(self) -> list[tuple[int, int]]:
        """(partition, leader epoch) of each `__consumer_offsets` partition this broker hosts and
        leads now: standalone, all of them. The group coordinator is told of these once at start;
        later changes come from the replica manager (a LeadershipListener)."""
        return sorted((p.index, p.leader_epoch) for p in self._replicas.partitions()
                      if p.topic == self._topic.name and p.is_leader)

    def replay(self) -> Iterator[tuple[bytes | None, bytes | None]]:
        """Every record of every partition, oldest first within each partition."""
        topic = self._controller.topics().get(OFFSETS_TOPIC)
        if topic is None:
            return
        for info in topic.partitions:
            yield from _records(self._replicas.get(OFFSETS_TOPIC, info.partition).log)


class _PlainRecords:
    """A replay's records as (key, value), transactional or not; markers dropped."""

    def __init__(self, sink: Callable[[Records], None]) -> None:
        self._sink = sink

    def apply(self, records: LoggedRecords) -> None:
        self._sink([(key, value) for _, key, value in records])

    def apply_txn(self, producer_id: int, records: LoggedRecords) -> None:
        self.apply(records)

    def end_txn(self, producer_id: int, commit: bool) -> None:
        pass


def _replay_chunk(chunk: FileSlice, offset: int, sink: OffsetsLogSink) -> int | None:
    """Decode the batches of one chunk (runs in a worker thread) and give the records at or
    after `offset` to `sink` (transactional ones and markers apart); the offset after the last
    whole batch, None when there is none."""
    data = chunk.read(0, chunk.length)
    batches = split_batches(data, allow_partial_tail=True)
    if not batches:
        return None
    records: list[tuple[int, bytes | None, bytes | None]] = []
    for pos, header in batches:
        if header.is_transactional and header.has_producer_id and header.last_offset >= offset:
            sink.apply(records)  # what came before, first: the log's order is the outcome
            records = []
            _replay_txn_batch(data, pos, header, offset, sink)
        elif not header.is_control:
            try:
                _, decoded = decode_batch(data, pos)
            except KafkaError as exc:
                # As an unreadable record: skipped, never fatal (the log's recovery at start cut
                # torn tails already; this is damage inside it).
                log.warning("%s: skipping the batch at offsets %d-%d: %s", OFFSETS_TOPIC, header.base_offset,
                            header.last_offset, exc)
                decoded = []
            records.extend((r.offset, r.key, r.value) for r in decoded if r.offset >= offset)
        offset = header.last_offset + 1
    sink.apply(records)
    return offset


def _replay_txn_batch(data: bytes, pos: int, header: BatchHeader, offset: int, sink: OffsetsLogSink) -> None:
    """A transactional batch of `__consumer_offsets`: TxnOffsetCommit records, or a marker."""
    try:
        if header.is_control:
            marker = marker_of(data, pos, header)
            if marker is not None:
                sink.end_txn(header.producer_id, marker[0] == ControlType.COMMIT)
            return
        _, decoded = decode_batch(data, pos)
    except KafkaError as exc:
        log.warning("%s: skipping the transactional batch at offsets %d-%d: %s", OFFSETS_TOPIC, header.base_offset,
                    header.last_offset, exc)
        return
    sink.apply_txn(header.producer_id, [(r.offset, r.key, r.value) for r in decoded if r.offset >= offset])


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
