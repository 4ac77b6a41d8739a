"""Recovery checks the offsets batches claim (the base offset lies outside the CRC): offsets
never go back, segments follow one another, and gaps are judged by the topic's config (right in
compacted logs and copies only). The real-process tests are tests/integration/test_recovery_offsets.py."""

from __future__ import annotations

import logging
import struct
from pathlib import Path

import pytest

from broker.protocol.records import Record, build_batch, split_batches
from broker.storage import Log, LogConfig
from broker.storage.link_copy import CHECKPOINT_FILE, LinkCopy
from tests.unit.broker.storage.test_cleaner import compact, fill

NOW = 1_700_000_000_000
CONFIG = LogConfig(segment_bytes=600)


def filled(path: Path, batches: int = 60, config: LogConfig = CONFIG) -> Log:
    log = Log.open(path, config, now_ms=NOW)
    for i in range(batches):
        records = [Record(None, b"v%03d-%d" % (i, n), timestamp=NOW) for n in range(2)]
        log.append_as_leader(build_batch(records), leader_epoch=0, now_ms=NOW)
    log.close()
    return log


def offsets_in_order(log: Log) -> list[int]:
    """The base offsets of every batch, asserting they only go up."""
    seen: list[int] = []
    for segment in log.segments:
        for _, header in segment.iter_headers():
            assert not seen or header.base_offset > seen[-1]
            seen.append(header.base_offset)
    return seen


def set_base_offset(path: Path, index: int, value: int) -> int:
    raw = bytearray(path.read_bytes())
    pos, header = split_batches(bytes(raw))[index]
    struct.pack_into(">q", raw, pos, value)
    path.write_bytes(raw)
    return header.base_offset


def test_a_raised_base_offset_cuts_the_log_at_that_batch(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    segments = filled(tmp_path / "t-0").segments
    damaged = segments[1].path
    cut = set_base_offset(damaged, 2, 500)
    reopened = Log.open(tmp_path / "t-0", CONFIG, now_ms=NOW)
    assert reopened.log_end_offset == cut
    offsets_in_order(reopened)
    assert "mid-log corruption" in caplog.text
    assert f"claims offsets 500..501, but the log continues at offset {cut} and the next batch starts at {cut + 2}" \
        in caplog.text
    assert not [p for p in (tmp_path / "t-0").glob("*.log") if int(p.stem) > int(damaged.stem)]


def test_a_next_segment_starting_inside_the_previous_one_goes_to_quarantine(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    segments = filled(tmp_path / "t-0").segments
    end = segments[1].next_offset
    third = segments[2]
    lower = third.base_offset - 3  # the file names say the third segment starts inside the second
    for path in (third.path, third.offset_index.path, third.time_index.path):
        path.rename(path.with_name(f"{lower:020d}{path.suffix}"))
    reopened = Log.open(tmp_path / "t-0", CONFIG, now_ms=NOW)
    assert reopened.log_end_offset == end
    assert len(reopened.segments) == 2
    assert f"{lower:020d}.log, starts at offset {lower}, inside this one" in caplog.text
    assert "mid-log corruption" in caplog.text


def test_a_trusted_segment_whose_last_batch_reaches_into_the_next_is_scanned(tmp_path: Path) -> None:
    log = filled(tmp_path / "t-0")
    damaged = log.segments[1]
    last = len(split_batches(damaged.path.read_bytes())) - 1
    cut = set_base_offset(damaged.path, last, damaged.next_offset + 100)
    reopened = Log.open(tmp_path / "t-0", CONFIG, recovery_point=log.log_end_offset, now_ms=NOW)
    assert reopened.log_end_offset == cut
    offsets_in_order(reopened)


def test_a_gap_is_reported_once_the_config_says_the_log_has_none(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    segments = filled(tmp_path / "t-0").segments
    gone = segments[2]
    for path in (gone.path, gone.offset_index.path, gone.time_index.path):
        path.unlink()
    reopened = Log.open(tmp_path / "t-0", CONFIG, now_ms=NOW)
    assert "missing" not in caplog.text  # the topic's config is not known yet
    reopened.update_config(CONFIG)
    assert f"offsets in 1 range(s) ({gone.base_offset}..{gone.next_offset - 1}) are missing" in caplog.text
    caplog.clear()
    reopened.update_config(CONFIG)
    assert "missing" not in caplog.text  # reported once


def test_gaps_of_a_compacted_log_are_neither_cut_nor_reported(tmp_path: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    log = fill(tmp_path / "k-0")
    compact(log)
    held = offsets_in_order(log)
    log.close()
    caplog.set_level(logging.WARNING)
    reopened = Log.open(tmp_path / "k-0", LogConfig(segment_bytes=300), recovery_point=None, now_ms=NOW)
    assert offsets_in_order(reopened) == held  # the broker opens logs with its default config: nothing cut
    reopened.update_config(LogConfig(cleanup_policy="compact", segment_bytes=300))
    assert caplog.text == ""


def test_gaps_of_a_copy_are_not_reported(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    follower = Log.open(tmp_path / "m-0", LogConfig(), high_watermark=None)
    for base in (0, 10, 30):  # a copy of a compacted source
        follower.append_as_follower(build_batch([Record(None, b"x", timestamp=NOW)], base_offset=base), now_ms=NOW)
    follower.close()
    reopened = Log.open(tmp_path / "m-0", LogConfig(), recovery_point=None, now_ms=NOW)
    reopened.update_config(LogConfig(mirror_name="east"))
    assert "missing" not in caplog.text


@pytest.mark.parametrize("content", [bytes(range(256)), b"marker -4\n", b"open" * 100])
def test_a_damaged_link_copy_checkpoint_is_named_and_rebuilt(tmp_path: Path, content: bytes,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / CHECKPOINT_FILE
    path.write_bytes(content)
    copy = LinkCopy.load(tmp_path)
    assert copy.open and copy.marker == -1  # the worst case for the producer state: all copied
    assert f"ignoring damaged link-copy checkpoint {path}" in caplog.text
    assert path.read_text() == "open\n"


def test_an_index_without_an_entry_for_the_first_batch_is_trusted(tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    # Kafka indexes a batch once index.interval.bytes have passed, so its index may not name the
    # first batch: such an index is not damaged.
    config = LogConfig(segment_bytes=600, index_interval_bytes=1)  # every batch indexed
    log = filled(tmp_path / "t-0", config=config)
    first = log.segments[0]
    entries = first.offset_index.path.read_bytes()
    assert len(entries) >= 16
    first.offset_index.path.write_bytes(entries[8:])
    reopened = Log.open(tmp_path / "t-0", config, recovery_point=log.log_end_offset, now_ms=NOW)
    assert reopened.log_end_offset == log.log_end_offset
    assert "rebuilding" not in caplog.text
