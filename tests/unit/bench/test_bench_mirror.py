"""bench.mirror's parts that decide what its figures mean: the copy check (complete and equal; in
link mode the same offsets), the /proc reading, and the order of the runs."""

from __future__ import annotations

import os

import pytest

from bench.mirror import PartitionContent, Variant, check_copy, schedule, usage, variants_for


def _content(start: int = 0, end: int = 10, records: int = 10, digest: str = "d",
             offsets: str = "o") -> PartitionContent:
    return PartitionContent(start, end, records, digest, offsets)


def test_equal_copies_pass_in_both_modes() -> None:
    source = {0: _content(), 1: _content(end=5, records=5)}
    assert "offsets equal" in check_copy(source, dict(source), "link")
    # mm2 mode: other offsets (a remote topic of its own) with the same records is a good copy.
    moved = {0: _content(start=3, end=13, offsets="x"), 1: _content(start=1, end=6, records=5, offsets="y")}
    assert check_copy(source, moved, "mm2") == "2 partitions, 15 records: counts and records equal"


@pytest.mark.parametrize("mode", ["mm2", "link"])
def test_a_short_or_different_copy_is_refused(mode: str) -> None:
    source = {0: _content(), 1: _content()}
    with pytest.raises(RuntimeError, match="partition 1: 10 records at the source, 9 at the target"):
        check_copy(source, {0: _content(), 1: _content(end=9, records=9)}, mode)
    with pytest.raises(RuntimeError, match="partition 0: the same count, other records"):
        check_copy(source, {0: _content(digest="other"), 1: _content()}, mode)
    with pytest.raises(RuntimeError, match=r"partitions \[0, 1\] at the source, \[0\] at the target"):
        check_copy(source, {0: _content()}, mode)


def test_link_mode_needs_the_same_offsets() -> None:
    source = {0: _content()}
    with pytest.raises(RuntimeError, match=r"partition 0: offsets 0..10 at the source, 2..12 at the target"):
        check_copy(source, {0: _content(start=2, end=12)}, "link")
    with pytest.raises(RuntimeError, match=r"others inside"):
        check_copy(source, {0: _content(offsets="gap")}, "link")


def test_usage_reads_this_process() -> None:
    sum(i * i for i in range(200_000))  # some CPU time to see
    seen = usage(os.getpid())
    assert seen.cpu_s > 0
    assert 0 < seen.rss_bytes <= seen.peak_rss_bytes


def test_rounds_alternate_the_order_and_variants_follow_the_options() -> None:
    both = variants_for("both", [])
    assert both == [Variant("mm2"), Variant("link")]
    assert [v.mode for _, v in schedule(both, 3)] == ["mm2", "link", "link", "mm2", "mm2", "link"]
    sized = variants_for("link", [1, 4])
    assert [v.request_bytes for v in sized] == [1 << 20, 4 << 20]
    assert sized[1].label == "link (4 MiB requests)"
