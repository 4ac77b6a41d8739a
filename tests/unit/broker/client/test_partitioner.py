"""Kafka's default partitioner: keys land in the partition Java clients and librdkafka pick."""

from __future__ import annotations

import pytest

from broker.client.partitioner import kafka_partition, murmur2


@pytest.mark.parametrize(("key", "expected"), [
    # Kafka's own vectors (clients' UtilsTest.testMurmur2): signed int32, as Java returns it.
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
])
def test_murmur2_matches_kafka(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


def test_every_tail_length_is_hashed() -> None:
    # Lengths 0..7 cover the 0-3 trailing bytes after whole 4-byte words; each differs.
    hashes = {murmur2(b"abcdefg"[:n]) for n in range(8)}
    assert len(hashes) == 8
    assert all(-(1 << 31) <= h < (1 << 31) for h in hashes)


def test_partition_is_the_positive_hash_modulo_the_count() -> None:
    for key in (b"21", b"foobar", b"abc", b""):
        for partitions in (1, 3, 7, 100):
            p = kafka_partition(key, partitions)
            assert p == (murmur2(key) & 0x7FFFFFFF) % partitions
            assert 0 <= p < partitions
