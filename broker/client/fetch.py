"""Fetch: raw record batches from partition leaders, decoded only on request.

A fetch returns, per partition, the bytes the broker sent (whole RecordBatch v2 batches,
possibly followed by a partial batch cut by the size limit) with the high watermark, log start
offset and error code. The mirror forwards those bytes as they are; `decode_records` is for
tools and tests.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from broker.client.cluster import Client, TopicPartition
from broker.client.connection import ConnectionFailed
from broker.client.deadline import wire_timeout_ms
from broker.client.per_leader import send_per_leader
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.messages import FetchRequest, FetchResponse
from broker.protocol.records import DecodedRecord, decode_batch, split_batches

__all__ = [
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "FetchedPartition",
    "decode_records",
    "fetch",
    "whole_batches",
]

READ_UNCOMMITTED = 0
READ_COMMITTED = 1

Buffer = bytes | bytearray | memoryview

# Errors after which the partition's leader may have moved: look it up again next time.
_STALE_LEADER = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.KAFKA_STORAGE_ERROR,
    }
)


@dataclass(frozen=True, slots=True)
class FetchedPartition:
    """One partition's part of a fetch answer.

    `records` holds raw RecordBatch v2 bytes, possibly ending in a partial batch; empty when
    nothing new (or on error). Offsets are -1 when the broker did not answer for it.
    """

    topic: str
    partition: int
    error: int = ErrorCode.NONE
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: Buffer = b""
    error_message: str | None = None

    @property
    def next_offset(self) -> int | None:
        """The offset after the last whole batch returned, or None when none was."""
        spans = split_batches(self.records, allow_partial_tail=True)
        return spans[-1][1].last_offset + 1 if spans else None


def whole_batches(records: Buffer) -> memoryview:
    """`records` without a trailing partial batch (a view, no copy)."""
    spans = split_batches(records, allow_partial_tail=True)
    end = spans[-1][0] + spans[-1][1].size if spans else 0
    return memoryview(records)[:end]


def decode_records(
    records: Buffer, *, from_offset: int | None = None, include_control: bool = False
) -> list[DecodedRecord]:
    """Every record of the whole batches in `records` (decompressed, CRC-checked), skipping
    control batches unless asked and records before `from_offset` (a fetch starts at the batch
    holding the fetch offset, so its first records may precede it).

    Raises KafkaError(CORRUPT_MESSAGE) for a batch that does not check or parse.
    """
    out: list[DecodedRecord] = []
    for pos, header in split_batches(records, allow_partial_tail=True):
        if header.is_control and not include_control:
            continue
        _, decoded = decode_batch(records, pos)
        out.extend(r for r in decoded if from_offset is None or r.offset >= from_offset)
    return out


async def fetch(
    client: Client,
    positions: Mapping[TopicPartition, int],
    *,
    max_wait_ms: int = 500,
    min_bytes: int = 1,
    max_bytes: int = 50 * 1024 * 1024,
    partition_max_bytes: int = 1024 * 1024,
    isolation_level: int = READ_UNCOMMITTED,
) -> dict[TopicPartition, FetchedPartition]:
    """Fetch from each partition's leader starting at `positions[tp]`; one request per leader,
    the leaders concurrently. Uses Fetch v4..v12, without fetch sessions.

    `max_wait_ms`/`min_bytes`: how long the broker may hold the answer waiting for data;
    `max_bytes` bounds a whole answer, `partition_max_bytes` each partition's share (the
    broker still returns at least one batch when the first is bigger). The caller's deadline
    bounds the call (default: the client's request timeout plus max_wait_ms) and the broker's
    wait (max_wait_ms is cut to what is left of it).

    Never raises for a partition's failure: its result carries the error code
    (OFFSET_OUT_OF_RANGE, NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, or
    NETWORK_EXCEPTION / REQUEST_TIMED_OUT when the leader could not be reached or answer in
    time: at once when it is down, without reconnecting to it); errors that suggest a moved
    leader make the next call refresh metadata. A caller that fetches in a loop backs off
    after such errors.
    """
    with client.deadline("Fetch", extra_s=max_wait_ms / 1000):
        return await _fetch(client, positions, wire_timeout_ms(max_wait_ms), min_bytes, max_bytes,
                            partition_max_bytes, isolation_level)


async def _fetch(
    client: Client,
    positions: Mapping[TopicPartition, int],
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    partition_max_bytes: int,
    isolation_level: int,
) -> dict[TopicPartition, FetchedPartition]:
    def request_for(tps: list[TopicPartition]) -> FetchRequest:
        topics: dict[str, list[FetchRequest.FetchPartition]] = {}
        for tp in tps:
            topics.setdefault(tp.topic, []).append(
                FetchRequest.FetchPartition(
                    partition=tp.partition, fetch_offset=positions[tp], partition_max_bytes=partition_max_bytes
                )
            )
        return FetchRequest(
            replica_id=-1,
            max_wait_ms=max_wait_ms,
            min_bytes=min_bytes,
            max_bytes=max_bytes,
            isolation_level=isolation_level,
            session_id=0,
            session_epoch=-1,  # no fetch session: every request is complete
            topics=[FetchRequest.FetchTopic(topic=t, partitions=p) for t, p in topics.items()],
        )

    def results_in(response: FetchResponse, tps: list[TopicPartition]) -> Iterator[tuple[str, int, FetchedPartition]]:
        if response.error_code != ErrorCode.NONE:
            raise KafkaError(ErrorCode(response.error_code), "the whole fetch answer")
        for t in response.responses:
            for p in t.partitions:
                yield t.topic, p.partition_index, FetchedPartition(
                    t.topic, p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset,
                    p.log_start_offset, p.records if p.records is not None else b"")

    # A leader that died fails its fetch at once (and marks metadata stale) rather than being
    # reconnected to until the deadline; the caller's next fetch, after its backoff, asks the
    # new leader.
    return await send_per_leader(client, positions.keys(), request_for, results_in, _failed, max_version=12,
                                 leader_moved=_STALE_LEADER, stale_after_failure=True)


def _failed(tp: TopicPartition, error: KafkaError | ConnectionFailed, sent: bool) -> FetchedPartition:
    code = error.code if isinstance(error, KafkaError) else error.error_code
    return FetchedPartition(tp.topic, tp.partition, code, error_message=str(error))
