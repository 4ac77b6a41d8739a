"""Issue 10, items 9 and 11, the pure parts: where a re-copy starts (offset syncs read backwards),
what a partition counts after the target lost records, and fetched bytes that cannot be a batch."""

from __future__ import annotations

import struct

from broker.client import TopicPartition
from broker.protocol.records import Record, build_batch
from mirror.offset_sync import SyncStore
from mirror.partition import Chunk, PartitionMirror


def test_the_newest_sync_at_or_below_a_downstream_offset_gives_the_restart_point() -> None:
    store = SyncStore()
    for upstream, downstream in [(0, 0), (100, 90), (200, 180)]:
        store.add("orders", 0, upstream, downstream)
    assert store.latest("orders", 0) == (200, 180)
    assert store.upstream_at_or_below("orders", 0, 180) == 200
    assert store.upstream_at_or_below("orders", 0, 179) == 100  # 90..178 repeated, nothing skipped
    assert store.upstream_at_or_below("orders", 0, 0) == 0
    assert store.upstream_at_or_below("orders", 1, 50) is None
    # The target went back (re-created) while upstream went on: downstream offsets are not sorted.
    store.add("orders", 0, 300, 0)
    assert store.upstream_at_or_below("orders", 0, 0) == 300
    assert store.upstream_at_or_below("orders", 0, 150) == 300


def test_copy_again_counts_only_what_the_target_still_has() -> None:
    pm = PartitionMirror(TopicPartition("orders", 0), TopicPartition("east.orders", 0), 0, 100, 1 << 20)
    pm.written_through, pm.records, pm.bytes, pm.min_target_end = 999, 1000, 50_000, 1000
    pm.hold()
    assert pm.held and not pm.wants_data
    epoch = pm.epoch
    pm.copy_again(40, log_start=40, target_end=0, lost_downstream=1000, why="re-created", until=1200)
    assert (pm.records, pm.bytes, pm.position, pm.written_through) == (0, 0, 40, 39)
    assert pm.epoch > epoch and not pm.held and pm.wants_data
    assert pm.trim_below == 40 and pm.copied_from == 40 and pm.expected_next_downstream == 0
    assert pm.recopy == "re-created" and pm.recopy_until == 1200


def test_bytes_that_cannot_be_a_batch_are_damage_after_the_whole_batches_before_them() -> None:
    good = build_batch([Record(b"k", b"v")], base_offset=0)
    bad = bytearray(build_batch([Record(b"k", b"w")], base_offset=1))
    bad[16] = 7  # magic 7
    chunk, damage = Chunk.parse(good + bad)
    assert chunk is not None and chunk.next_offset == 1 and damage is not None
    assert damage.startswith("CORRUPT_MESSAGE at the source: record batch magic 7")
    chunk, damage = Chunk.parse(bytes(bad))
    assert chunk is None and damage is not None
    # A batch cut by the fetch size is not damage: the rest comes with the next fetch.
    cut = good + build_batch([Record(b"k", b"x" * 100)], base_offset=1)[:80]
    chunk, damage = Chunk.parse(cut)
    assert chunk is not None and chunk.size == len(good) and damage is None
    short = bytearray(good)
    struct.pack_into(">i", short, 8, 10)  # a length below a header
    assert Chunk.parse(bytes(short)) == (None, "CORRUPT_MESSAGE at the source: batch length 10 is below a header")
