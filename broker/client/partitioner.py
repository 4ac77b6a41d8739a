"""Kafka's default partitioner for keyed records, so keys land where Java clients put them.

The hash is Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2) and the partition
`(murmur2(key) & 0x7fffffff) % partitions`, as the Java producer and librdkafka's
"murmur2_random" partitioner compute it.
"""

from __future__ import annotations

__all__ = ["kafka_partition", "murmur2"]

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF
_SEED = 0x9747B28C


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 hash of `data`, as a signed int32 (as Java returns it)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    end = length - length % 4
    for i in range(0, end, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length % 4
    if rest == 3:
        h ^= data[end + 2] << 16
    if rest >= 2:
        h ^= data[end + 1] << 8
    if rest >= 1:
        h ^= data[end]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def kafka_partition(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a record with this key."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions
