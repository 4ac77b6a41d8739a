"""Small helpers over the client for the mirror's own topics: make sure one exists, read one
whole (they are small and compacted), append records to one."""

from __future__ import annotations

import struct
from collections.abc import Sequence

from broker.client import Client, TopicMetadata, TopicPartition, admin, decode_records, fetch, produce
from broker.client.admin import EARLIEST, LATEST, NewTopic
from broker.clock import now_ms
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import Buffer, DecodedRecord, Record, build_batch, decode_batch, split_batches

__all__ = ["append", "describe_topic", "ensure_topic", "read_whole_topic"]

COMPACTED = {"cleanup.policy": "compact"}
_COMMIT = 1  # a control record's type (its key's second int16): 0 abort, 1 commit


async def describe_topic(client: Client, topic: str) -> TopicMetadata | None:
    """The topic's metadata, None when the cluster does not have it."""
    try:
        return (await admin.describe_topics(client, [topic])).get(topic)
    except KafkaError as exc:
        if exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            return None
        raise


async def ensure_topic(client: Client, topic: str, *, partitions: int = 1, replication_factor: int = -1,
                       configs: dict[str, str] | None = None) -> None:
    """Create `topic` unless it exists (whoever made it, with whatever settings)."""
    if await describe_topic(client, topic) is not None:
        return
    await admin.create_topics(client, {topic: NewTopic(partitions, replication_factor, configs or COMPACTED)},
                              exist_ok=True)


async def read_whole_topic(client: Client, topic: str, *, max_rounds: int = 100_000,
                           committed_only: bool = False) -> list[DecodedRecord]:
    """Every record of every partition of `topic`, from log start to the end offset when asked;
    an absent topic reads as empty. Each partition's records come in offset order.

    `committed_only`: a read_committed reader's view: records of aborted transactions, and of
    transactions still open at the end, are left out (a committed transaction's records come
    where its commit marker is). Non-transactional records are always in."""
    described = await describe_topic(client, topic)
    if described is None:
        return []
    tps = [TopicPartition(topic, p) for p in range(described.partition_count)]
    starts = await admin.list_offsets(client, {tp: EARLIEST for tp in tps})
    ends = await admin.list_offsets(client, {tp: LATEST for tp in tps})
    positions = {tp: starts[tp].offset for tp in tps if starts[tp].offset < ends[tp].offset}
    out: list[DecodedRecord] = []
    committed = _Committed()
    for _ in range(max_rounds):
        if not positions:
            return out
        fetched = await fetch(client, positions, max_wait_ms=0)
        for tp, part in fetched.items():
            if part.error != ErrorCode.NONE:
                detail = part.error_message or ""
                raise KafkaError(ErrorCode(part.error), f"reading {tp.topic}-{tp.partition}: {detail}")
            if committed_only:
                out.extend(r for r in committed.take(part.records, positions[tp]) if r.offset < ends[tp].offset)
            else:
                records = decode_records(part.records, from_offset=positions[tp])
                out.extend(r for r in records if r.offset < ends[tp].offset)
            following = part.next_offset
            if following is None or following >= ends[tp].offset:
                del positions[tp]
            else:
                positions[tp] = following
    raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"{topic} did not end after {max_rounds} fetches")


class _Committed:
    """Holds each producer's transactional records back until its marker: kept on a commit,
    dropped on an abort (what Kafka's consumers do with the aborted-transactions list)."""

    def __init__(self) -> None:
        self._open: dict[int, list[DecodedRecord]] = {}

    def take(self, records: Buffer, from_offset: int) -> list[DecodedRecord]:
        out: list[DecodedRecord] = []
        for pos, header in split_batches(records, allow_partial_tail=True):
            if header.last_offset < from_offset:
                continue  # read in an earlier round
            _, decoded = decode_batch(records, pos)
            decoded = [r for r in decoded if r.offset >= from_offset]
            if header.is_control:
                kept = self._open.pop(header.producer_id, [])
                key = decoded[0].key if decoded else None
                if key is not None and len(key) >= 4 and struct.unpack_from(">h", key, 2)[0] == _COMMIT:
                    out.extend(kept)
            elif header.is_transactional:
                self._open.setdefault(header.producer_id, []).extend(decoded)
            else:
                out.extend(decoded)
        return out


async def append(client: Client, topic: str, records: Sequence[tuple[bytes, bytes | None]], *,
                 partition: int = 0) -> None:
    """Write (key, value) records to one partition in one batch, acks=all; raises KafkaError."""
    if records:
        # Stamped now (CreateTime): a timestamp of 0 is refused by a target that bounds timestamps
        # (message.timestamp.before.max.ms) and is at once past any time-based retention.
        batch = build_batch([Record(key, value) for key, value in records], base_timestamp=now_ms())
        await produce(client, topic, partition, batch, acks=-1)
