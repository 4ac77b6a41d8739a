"""The chaos workload: a producer of numbered records, and a reader of whole partitions.

The producer writes `deploy.chaos.payload` records idempotently (acks=all, one batch in flight
per partition) at a bounded rate for a bounded count, and keeps the sequence numbers each
partition's leader acknowledged. A send that fails for a reason that may pass (the broker is
restarting, the connection dropped) is sent again with the same records: the idempotent
producer's sequence number is unchanged after a failure, so a first attempt that did land is
not written twice. A partition whose sends keep failing past a deadline stops and says why; it
never skips ahead, since a later batch would then carry the sequence number of a lost one.

The reader reads partitions from their log start to the end offset seen when it began;
`read_topic_committed` reads as a read_committed consumer does instead (librdkafka with
isolation.level=read_committed up to the last stable offset: no control batches, no records of
aborted transactions), which is what an exactly-once mirror promises its readers.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

import trio
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from broker.client import Backoff, Client, ConnectionFailed, TopicPartition, admin, fetch
from broker.client.admin import EARLIEST, LATEST
from broker.client.produce import IdempotentProducer
from broker.clock import now_ms
from broker.protocol.errors import ErrorCode, KafkaError, is_retriable
from broker.protocol.records import DecodedRecord, Record, decode_batch, split_batches
from broker.retry import retry, worth_reporting
from deploy.chaos.payload import make_record

__all__ = [
    "ProducerStats",
    "Workload",
    "end_offsets",
    "last_records",
    "produce_sequenced",
    "read_partition",
    "read_topic",
    "read_topic_committed",
]

log = logging.getLogger(__name__)

_RETRY = Backoff(initial_s=0.05, max_s=1.0, jitter=0.2)
READ_PARTITION_TIMEOUT_S = 120.0  # reading one partition back to check it


@dataclass(frozen=True)
class Workload:
    """What to write: `records` in all, spread evenly over `partitions`, at most `rate` records a
    second in batches of `batch_size`, each a `payload` record of run `run`, stamped with the
    producer's clock (so the mirror's replication latency figures mean something)."""

    topic: str
    partitions: int
    records: int
    rate: float
    run: str
    batch_size: int = 10
    keys: int = 16

    def __post_init__(self) -> None:
        if self.partitions < 1 or self.records < 0 or self.rate <= 0 or self.batch_size < 1:
            raise ValueError(f"bad workload {self}")

    def count_for(self, partition: int) -> int:
        """How many records partition `partition` gets (the first ones take the remainder)."""
        share, extra = divmod(self.records, self.partitions)
        return share + (1 if partition < extra else 0)


@dataclass
class ProducerStats:
    """What the producer saw: per partition, the acknowledged sequence numbers in order."""

    acked: dict[int, list[int]] = field(default_factory=dict)
    attempts: int = 0
    retries: int = 0
    failed: dict[int, str] = field(default_factory=dict)  # partitions that gave up, and why
    done: bool = False

    @property
    def acked_count(self) -> int:
        return sum(len(seqs) for seqs in self.acked.values())


async def produce_sequenced(
    producer: IdempotentProducer,
    workload: Workload,
    stats: ProducerStats,
    *,
    give_up_after_s: float = 60.0,
    send_timeout_s: float = 10.0,
) -> None:
    """Write the workload through `producer`, one task per partition, filling `stats` as
    acknowledgements arrive; returns when every partition is done or has given up (see
    `stats.failed`). A partition gives up when one batch stays unacknowledged for
    `give_up_after_s`, or at once for an error that cannot pass (e.g. OUT_OF_ORDER_SEQUENCE_NUMBER).
    """
    interval = workload.batch_size * workload.partitions / workload.rate  # seconds between batches

    async def one_partition(partition: int) -> None:
        acked = stats.acked.setdefault(partition, [])
        total = workload.count_for(partition)
        started = trio.current_time()
        for batch_number, first in enumerate(range(0, total, workload.batch_size)):
            # Pace by the schedule, not by the last send: a stall is followed by a catch-up.
            await trio.sleep_until(started + batch_number * interval)
            seqs = range(first, min(first + workload.batch_size, total))
            stamp = now_ms()
            records = [make_record(workload.run, partition, s, timestamp_ms=stamp, keys=workload.keys) for s in seqs]
            error = await _send_until_acked(producer, workload.topic, partition, records, stats,
                                            give_up_after_s, send_timeout_s)
            if error is not None:
                stats.failed[partition] = f"batch from seq {first}: {error}"
                log.warning("producer: partition %d gives up: %s", partition, stats.failed[partition])
                return
            acked.extend(seqs)

    try:
        async with trio.open_nursery() as nursery:
            for partition in range(workload.partitions):
                nursery.start_soon(one_partition, partition)
    finally:
        stats.done = True


async def _send_until_acked(producer: IdempotentProducer, topic: str, partition: int, records: Sequence[Record],
                            stats: ProducerStats, give_up_after_s: float, send_timeout_s: float) -> str | None:
    """None once acknowledged, else the reason it never was."""

    async def send() -> None:
        stats.attempts += 1
        with trio.fail_after(send_timeout_s):  # the client raises what timed out, naming the broker
            await producer.send(topic, partition, records)

    def failed(exc: Exception, failures: int) -> None:
        stats.retries += 1
        if worth_reporting(failures):
            log.info("producer: partition %d send failed (%s); attempt %d", partition, _reason(exc), failures)

    try:
        await retry(send, retriable=_may_pass, backoff=_RETRY, on_failure=failed,
                    deadline=trio.current_time() + give_up_after_s)
        return None
    except (KafkaError, ConnectionFailed) as exc:
        if not _may_pass(exc):
            return str(exc)
        return f"unacknowledged for {give_up_after_s:.0f}s; last error {_reason(exc)}"


def _may_pass(exc: Exception) -> bool:
    """A send failure worth another attempt with the same records."""
    if isinstance(exc, KafkaError):
        return is_retriable(exc.code)  # NETWORK_EXCEPTION and REQUEST_TIMED_OUT among them
    return isinstance(exc, ConnectionFailed)


def _reason(exc: Exception) -> str:
    return str(exc) if isinstance(exc, KafkaError) else f"{type(exc).__name__}: {exc}"


# -- reading back -------------------------------------------------------------------------------


async def end_offsets(client: Client, topic: str, partitions: int) -> dict[int, int]:
    """Each partition's log end offset. Raises KafkaError or ConnectionFailed."""
    tps = {TopicPartition(topic, p): LATEST for p in range(partitions)}
    listed = await admin.list_offsets(client, tps)
    return {tp.partition: listed[tp].offset for tp in tps}


async def last_records(client: Client, topic: str, ends: dict[int, int]) -> dict[int, DecodedRecord | None]:
    """The record just below each given end offset (None when there is none or it could not be
    read this time). Never raises for one partition's failure."""
    positions = {TopicPartition(topic, p): end - 1 for p, end in ends.items() if end > 0}
    out: dict[int, DecodedRecord | None] = dict.fromkeys(ends)
    if not positions:
        return out
    fetched = await fetch(client, positions, max_wait_ms=0)
    for tp, part in fetched.items():
        if part.error != ErrorCode.NONE:
            continue
        for record in decode_records(part.records, positions[tp]):
            if record.offset == positions[tp]:
                out[tp.partition] = record
    return out


def decode_records(data: bytes | bytearray | memoryview, from_offset: int) -> list[DecodedRecord]:
    """The records of the whole batches in `data` at or after `from_offset`. A batch that fails
    its CRC or does not parse becomes one placeholder per record slot (value None, which the
    checker calls corrupted), so damage is counted rather than stopping the read."""
    out: list[DecodedRecord] = []
    for pos, header in split_batches(data, allow_partial_tail=True):
        if header.is_control:
            continue
        try:
            _, records = decode_batch(data, pos)
        except KafkaError:
            records = [DecodedRecord(header.base_offset + d, -1, None, None, ())
                       for d in range(header.last_offset_delta + 1)]
        out.extend(r for r in records if r.offset >= from_offset)
    return out


async def read_partition(client: Client, topic: str, partition: int, *,
                         max_rounds: int = 100_000) -> list[DecodedRecord]:
    """Every record from the log start to the end offset (as listed when the read began), in
    offset order.

    Retriable fetch errors are retried (briefly paused) up to `max_rounds` fetches; raises
    KafkaError for another error code or when the rounds run out. The caller's cancel scope
    bounds the read.
    """
    tp = TopicPartition(topic, partition)
    listed = await admin.list_offsets(client, {tp: EARLIEST})
    start = listed[tp].offset
    end = (await admin.list_offsets(client, {tp: LATEST}))[tp].offset
    out: list[DecodedRecord] = []
    position = start
    for _ in range(max_rounds):
        if position >= end:
            return out
        part = (await fetch(client, {tp: position}, max_wait_ms=0))[tp]
        if part.error != ErrorCode.NONE:
            if is_retriable(part.error):
                await trio.sleep(0.1)
                continue
            raise KafkaError(ErrorCode(part.error), f"reading {topic}-{partition} at {position}: "
                                                    f"{part.error_message or ''}")
        following = part.next_offset
        if following is None:  # nothing whole came back: a batch larger than the fetch size
            raise KafkaError(ErrorCode.RECORD_LIST_TOO_LARGE, f"{topic}-{partition} at {position}")
        out.extend(r for r in decode_records(part.records, position) if r.offset < end)
        position = following
    raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"{topic}-{partition} did not end after {max_rounds} fetches")


async def read_topic(client: Client, topic: str, partitions: int) -> dict[int, list[DecodedRecord]]:
    """`read_partition` for partitions 0..partitions-1, one after another, each within
    READ_PARTITION_TIMEOUT_S (after that it raises what timed out)."""
    out: dict[int, list[DecodedRecord]] = {}
    for p in range(partitions):
        with trio.fail_after(READ_PARTITION_TIMEOUT_S):
            out[p] = await read_partition(client, topic, p)
    return out


async def read_topic_committed(client: Client, bootstrap: str, topic: str,
                               partitions: int) -> dict[int, list[DecodedRecord]]:
    """Every committed record of partitions 0..partitions-1, from the log start to the last
    stable offset listed (through `client`) when the read began, read by a librdkafka consumer
    with isolation.level=read_committed at `bootstrap`. Raises TimeoutError after
    READ_PARTITION_TIMEOUT_S."""
    tps = {TopicPartition(topic, p): LATEST for p in range(partitions)}
    listed = await admin.list_offsets(client, tps, isolation_level=1)
    stable = {tp.partition: listed[tp].offset for tp in tps}
    return await trio.to_thread.run_sync(_consume_committed, bootstrap, topic, stable)


def _consume_committed(bootstrap: str, topic: str, stable: dict[int, int]) -> dict[int, list[DecodedRecord]]:
    """Blocking (a worker thread): read each partition up to its `stable` offset. A partition is
    done when the consumer's position reaches that offset (librdkafka moves its position past
    control batches and aborted records it skips)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"chaos-committed-{uuid.uuid4()}",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": False, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([KafkaTopicPartition(topic, p, 0) for p in stable])
        got: dict[int, list[DecodedRecord]] = {p: [] for p in stable}
        deadline = time.monotonic() + READ_PARTITION_TIMEOUT_S
        while True:
            positions = {tp.partition: tp.offset for tp in consumer.position(
                [KafkaTopicPartition(topic, p) for p in stable])}
            if all(positions[p] >= end for p, end in stable.items()):
                return got
            if time.monotonic() > deadline:
                raise TimeoutError(f"read_committed {topic}: at {positions}, wanted {stable}")
            for msg in consumer.consume(1000, timeout=0.5):
                p, offset = msg.partition(), msg.offset()
                if msg.error() is not None or p is None or offset is None or offset >= stable[p]:
                    continue
                raw = msg.headers() or []
                headers = tuple((name, value if isinstance(value, bytes | None) else str(value).encode())
                                for name, value in (raw.items() if isinstance(raw, dict) else raw))
                got[p].append(DecodedRecord(offset, msg.timestamp()[1], msg.key(), msg.value(), headers))
    finally:
        consumer.close()
