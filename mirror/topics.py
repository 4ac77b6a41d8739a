"""Small helpers over the client for the mirror's own topics: make sure one exists, read one
whole (they are small and compacted), append records to one."""

from __future__ import annotations

from collections.abc import Sequence

from broker.client import Client, TopicMetadata, TopicPartition, admin, decode_records, fetch, produce
from broker.client.admin import EARLIEST, LATEST, NewTopic
from broker.clock import now_ms
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import DecodedRecord, Record, build_batch

__all__ = ["append", "describe_topic", "ensure_topic", "read_whole_topic"]

COMPACTED = {"cleanup.policy": "compact"}


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


async def read_whole_topic(client: Client, topic: str, *, max_rounds: int = 100_000) -> list[DecodedRecord]:
    """Every record of every partition of `topic`, from log start to the end offset when asked;
    an absent topic reads as empty. Each partition's records come in offset order."""
    described = await describe_topic(client, topic)
    if described is None:
        return []
    tps = [TopicPartition(topic, p) for p in range(described.partition_count)]
    starts = await admin.list_offsets(client, {tp: EARLIEST for tp in tps})
    ends = await admin.list_offsets(client, {tp: LATEST for tp in tps})
    positions = {tp: starts[tp].offset for tp in tps if starts[tp].offset < ends[tp].offset}
    out: list[DecodedRecord] = []
    for _ in range(max_rounds):
        if not positions:
            return out
        fetched = await fetch(client, positions, max_wait_ms=0)
        for tp, part in fetched.items():
            if part.error != ErrorCode.NONE:
                detail = part.error_message or ""
                raise KafkaError(ErrorCode(part.error), f"reading {tp.topic}-{tp.partition}: {detail}")
            records = decode_records(part.records, from_offset=positions[tp])
            out.extend(r for r in records if r.offset < ends[tp].offset)
            following = part.next_offset
            if following is None or following >= ends[tp].offset:
                del positions[tp]
            else:
                positions[tp] = following
    raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"{topic} did not end after {max_rounds} fetches")


async def append(client: Client, topic: str, records: Sequence[tuple[bytes, bytes | None]], *,
                 partition: int = 0) -> None:
    """Write (key, value) records to one partition in one batch, acks=all; raises KafkaError."""
    if records:
        # Stamped now (CreateTime): a timestamp of 0 is refused by a target that bounds timestamps
        # (message.timestamp.before.max.ms) and is at once past any time-based retention.
        batch = build_batch([Record(key, value) for key, value in records], base_timestamp=now_ms())
        await produce(client, topic, partition, batch, acks=-1)
