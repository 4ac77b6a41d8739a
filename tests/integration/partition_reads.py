"""Reading a partition's log back as the raw batches a fetch returns, to compare byte for byte."""

from __future__ import annotations

from broker.client import Client, ErrorCode, TopicPartition, fetch, whole_batches
from broker.protocol.records import split_batches

__all__ = ["read_whole_batches"]


async def read_whole_batches(client: Client, tp: TopicPartition, start: int = 0) -> bytes:
    """Every whole batch of `tp` from offset `start` up to its high watermark, as fetched."""
    out = bytearray()
    position = start
    for _ in range(10_000):
        got = (await fetch(client, {tp: position}, max_wait_ms=0))[tp]
        assert got.error == ErrorCode.NONE, got
        data = whole_batches(got.records)
        if not data:
            break
        out += data
        position = split_batches(data)[-1][1].last_offset + 1
        if position >= got.high_watermark:
            break
    return bytes(out)
