"""The sparse indexes: Kafka's byte layout, lookups, and the checks that make a bad file rebuilt."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from broker.storage.index import IndexError_, OffsetIndex, TimeIndex

BASE = 1000


def test_offset_index_entries_are_relative_offset_and_position_big_endian(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "x.index", BASE, 100)
    index.append(BASE + 4, 0)
    index.append(BASE + 9, 4200)
    index.append(BASE + 9, 5000)  # not increasing: ignored
    index.flush()
    assert (tmp_path / "x.index").read_bytes() == struct.pack(">ii", 4, 0) + struct.pack(">ii", 9, 4200)


def test_time_index_entries_are_timestamp_and_relative_offset_big_endian(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "x.timeindex", BASE, 100)
    index.append(1_700_000_000_000, BASE + 3)
    index.append(1_699_000_000_000, BASE + 5)  # an older timestamp adds nothing
    index.flush()
    assert (tmp_path / "x.timeindex").read_bytes() == struct.pack(">qi", 1_700_000_000_000, 3)


def test_offset_lookup_finds_a_batch_at_or_before(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "x.index", BASE, 100)
    for last, pos in [(BASE + 9, 0), (BASE + 19, 500), (BASE + 29, 1000)]:
        index.append(last, pos)
    assert index.lookup(BASE) == 0
    assert index.lookup(BASE + 19) == 500
    assert index.lookup(BASE + 25) == 500  # the scan continues from the last indexed batch
    assert index.lookup(BASE + 10_000) == 1000


def test_time_lookup_starts_before_the_first_entry_at_or_above(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "x.timeindex", BASE, 100)
    for ts, offset in [(100, BASE + 5), (200, BASE + 15), (300, BASE + 25)]:
        index.append(ts, offset)
    assert index.lookup(50) == BASE
    assert index.lookup(100) == BASE
    assert index.lookup(150) == BASE + 5
    assert index.lookup(300) == BASE + 15


def test_index_is_full_at_its_entry_limit(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "x.index", 0, 2)
    index.append(1, 0)
    assert not index.full
    index.append(2, 100)
    assert index.full


def test_load_reads_back_what_was_written(tmp_path: Path) -> None:
    written = OffsetIndex(tmp_path / "x.index", BASE, 100)
    written.append(BASE + 1, 0)
    written.append(BASE + 5, 300)
    written.flush()
    loaded = OffsetIndex(tmp_path / "x.index", BASE, 100)
    loaded.load(log_size=1000)
    assert (loaded.keys, loaded.values) == ([BASE + 1, BASE + 5], [0, 300])


@pytest.mark.parametrize(
    "content",
    [
        b"\x00\x00\x00",  # not a whole entry
        struct.pack(">ii", 5, 0) + struct.pack(">ii", 3, 100),  # offsets go backwards
        struct.pack(">ii", 1, 0) + struct.pack(">ii", 3, 0),  # positions do not increase
        struct.pack(">ii", 1, 5000),  # points past the log
    ],
)
def test_a_bad_offset_index_fails_its_check(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "x.index").write_bytes(content)
    with pytest.raises(IndexError_):
        OffsetIndex(tmp_path / "x.index", BASE, 100).load(log_size=1000)


def test_a_missing_index_fails_its_check(tmp_path: Path) -> None:
    with pytest.raises(IndexError_):
        OffsetIndex(tmp_path / "x.index", BASE, 100).load(log_size=1000)
    with pytest.raises(IndexError_):
        TimeIndex(tmp_path / "x.timeindex", BASE, 100).load(next_offset=BASE + 10)


def test_a_time_index_past_the_log_end_fails_its_check(tmp_path: Path) -> None:
    (tmp_path / "x.timeindex").write_bytes(struct.pack(">qi", 100, 50))
    with pytest.raises(IndexError_):
        TimeIndex(tmp_path / "x.timeindex", BASE, 100).load(next_offset=BASE + 10)


def test_truncation_drops_entries_and_rewrites_the_file(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "x.index", 0, 100)
    for last, pos in [(9, 0), (19, 500), (29, 1000)]:
        index.append(last, pos)
    index.flush()
    index.truncate_to_position(500)
    assert index.keys == [9]
    assert (tmp_path / "x.index").read_bytes() == struct.pack(">ii", 9, 0)
