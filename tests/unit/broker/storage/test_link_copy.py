"""Copied batches never feed the idempotent-producer state (broker/storage/link_copy.py): a
mirror topic's log, its promotion marker, a follower's copy, a reopen, a truncation below the
marker, a source's own marker, a LinkAppend after promotion, and a promoted log made a mirror
topic again (failback) and promoted once more."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import Record, build_batch, split_batches
from broker.storage import Log, LogConfig
from broker.storage.link_copy import CHECKPOINT_FILE, is_promotion_marker, promotion_marker

NOW = 1_700_000_000_000
MIRROR = LogConfig(mirror_name="east-to-west")


def copied(count: int = 6) -> bytes:
    """A source's batches: producers 0 and 1, at epoch 0, sequences from 0."""
    return b"".join(build_batch([Record(b"k", b"source")], base_offset=i, producer_id=i % 2, producer_epoch=0,
                                base_sequence=i // 2) for i in range(count))


def local(pid: int, seq: int) -> bytes:
    return build_batch([Record(b"k", b"local")], producer_id=pid, producer_epoch=0, base_sequence=seq)


def test_a_promoted_copy_holds_no_producer_to_its_sequences_and_keeps_local_retries(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", MIRROR, high_watermark=None)
    assert (tmp_path / "t-0" / CHECKPOINT_FILE).read_text() == "open\n"
    log.append_copied(copied(), leader_epoch=0, now_ms=NOW)
    assert log.producers.producers == {}
    log.update_config(LogConfig())  # promoted
    first = log.append_as_leader(local(0, 0), leader_epoch=0, now_ms=NOW)
    assert (first.first_offset, first.duplicate) == (7, False)  # the marker at 6
    data = log.read(6, 1 << 20).data
    pos, header = split_batches(data)[0]
    assert is_promotion_marker(data, pos, header) and header.is_control
    assert (tmp_path / "t-0" / CHECKPOINT_FILE).read_text() == "marker 6\n"
    assert log.append_as_leader(local(0, 0), leader_epoch=0, now_ms=NOW).duplicate
    assert log.append_as_leader(local(1, 0), leader_epoch=0, now_ms=NOW).first_offset == 8

    log.close()
    reopened = Log.open(tmp_path / "t-0", LogConfig(), high_watermark=None)
    assert set(reopened.producers.producers) == {0, 1}
    assert reopened.append_as_leader(local(0, 0), leader_epoch=1, now_ms=NOW).duplicate
    assert reopened.append_as_leader(local(1, 1), leader_epoch=1, now_ms=NOW).first_offset == 9
    with pytest.raises(KafkaError) as refused:
        reopened.append_copied(build_batch([Record(b"k", b"v")], base_offset=100), leader_epoch=1, now_ms=NOW)
    assert refused.value.code == ErrorCode.INVALID_REQUEST and "promoted" in refused.value.message


def test_a_follower_learns_the_boundary_from_the_marker_in_log_order(tmp_path: Path) -> None:
    # A follower that never learnt it held a mirror topic's copy: the marker still tells.
    follower = Log.open(tmp_path / "t-0", LogConfig(), high_watermark=None)
    leader_log = copied() + promotion_marker(6, leader_epoch=0, now_ms=NOW)
    follower.append_as_follower(leader_log, now_ms=NOW)
    assert follower.producers.producers == {}
    follower.append_as_follower(build_batch([Record(b"k", b"local")], base_offset=7, producer_id=0,
                                            producer_epoch=0, base_sequence=0), now_ms=NOW)
    assert follower.append_as_leader(local(0, 0), leader_epoch=1, now_ms=NOW).duplicate
    # Truncated below its marker: the copy is open again, and nothing copied counts.
    follower.truncate_to(5)
    assert follower.copy.open and follower.producers.producers == {}
    assert (tmp_path / "t-0" / CHECKPOINT_FILE).read_text() == "open\n"


def test_a_lost_checkpoint_update_is_found_again_in_the_log(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", MIRROR, high_watermark=None)
    log.append_copied(copied(), leader_epoch=0, now_ms=NOW)
    log.update_config(LogConfig())
    log.append_as_leader(local(0, 0), leader_epoch=0, now_ms=NOW)
    log.flush()
    log.close()
    (tmp_path / "t-0" / CHECKPOINT_FILE).write_text("open\n")  # the marker's update never landed
    reopened = Log.open(tmp_path / "t-0", LogConfig(), high_watermark=None)
    assert not reopened.copy.open and reopened.copy.marker == 6
    assert reopened.append_as_leader(local(0, 0), leader_epoch=0, now_ms=NOW).duplicate


def test_a_source_s_own_promotion_marker_is_not_copied(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", MIRROR, high_watermark=None)
    source = copied() + promotion_marker(6, leader_epoch=3, now_ms=NOW) + build_batch(
        [Record(b"k", b"after")], base_offset=7, producer_id=0, producer_epoch=0, base_sequence=0)
    result = log.append_copied(source, leader_epoch=0, now_ms=NOW)
    assert result is not None and result.last_offset == 7
    assert [h.base_offset for _, h in split_batches(log.read(0, 1 << 20).data)] == [0, 1, 2, 3, 4, 5, 7]
    assert log.copy.open and log.producers.producers == {}


def promoted(directory: Path, *writes: tuple[int, int]) -> Log:
    """A mirror topic's log of copied(), promoted (its marker at 6), then each local write
    (producer id, sequence) from offset 7."""
    log = Log.open(directory, MIRROR, high_watermark=None)
    log.append_copied(copied(), leader_epoch=0, now_ms=NOW)
    log.update_config(LogConfig())
    for pid, seq in writes:
        log.append_as_leader(local(pid, seq), leader_epoch=0, now_ms=NOW)
    return log


def test_a_promoted_log_made_a_mirror_topic_again_copies_from_its_end_and_marks_its_next_promotion(
        tmp_path: Path) -> None:
    log = promoted(tmp_path / "t-0", (0, 0), (5, 0))  # local writes at 7 and 8
    assert set(log.producers.producers) == {0, 5}
    # Failback: a mirror topic again. What it holds is history; the copy begins at its end.
    log.update_config(MIRROR)
    assert log.copy.open and log.copy.since == 9 and log.producers.producers == {}
    assert (tmp_path / "t-0" / CHECKPOINT_FILE).read_text() == "open 9\n"
    source = b"".join(build_batch([Record(b"k", b"back")], base_offset=9 + i, producer_id=0, producer_epoch=0,
                                  base_sequence=i) for i in range(3))
    result = log.append_copied(source, leader_epoch=1, now_ms=NOW)
    assert result is not None and result.last_offset == 11 and log.producers.producers == {}
    log.flush()
    log.close()
    # Read again at open: the marker at 6 is the earlier promotion's and closes nothing.
    log = Log.open(tmp_path / "t-0", MIRROR, high_watermark=None)
    assert log.copy.open and log.copy.since == 9 and log.producers.producers == {}
    # Promoted once more: a marker of its own before the first local write; producer 0 of the
    # copy constrains nobody.
    log.update_config(LogConfig())
    first = log.append_as_leader(local(0, 0), leader_epoch=2, now_ms=NOW)
    assert (first.first_offset, first.duplicate) == (13, False)  # the marker at 12
    assert (tmp_path / "t-0" / CHECKPOINT_FILE).read_text() == "marker 12\n"
    log.flush()
    log.close()
    log = Log.open(tmp_path / "t-0", LogConfig(), high_watermark=None)
    assert (log.copy.open, log.copy.marker) == (False, 12) and set(log.producers.producers) == {0}
    assert log.append_as_leader(local(0, 0), leader_epoch=2, now_ms=NOW).duplicate


def test_a_copy_begun_again_and_cut_below_its_start_begins_at_the_cut(tmp_path: Path) -> None:
    log = promoted(tmp_path / "t-0", (0, 0), (0, 1))
    log.update_config(MIRROR)
    log.truncate_to(8)  # truncate-and-restore above the marker
    assert log.copy.open and log.copy.since == 8 and log.producers.producers == {}
    assert (tmp_path / "t-0" / CHECKPOINT_FILE).read_text() == "open 8\n"


def test_a_damaged_checkpoint_of_a_mirror_topic_again_is_not_closed_by_the_earlier_marker(tmp_path: Path) -> None:
    log = promoted(tmp_path / "t-0", (0, 0))
    log.update_config(MIRROR)
    log.flush()
    log.close()
    (tmp_path / "t-0" / CHECKPOINT_FILE).write_bytes(b"\xff" * 8)
    log = Log.open(tmp_path / "t-0", MIRROR, high_watermark=None)
    assert log.copy.open and log.copy.since == 8 and log.producers.producers == {}
