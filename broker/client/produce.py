"""Produce: raw record batches to partition leaders, and an idempotent producer.

Batches travel as the bytes the caller gives (RecordBatch v2, as `records.build_batch` makes or
a fetch returned); nothing here decodes records. A produce is resent only when that cannot
write twice: after an error answer (nothing was appended), when the request never left the
client (its leader could not be connected to), or after a lost connection when the batches
carry a producer id (the broker drops the duplicate by its sequence number).

Each request goes to the partition's leader once (`Client.request(fail_fast=True)`): a leader
that died fails it at once and marks metadata stale, so the next attempt goes to the new leader
instead of reconnecting to the dead one until the deadline.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

import trio

from broker.client.cluster import Client, TopicPartition
from broker.client.connection import ConnectionFailed, check_error
from broker.client.deadline import wire_timeout_ms
from broker.client.per_leader import send_per_leader
from broker.clock import now_ms
from broker.protocol.errors import ErrorCode, KafkaError, is_retriable
from broker.protocol.messages import InitProducerIdRequest, InitProducerIdResponse, ProduceRequest, ProduceResponse
from broker.protocol.records import Compression, Record, build_batch, read_batch_header, split_batches, stamp_producer
from broker.retry import retry

__all__ = [
    "IdempotentProducer",
    "ProduceResult",
    "init_idempotent_producer",
    "produce",
    "produce_batches",
]

Buffer = bytes | bytearray | memoryview

_SEQUENCE_MOD = 1 << 31

# Retriable in Kafka's terms, but the write may have happened: resent only when it was never
# sent or the broker drops a duplicate by its producer id.
_OUTCOME_UNKNOWN = frozenset({ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT})
# Retriable in Kafka's terms, but the same bytes would be just as corrupt again.
_NOT_RESENT = frozenset({ErrorCode.CORRUPT_MESSAGE})


@dataclass(frozen=True, slots=True)
class ProduceResult:
    """The broker's answer for one partition. With acks=0 there is none: offsets are -1."""

    topic: str
    partition: int
    error: int = ErrorCode.NONE
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    # False when the request never left the client (no leader known, or the leader could not be
    # connected to or was backing off): sending the same batches again cannot write them twice.
    sent: bool = True

    def raise_for_error(self) -> None:
        """Raise KafkaError when the partition reported an error."""
        check_error(self.error, f"produce to {self.topic}-{self.partition}", self.error_message)


def _carries_producer_id(batches: Iterable[Buffer]) -> bool:
    """Whether every batch has a producer id, so the broker would drop a resent duplicate."""
    try:
        headers = [h for data in batches for _, h in split_batches(data)]
    except KafkaError:  # not well-formed batches: the broker will say so; never resend them
        return False
    return bool(headers) and all(h.has_producer_id for h in headers)


async def produce_batches(
    client: Client,
    batches: Mapping[TopicPartition, Buffer],
    *,
    acks: int = -1,
    timeout_ms: int = 30000,
    transactional_id: str | None = None,
) -> dict[TopicPartition, ProduceResult]:
    """Send each partition's record batches (bytes, one or more whole batches) to its leader,
    one request per leader, the leaders concurrently; one attempt, no resend.

    `acks`: 0 (no answer), 1 (leader), -1 (all in-sync replicas). `timeout_ms` is the broker's
    wait for replication, at most what is left of the caller's deadline; the call ends at that
    deadline (default: the client's request timeout plus `timeout_ms`).

    Never raises for a partition's failure: its result carries the error code. A partition
    whose leader is unknown gets the lookup's code (UNKNOWN_TOPIC_OR_PARTITION,
    LEADER_NOT_AVAILABLE); a leader that cannot be reached or does not answer in time gives
    NETWORK_EXCEPTION or REQUEST_TIMED_OUT at once, with metadata marked stale so the next call
    goes to the new leader (the write may or may not have happened, unless `sent` is False).
    Raises ValueError for bad `acks`.
    """
    if acks not in (0, 1, -1):
        raise ValueError(f"acks must be 0, 1 or -1, not {acks}")
    with client.deadline("Produce", extra_s=timeout_ms / 1000):
        return await _produce_batches(client, batches, acks, wire_timeout_ms(timeout_ms),
                                      transactional_id)


async def _produce_batches(
    client: Client, batches: Mapping[TopicPartition, Buffer], acks: int, timeout_ms: int, transactional_id: str | None
) -> dict[TopicPartition, ProduceResult]:
    def request_for(tps: list[TopicPartition]) -> ProduceRequest:
        topics: dict[str, list[ProduceRequest.PartitionProduceData]] = {}
        for tp in tps:
            data = ProduceRequest.PartitionProduceData(index=tp.partition, records=batches[tp])
            topics.setdefault(tp.topic, []).append(data)
        return ProduceRequest(
            transactional_id=transactional_id,
            acks=acks,
            timeout_ms=timeout_ms,
            topic_data=[ProduceRequest.TopicProduceData(name=t, partition_data=p) for t, p in topics.items()],
        )

    def results_in(response: ProduceResponse | None, tps: list[TopicPartition]
                   ) -> Iterator[tuple[str, int, ProduceResult]]:
        if response is None:  # acks=0
            for tp in tps:
                yield tp.topic, tp.partition, ProduceResult(tp.topic, tp.partition)
            return
        for t in response.responses:
            for p in t.partition_responses:
                yield t.name, p.index, ProduceResult(t.name, p.index, p.error_code, p.base_offset,
                                                     p.log_append_time_ms, p.log_start_offset, p.error_message)

    return await send_per_leader(client, batches.keys(), request_for, results_in, _failed)


def _failed(tp: TopicPartition, error: KafkaError | ConnectionFailed, sent: bool) -> ProduceResult:
    """The result of a write without an answer: no leader known, its leader could not be
    reached or did not answer in time, or refused the request (e.g. no common version)."""
    if isinstance(error, ConnectionFailed):
        return ProduceResult(tp.topic, tp.partition, error.error_code, error_message=str(error), sent=sent)
    return ProduceResult(tp.topic, tp.partition, error.code, error_message=error.message, sent=sent)


async def produce(
    client: Client,
    topic: str,
    partition: int,
    batches: Buffer,
    *,
    acks: int = -1,
    timeout_ms: int = 30000,
) -> ProduceResult:
    """Send record batches (bytes) to one partition and return the broker's answer.

    Retries retriable errors (NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, ...) with fresh
    metadata and backoff until the caller's deadline (default: client request timeout +
    timeout_ms), a leader that could not be reached among them (the next attempt goes to the
    leader fresh metadata names); a connection lost in flight is retried only for batches with
    a producer id. Raises KafkaError with the partition's error code (NETWORK_EXCEPTION or
    REQUEST_TIMED_OUT when the leader could not be reached or did not answer).
    """
    tp = TopicPartition(topic, partition)
    deduplicated = _carries_producer_id([batches])
    unsent = False  # whether the last attempt never left the client

    async def attempt() -> ProduceResult:
        nonlocal unsent
        result = (await produce_batches(client, {tp: batches}, acks=acks, timeout_ms=timeout_ms))[tp]
        unsent = not result.sent
        result.raise_for_error()
        return result

    def worth_resending(exc: Exception) -> bool:
        if not isinstance(exc, KafkaError) or not is_retriable(exc.code) or exc.code in _NOT_RESENT:
            return False
        return exc.code not in _OUTCOME_UNKNOWN or unsent or deduplicated

    with client.deadline(f"produce to {topic}-{partition}", extra_s=timeout_ms / 1000):
        return await retry(
            attempt,
            retriable=worth_resending,
            backoff=client.backoff,
            on_failure=lambda exc, failures: client.invalidate_metadata([topic]),
        )


def _stamp(batch: Buffer, producer_id: int, producer_epoch: int, base_sequence: int) -> bytes:
    """A copy of one batch with the producer fields set and its CRC recomputed."""
    out = bytearray(batch)
    stamp_producer(out, 0, producer_id, producer_epoch, base_sequence)
    return bytes(out)


class IdempotentProducer:
    """Writes batches stamped with a producer id, epoch and per-partition sequence numbers, so
    the broker keeps each exactly once and in order however often a send is retried.

    acks is always -1, as Kafka requires for idempotence. Sends to one partition are
    serialised (one batch in flight per partition keeps ordering simple); different
    partitions go concurrently. Build it with `init_idempotent_producer`.
    """

    def __init__(self, client: Client, producer_id: int, producer_epoch: int) -> None:
        self.client = client
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self._sequences: dict[TopicPartition, int] = {}
        self._locks: dict[TopicPartition, trio.Lock] = {}

    def next_sequence(self, topic: str, partition: int) -> int:
        """The base sequence the next batch to this partition will carry."""
        return self._sequences.get(TopicPartition(topic, partition), 0)

    async def send(
        self,
        topic: str,
        partition: int,
        records: Sequence[Record],
        *,
        compression: int = Compression.NONE,
    ) -> ProduceResult:
        """Build one batch of `records` and write it exactly once. A record without a timestamp
        gets the current time, as Kafka's producers stamp it (never 0, which is 1970).

        Raises KafkaError (e.g. OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID,
        MESSAGE_TOO_LARGE; NETWORK_EXCEPTION or REQUEST_TIMED_OUT when the leader stayed
        unreachable). After such a failure the partition's sequence is unchanged, so sending
        the same records again cannot duplicate them if the first attempt did land.
        """
        tp = TopicPartition(topic, partition)
        async with self._locks.setdefault(tp, trio.Lock()):
            sequence = self._sequences.get(tp, 0)
            if any(r.timestamp is None for r in records):
                now = now_ms()
                records = [r if r.timestamp is not None else replace(r, timestamp=now) for r in records]
            batch = build_batch(
                records,
                compression=compression,
                producer_id=self.producer_id,
                producer_epoch=self.producer_epoch,
                base_sequence=sequence,
            )
            return await self._send_locked(tp, batch, len(records), sequence)

    async def send_batch(self, topic: str, partition: int, batch: Buffer) -> ProduceResult:
        """Write one existing RecordBatch v2 (e.g. fetched elsewhere) exactly once: its producer
        id, epoch and base sequence are replaced by this producer's (CRC recomputed).

        Raises ValueError if `batch` is not exactly one whole batch; otherwise as `send`.
        """
        spans = split_batches(batch)
        if len(spans) != 1:
            raise ValueError(f"send_batch takes exactly one batch, got {len(spans)}")
        count = read_batch_header(batch).last_offset_delta + 1
        tp = TopicPartition(topic, partition)
        async with self._locks.setdefault(tp, trio.Lock()):
            sequence = self._sequences.get(tp, 0)
            stamped = _stamp(batch, self.producer_id, self.producer_epoch, sequence)
            return await self._send_locked(tp, stamped, count, sequence)

    async def _send_locked(self, tp: TopicPartition, batch: bytes, count: int, sequence: int) -> ProduceResult:
        result = await produce(self.client, tp.topic, tp.partition, batch, acks=-1)
        self._sequences[tp] = (sequence + count) % _SEQUENCE_MOD
        return result


async def init_idempotent_producer(client: Client) -> IdempotentProducer:
    """Get a producer id and epoch from the cluster (InitProducerId) and return a producer.

    Raises KafkaError for an error answer, ConnectionFailed when no broker answers in time.
    """
    request = InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=2**31 - 1)
    response: InitProducerIdResponse = await client.request_any(request)
    check_error(response.error_code, "InitProducerId")
    return IdempotentProducer(client, response.producer_id, response.producer_epoch)
