"""Where a link-mode partition says the source's previous batch ended (LinkAppend's
PreviousEndOffset): right after what it wrote, one below past a source promotion marker the
target left out, the source's log start after a gap there, never past the batch it sends."""

from __future__ import annotations

from broker.client import TopicPartition
from broker.protocol.records import BatchHeader, Record, build_batch, read_batch_header
from broker.storage.link_copy import promotion_marker
from mirror.link import LinkPartition

TP = TopicPartition("orders", 0)


def partition(written_through: int) -> LinkPartition:
    return LinkPartition(TP, TP, written_through + 1, 1000, 1 << 20, written_through=written_through)


def header(base: int, count: int = 1) -> BatchHeader:
    return read_batch_header(build_batch([Record(b"k", b"v")] * count, base_offset=base))


def test_the_previous_end_follows_what_was_written_and_never_passes_the_batch() -> None:
    pm = partition(41)
    assert pm.previous_end(header(42)) == 42
    assert pm.previous_end(header(50)) == 42  # a gap the source has (the fetch from 42 found 50 first)
    pm.trim_below = 45  # the source's log start moved past the copy (retention): the gap is the source's
    assert pm.previous_end(header(50)) == 45
    assert pm.previous_end(header(43)) == 43  # queued below the gap: never past the batch


def test_a_source_promotion_marker_the_target_left_out_is_followed_from_its_offset() -> None:
    pm = partition(9)
    marker = read_batch_header(promotion_marker(10, leader_epoch=0, now_ms=1))
    pm._written([(0, header(5, 5)), (0, marker)], log_end=10)  # the target ends below the marker
    assert (pm.written_through, pm.left_out_at) == (10, 10)
    assert pm.previous_end(header(11)) == 10
    pm._written([(0, header(11))], log_end=12)
    assert (pm.left_out_at, pm.previous_end(header(12))) == (-1, 12)
    # A control batch the target kept (a transaction marker, say) is followed from its end.
    pm._written([(0, read_batch_header(promotion_marker(12, leader_epoch=0, now_ms=1)))], log_end=13)
    assert pm.previous_end(header(13)) == 13
