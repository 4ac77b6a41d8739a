"""Log.append_copied (LinkAppend's log method) and follower appends of a mirror topic's log:
offsets, bytes and producer fields kept, the leader epoch stamped, present batches skipped, gaps
and an empty log starting above 0, straddles refused, wide gaps in new segments, reopen."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import Record, build_batch, decode_batch, split_batches
from broker.storage import Log, LogConfig

NOW = 1_700_000_000_000


def batch(base: int, count: int = 1, **kw: object) -> bytes:
    return build_batch([Record(f"k{base + i}".encode(), b"v") for i in range(count)], base_offset=base,
                       base_timestamp=1_600_000_000_000, **kw)  # type: ignore[arg-type]


def open_log(path: Path, **cfg: int | str) -> Log:
    return Log.open(path, LogConfig(**cfg), recovery_point=None, now_ms=NOW)  # type: ignore[arg-type]


def offsets(log: Log, start: int | None = None) -> list[int]:
    out, position = [], log.log_start_offset if start is None else start
    while position < log.log_end_offset:
        data = log.read(position, 1 << 20).data
        if not data:
            break
        for pos, header in split_batches(data):
            out += [r.offset for r in decode_batch(data, pos)[1]]
            position = header.last_offset + 1
    return out


def test_batches_keep_their_bytes_offsets_and_producer_fields_with_the_epoch_stamped(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    data = batch(0, 3, producer_id=9, producer_epoch=2, base_sequence=0) + batch(3, 2, producer_id=9,
                                                                                    producer_epoch=2, base_sequence=3)
    result = log.append_copied(data, leader_epoch=5, now_ms=NOW)
    assert result is not None and (result.first_offset, result.last_offset) == (0, 4)
    stored = log.read(0, 1 << 20).data
    for (pa, ha), (pb, hb) in zip(split_batches(stored), split_batches(data), strict=True):
        assert ha.partition_leader_epoch == 5 and hb.partition_leader_epoch == -1
        assert stored[pa + 16:pa + ha.size] == data[pb + 16:pb + hb.size]  # the CRC and all after it
    assert log.epochs.end_offset_for(5, log.log_end_offset) == (5, 5)
    # The source's producers never write here: after promotion a local producer that got the
    # same id (both clusters hand them out from 0) is not held to the copy's sequences, and its
    # batch is not taken for a copied one. A promotion marker (offset 5) comes first.
    local = build_batch([Record(b"k3", b"v"), Record(b"k4", b"v")], producer_id=9, producer_epoch=2, base_sequence=3)
    written = log.append_as_leader(local, leader_epoch=6, now_ms=NOW)
    assert (written.duplicate, written.first_offset) == (False, 6)
    assert log.append_as_leader(local, leader_epoch=6, now_ms=NOW).duplicate  # its own retry is


def test_present_batches_are_skipped_and_a_straddle_or_disorder_is_refused(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_copied(batch(0, 5) + batch(5, 5), leader_epoch=0, now_ms=NOW)
    assert log.append_copied(batch(0, 5) + batch(5, 5), leader_epoch=0, now_ms=NOW) is None
    result = log.append_copied(batch(5, 5) + batch(10, 2), leader_epoch=0, now_ms=NOW)
    assert result is not None and (result.first_offset, result.last_offset) == (10, 11)
    for bad in (batch(8, 6), batch(20, 2) + batch(21, 2), batch(30, 1) + batch(25, 1)):
        with pytest.raises(KafkaError) as info:
            log.append_copied(bad, leader_epoch=0, now_ms=NOW)
        assert info.value.code == ErrorCode.INVALID_RECORD
    assert log.log_end_offset == 12 and offsets(log) == list(range(12))


def test_an_empty_log_starts_at_the_first_batch_and_gaps_are_kept(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=16384)
    log.append_copied(batch(1000, 2), leader_epoch=1, now_ms=NOW)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (1000, 1002, 1000)
    compacted = build_batch([Record(b"a", b"1"), Record(b"b", b"2")], base_offset=1500, offset_deltas=[0, 7])
    log.append_copied(compacted, leader_epoch=1, now_ms=NOW)
    assert log.log_end_offset == 1508
    assert offsets(log) == [1000, 1001, 1500, 1507]
    assert offsets(log, 1200) == [1500, 1507]  # a read inside the gap starts at the next batch
    log.flush()
    log.close()
    reopened = open_log(tmp_path / "t-0")
    assert (reopened.log_start_offset, reopened.log_end_offset) == (1000, 1508)
    assert offsets(reopened) == [1000, 1001, 1500, 1507]


def test_a_gap_wider_than_32_bit_relative_offsets_opens_a_new_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_copied(batch(0, 2), leader_epoch=0, now_ms=NOW)
    far = 5 * 2**31
    log.append_copied(batch(far, 2) + batch(far + 2**31 + 10, 1), leader_epoch=0, now_ms=NOW)
    assert [s.base_offset for s in log.segments] == [0, far, far + 2**31 + 10]
    assert offsets(log) == [0, 1, far, far + 1, far + 2**31 + 10]
    log.flush()
    log.close()
    assert offsets(open_log(tmp_path / "t-0")) == [0, 1, far, far + 1, far + 2**31 + 10]


def test_a_follower_copies_a_log_with_gaps_but_never_goes_back(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "t-0")
    leader.append_copied(batch(0, 2) + batch(10, 2) + batch(3 * 2**31, 1), leader_epoch=3, now_ms=NOW)
    follower = open_log(tmp_path / "f" / "t-0")
    for _ in range(3):  # as the fetcher does: from the follower's log end, one segment a read
        follower.append_as_follower(leader.read(follower.log_end_offset, 1 << 20).data, now_ms=NOW)
    assert follower.log_end_offset == leader.log_end_offset == 3 * 2**31 + 1
    assert [s.base_offset for s in follower.segments] == [0, 3 * 2**31]
    assert offsets(follower) == offsets(leader) == [0, 1, 10, 11, 3 * 2**31]
    assert follower.epochs.end_offset_for(3, follower.log_end_offset) == (3, follower.log_end_offset)
    with pytest.raises(KafkaError):
        follower.append_as_follower(batch(5, 1), now_ms=NOW)


def test_bad_batches_are_refused_with_nothing_written(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", max_message_bytes=200)
    corrupt = bytearray(batch(0, 2))
    corrupt[-1] ^= 1
    cases = [(bytes(corrupt), ErrorCode.CORRUPT_MESSAGE), (batch(0, 30), ErrorCode.MESSAGE_TOO_LARGE),
             (b"", ErrorCode.CORRUPT_MESSAGE), (batch(-3, 1), ErrorCode.INVALID_RECORD)]
    for data, code in cases:
        with pytest.raises(KafkaError) as info:
            log.append_copied(batch(0, 1) + data if data else data, leader_epoch=0, now_ms=NOW)
        assert info.value.code == code, data
    assert log.log_end_offset == 0 and log.active.size == 0
    # A control batch (a transaction marker) is kept as it is.
    marker = build_batch([Record(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")], producer_id=4,
                         producer_epoch=0, is_transactional=True, is_control=True)
    assert log.append_copied(marker, leader_epoch=0, now_ms=NOW) is not None
    assert split_batches(log.read(0, 1 << 20).data)[0][1].is_control


def test_a_request_larger_than_a_segment_rolls_as_it_goes(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=16384)
    data = b"".join(batch(i * 40, 40) for i in range(40))
    assert len(data) > 16384
    log.append_copied(data, leader_epoch=0, now_ms=NOW)
    assert len(log.segments) > 1 and all(s.size <= 16384 for s in log.segments)
    assert offsets(log) == list(range(1600))
