"""Append as leader and wait for the acks: the one path of Produce, LinkAppend, the group
coordinator's ``__consumer_offsets`` writes and transaction markers (WriteTxnMarkers) (Kafka's
``ReplicaManager.appendRecords``).

Two steps, so that the coordinator can append now and learn later that the ISR has its write:

:func:`append_to_leader` checks and appends one partition's records at once, with no await (so
writes land in the order they are made, and a link's offsets are checked against the very log
end they go to). Its checks, in this order (the order decides the answer when several fail):

1. the required acks are -1, 0 or 1, else INVALID_REQUIRED_ACKS (Kafka checks them here too);
2. (kept for its number) a transactional produce is checked batch by batch at the append (8);
3. an internal topic is written only by the broker itself, the coordinator (Kafka's
   ``internalTopicsAllowed``; transaction markers come with this origin too, as Kafka's do),
   else INVALID_TOPIC_EXCEPTION;
4. the caller's own checks of the topic (``AppendEntry.check``): that it exists, and who may
   write it: a mirror topic only the link-mode mirror that owns it, never a client. They stay
   with the callers because they read the controller's topic metadata as the request found it
   and, for LinkAppend, the request's own fields (its version, its LinkName); the replica knows
   only its log's config, which follows that metadata a step behind (a promotion, for one);
5. the partition is hosted here (UNKNOWN_TOPIC_OR_PARTITION) and led (NOT_LEADER_OR_FOLLOWER);
6. a link's copy carries batches or at least the source's log start, else CORRUPT_MESSAGE;
7. with acks=-1 an ISR of at least ``min.insync.replicas``, else NOT_ENOUGH_REPLICAS and
   nothing is written;
8. the append: a client's or the coordinator's batches are given their offsets here
   (``Partition.append``), a transaction marker is written at the log end (``Partition.append_marker``:
   it ends the producer's transaction); a link's keep the source's, checked against the log first
   (broker/storage/link_offsets.py, ``Partition.append_copied``), and the source's log start
   after them (never past the copy's log end: OFFSET_OUT_OF_RANGE, the batches stay).

:func:`wait_for_acks` then answers the appends together. Each one that reached
``flush.messages`` is fsynced first (in a worker thread, one after the other; KAFKA_STORAGE_ERROR
when the disk refuses). With acks=-1, as Kafka's DelayedProduce, each append's high watermark
must then reach its required offset (the append's end; for a link, the log end, so that after
a retried request whose batches were all here the mirror still learns when its copy is safe):
checked at once (an ISR of one passes at the append and nothing waits), the rest waited for
all at once, at most ``timeout_ms``: REQUEST_TIMED_OUT for one still waiting then,
NOT_ENOUGH_REPLICAS_AFTER_APPEND for one whose ISR fell below ``min.insync.replicas``,
NOT_LEADER_OR_FOLLOWER for one whose replica stopped leading. :func:`append_records` runs both
steps for one request's partitions: every partition is appended before any is waited for.

What a caller does before and after (its request's fields, its answer's shape, a link's log
start following the source's once the ISR has the copy) stays with the caller.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import trio

from broker import clock
from broker.controller.model import is_internal_topic
from broker.protocol.control_records import ControlType
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.messages import Records
from broker.replication.partition import Partition
from broker.storage import AppendResult
from broker.storage.link_offsets import check_copied_offsets, check_log_start
from broker.storage.producer_state import VerificationGuard

__all__ = ["AppendEntry", "AppendOrigin", "CopiedBatches", "HostedPartitions", "LeaderAppend", "TxnMarker",
           "append_records", "append_to_leader", "wait_for_acks"]


class HostedPartitions(Protocol):
    """Where the path finds a partition (the broker's ReplicaManager)."""

    def get(self, topic: str, partition: int) -> Partition:
        """The hosted partition; raises KafkaError(UNKNOWN_TOPIC_OR_PARTITION) when absent."""


class AppendOrigin(enum.Enum):
    """Who appends (Kafka's AppendOrigin): it decides the checks and the append that differ."""

    CLIENT = "client"  # Produce: a producer's batches, given their offsets here
    LINK = "link"  # LinkAppend: a link-mode mirror's copies of the source's batches, at their offsets
    COORDINATOR = "coordinator"  # the group coordinator's records in __consumer_offsets; transaction markers


@dataclass(frozen=True, slots=True)
class CopiedBatches:
    """What a link-mode mirror sends for one partition of a mirror topic (LinkAppend)."""

    records: Records | None  # the source's batches, as they are; None or empty: a log start only
    previous_end_offset: int  # where the source's batch before the first one ended
    source_log_start: int  # the source partition's log start offset; -1: not given


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """A transaction marker to write (WriteTxnMarkers, ``AppendOrigin.COORDINATOR``)."""

    control_type: ControlType
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int


@dataclass(frozen=True, slots=True)
class AppendEntry:
    """One partition's records to append: a client's or the coordinator's batches, or a link's
    copy (with ``AppendOrigin.LINK``). ``check`` is the caller's own check of the topic (see the
    module, step 4); it raises KafkaError."""

    topic: str
    index: int
    records: Records | CopiedBatches | TxnMarker | None
    check: Callable[[], None] | None = None
    # A transactional produce verified with the coordinator (KIP-890): the guard the partition's
    # producer state handed out before asking (broker/storage/producer_state.py).
    verification: VerificationGuard | None = None


@dataclass(slots=True, eq=False)
class LeaderAppend:
    """One partition's append and how it ended (Kafka's ProducePartitionStatus)."""

    topic: str
    index: int
    partition: Partition | None = None  # set once it was found hosted here
    result: AppendResult | None = None  # None: nothing appended (refused, or a link's batches were all here)
    # Refused at or before the append, or its fsync failed. A link's log start refused after its
    # batches went in leaves ``result`` set: they are fsynced all the same.
    refused: KafkaError | None = None
    required_offset: int = -1  # acks=-1: the high watermark that acknowledges it
    acks: ErrorCode = ErrorCode.NONE  # acks=-1: how the wait for the ISR ended

    @property
    def error_code(self) -> ErrorCode:
        return self.refused.code if self.refused is not None else self.acks


def append_to_leader(replicas: HostedPartitions, entry: AppendEntry, *, origin: AppendOrigin, required_acks: int,
                     now_ms: int, transactional: bool = False) -> LeaderAppend:
    """Check and append one partition's records as its leader, now (see the module). Never
    raises KafkaError: a refusal is the answer's ``refused``."""
    appended = LeaderAppend(entry.topic, entry.index)
    try:
        _append(replicas, entry, appended, origin=origin, required_acks=required_acks, now_ms=now_ms,
                transactional=transactional)
    except KafkaError as exc:
        appended.refused = exc
    return appended


def _append(replicas: HostedPartitions, entry: AppendEntry, appended: LeaderAppend, *, origin: AppendOrigin,
            required_acks: int, now_ms: int, transactional: bool) -> None:
    if required_acks not in (-1, 0, 1):
        raise KafkaError(ErrorCode.INVALID_REQUIRED_ACKS)
    if origin is not AppendOrigin.COORDINATOR and is_internal_topic(entry.topic):
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Cannot append to internal topic {entry.topic}")
    if entry.check is not None:
        entry.check()
    partition = appended.partition = replicas.get(entry.topic, entry.index)
    if not partition.is_leader:
        raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    records = entry.records
    if isinstance(records, CopiedBatches) != (origin is AppendOrigin.LINK):
        raise TypeError("a link, and only a link, appends CopiedBatches")
    if isinstance(records, CopiedBatches) and not records.records and records.source_log_start < 0:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "the request carries no record batch")
    if required_acks == -1:
        isr, min_isr = len(partition.isr), partition.log.config.min_insync_replicas
        if isr < min_isr:
            raise KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS, f"ISR has {isr} replicas, min.insync.replicas is {min_isr}")
    if isinstance(records, CopiedBatches):
        _append_copied(partition, records, appended, now_ms)
        return
    if isinstance(records, TxnMarker):
        if origin is not AppendOrigin.COORDINATOR:
            raise TypeError("only the coordinator's origin writes transaction markers")
        result = appended.result = partition.append_marker(
            records.control_type, producer_id=records.producer_id, producer_epoch=records.producer_epoch,
            coordinator_epoch=records.coordinator_epoch, now_ms=now_ms)
        appended.required_offset = result.last_offset + 1
        return
    if records is None:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "the request carries no record batch")
    result = appended.result = partition.append(records, now_ms=now_ms, transactional=transactional,
                                                coordinator=origin is AppendOrigin.COORDINATOR,
                                                verification=entry.verification)
    appended.required_offset = result.last_offset + 1


def _append_copied(partition: Partition, copied: CopiedBatches, appended: LeaderAppend, now_ms: int) -> None:
    log = partition.log
    partition.check_failback_done()  # a failback's cut first: the log may be mid-truncation
    if copied.records:
        # Checked and appended with no await between: the log end cannot move meanwhile.
        check_copied_offsets(log, copied.records, previous_end=copied.previous_end_offset,
                             source_log_start=copied.source_log_start)
        appended.result = partition.append_copied(copied.records, now_ms=now_ms)
    # Up to the log end, not only to this append's end: after a retried request (every batch
    # skipped) the mirror still learns when its copy is safe.
    appended.required_offset = log.log_end_offset
    if copied.source_log_start >= 0:
        check_log_start(f"{partition.topic}-{partition.index}", copied.source_log_start, log.log_end_offset)


async def wait_for_acks(appends: Sequence[LeaderAppend], *, required_acks: int, timeout_ms: int) -> None:
    """Fsync what reached ``flush.messages``, then with acks=-1 wait until each append's high
    watermark reaches its required offset, all at once, at most ``timeout_ms`` (see the module);
    sets each one's ``refused`` (a failed fsync) or ``acks``."""
    for appended in appends:
        if appended.result is not None and appended.partition is not None:
            try:
                await appended.partition.wait_flushed(appended.result)
            except KafkaError as exc:
                appended.refused = exc
    if required_acks != -1:
        return
    waiting: list[tuple[LeaderAppend, Partition]] = []
    for appended in appends:
        partition = appended.partition
        if appended.refused is not None or partition is None:
            continue
        code = partition.check_enough_replicas_reach_offset(appended.required_offset)
        if code is None:
            appended.acks = ErrorCode.REQUEST_TIMED_OUT  # until its wait says otherwise
            waiting.append((appended, partition))
        else:
            appended.acks = code
    if not waiting:
        return

    async def wait_one(appended: LeaderAppend, partition: Partition) -> None:
        appended.acks = await partition.wait_for_high_watermark(appended.required_offset)

    with trio.move_on_after(max(timeout_ms, 0) / 1000):
        async with trio.open_nursery() as nursery:
            for appended, partition in waiting:
                nursery.start_soon(wait_one, appended, partition)


async def append_records(replicas: HostedPartitions, entries: Sequence[AppendEntry], *, origin: AppendOrigin,
                         required_acks: int, timeout_ms: int, transactional: bool = False) -> list[LeaderAppend]:
    """Append one request's partitions as leader, then wait for their acks (both steps of the
    module, one clock reading for all); one answer per entry, in order."""
    timestamp = clock.now_ms()
    appends = [append_to_leader(replicas, entry, origin=origin, required_acks=required_acks, now_ms=timestamp,
                                transactional=transactional) for entry in entries]
    await wait_for_acks(appends, required_acks=required_acks, timeout_ms=timeout_ms)
    return appends
