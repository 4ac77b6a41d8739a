"""Both sites' logs compared batch for batch after a failback drill: each partition's batches
(base offset, last offset, CRC; promotion markers left out, as a copy leaves them out) at the DR
site, against the old primary's below the DR site's log end (past it, the old primary holds its
own promotion marker and what its producers wrote once back home); after a third move, the other
way round (the DR site's below home's end)."""

from __future__ import annotations

from broker.client import TopicPartition
from broker.client.admin import EARLIEST, LATEST, list_offsets
from broker.client.cluster import Client, open_client
from broker.client.fetch import fetch
from broker.protocol.errors import ErrorCode
from broker.protocol.records import split_batches

__all__ = ["Batch", "compare_logs"]

Batch = tuple[int, int, int]  # base offset, last offset, CRC


async def _batches(client: Client, tp: TopicPartition, end: int) -> list[Batch]:
    """The partition's whole batches that begin below `end`, from its log start, markers out."""
    position = (await list_offsets(client, {tp: EARLIEST}))[tp].offset
    found: list[Batch] = []
    while position < end:
        answer = (await fetch(client, {tp: position}, max_wait_ms=0))[tp]
        if answer.error != ErrorCode.NONE:
            raise RuntimeError(f"{tp.topic}-{tp.partition}: fetch at offset {position}: {ErrorCode(answer.error).name}")
        headers = [header for _, header in split_batches(answer.records, allow_partial_tail=True)]
        if not headers:
            raise RuntimeError(f"{tp.topic}-{tp.partition}: nothing returned at offset {position} below {end}")
        for header in headers:
            if header.base_offset >= end:
                return found
            if not (header.is_control and not header.has_producer_id):  # a promotion marker
                found.append((header.base_offset, header.last_offset, header.crc))
            position = header.last_offset + 1
    return found


async def compare_logs(old: str, new: str, partitions: list[tuple[str, int]]) -> tuple[int, list[str]]:
    """How many batches the two sites hold alike below `new`'s log ends (`old` may hold more),
    and each partition where they differ (with the first difference)."""
    same, differing = 0, []
    async with open_client(old, client_id="causeway-drill") as old_client, \
            open_client(new, client_id="causeway-drill") as new_client:
        for topic, partition in partitions:
            tp = TopicPartition(topic, partition)
            end = (await list_offsets(new_client, {tp: LATEST}))[tp].offset
            at_new = await _batches(new_client, tp, end)
            at_old = await _batches(old_client, tp, end)
            if at_old == at_new:
                same += len(at_new)
                continue
            first = next((i for i, (a, b) in enumerate(zip(at_old, at_new, strict=False)) if a != b),
                         min(len(at_old), len(at_new)))
            differing.append(f"{topic}-{partition}: {len(at_old)} batch(es) at {old}, {len(at_new)} at {new}, the "
                             f"first difference at batch {first}")
    return same, differing
