from __future__ import annotations

import os
from pathlib import Path

import crc32c
import pytest

from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import Record, build_batch, decode_batch, split_batches
from broker.storage import Log, LogConfig, LogManager
from broker.storage.checkpoints import read_checkpoint

NOW = 1_700_000_000_000


def batch(*values: bytes, ts: int = NOW, **kw: int) -> bytes:
    return build_batch([Record(None, v, timestamp=ts) for v in values], **kw)  # type: ignore[arg-type]


def values(data: bytes) -> list[tuple[int, bytes | None]]:
    out = []
    for pos, _ in split_batches(data, allow_partial_tail=True):
        _, records = decode_batch(data, pos)
        out += [(r.offset, r.value) for r in records]
    return out


def open_log(path: Path, **cfg: int | str) -> Log:
    return Log.open(path, LogConfig(**cfg), recovery_point=None, now_ms=NOW)  # type: ignore[arg-type]


def test_offsets_are_assigned_in_order_and_read_back(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    first = log.append_as_leader(batch(b"a", b"b"), leader_epoch=0, now_ms=NOW)
    second = log.append_as_leader(batch(b"c"), leader_epoch=0, now_ms=NOW)
    assert (first.first_offset, first.last_offset, second.first_offset) == (0, 1, 2)
    assert log.log_end_offset == 3
    assert values(log.read(0, 1 << 20).data) == [(0, b"a"), (1, b"b"), (2, b"c")]
    assert values(log.read(2, 1 << 20).data) == [(2, b"c")]
    # The batch holding offset 1 starts at 0: whole batches are returned, as Kafka does.
    assert values(log.read(1, 1 << 20).data)[0] == (0, b"a")


def test_read_respects_upper_bound_and_max_bytes(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    for i in range(10):
        log.append_as_leader(batch(bytes([i]) * 100), leader_epoch=0, now_ms=NOW)
    assert [o for o, _ in values(log.read(0, 1 << 20, upper_bound=4).data)] == [0, 1, 2, 3]
    one = log.read(0, 10)  # smaller than a batch: the first whole batch still comes back
    assert [o for o, _ in values(one.data)] == [0]
    assert log.read(10, 100).data == b""
    with pytest.raises(KafkaError) as exc:
        log.read(11, 100)
    assert exc.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_segments_roll_by_size_and_survive_reopen(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=1000, index_interval_bytes=100)
    for i in range(40):
        log.append_as_leader(batch(b"x" * 50, ts=NOW + i), leader_epoch=0, now_ms=NOW)
    assert len(log.segments) > 3
    names = sorted(p.name for p in (tmp_path / "t-0").iterdir())
    assert "00000000000000000000.log" in names and "00000000000000000000.index" in names
    assert "00000000000000000000.timeindex" in names
    log.flush()
    recovery_point = log.recovery_point
    log.close()
    reopened = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=1000), recovery_point=recovery_point)
    assert reopened.log_end_offset == 40
    assert [o for o, _ in values(reopened.read(25, 1 << 20).data)][0] == 25
    assert reopened.offset_for_timestamp(NOW + 17) == (17, NOW + 17)


def test_a_torn_tail_is_cut_at_the_last_whole_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    for i in range(5):
        log.append_as_leader(batch(b"rec%d" % i), leader_epoch=0, now_ms=NOW)
    path = log.active.path
    log.close()
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.truncate(size - 7)  # a crash in the middle of writing the last batch
    recovered = open_log(tmp_path / "t-0")
    assert recovered.log_end_offset == 4
    assert values(recovered.read(0, 1 << 20).data) == [(i, b"rec%d" % i) for i in range(4)]
    # New appends continue from the cut.
    assert recovered.append_as_leader(batch(b"next"), leader_epoch=0, now_ms=NOW).first_offset == 4


def test_a_corrupt_batch_and_everything_after_it_is_dropped(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    for i in range(5):
        log.append_as_leader(batch(b"rec%d" % i), leader_epoch=0, now_ms=NOW)
    third = log.active.find(2)
    assert third is not None
    path = log.active.path
    log.close()
    with open(path, "r+b") as f:
        f.seek(third[0] + 70)
        f.write(b"\xff")  # flip a byte of record data: the CRC no longer matches
    recovered = open_log(tmp_path / "t-0")
    assert recovered.log_end_offset == 2
    garbage = tmp_path / "t-0" / "00000000000000000000.log"
    with open(garbage, "ab") as f:
        f.write(os.urandom(100))  # garbage after the end
    again = open_log(tmp_path / "t-0")
    assert again.log_end_offset == 2


def test_batches_are_checked_on_append(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", max_message_bytes=200)
    good = bytearray(batch(b"ok"))
    good[-1] ^= 0xFF
    for bad, code in [
        (bytes(good), ErrorCode.CORRUPT_MESSAGE),
        (batch(b"x" * 300), ErrorCode.MESSAGE_TOO_LARGE),
        (batch(b"ok")[:-3], ErrorCode.CORRUPT_MESSAGE),
        (b"", ErrorCode.CORRUPT_MESSAGE),
    ]:
        with pytest.raises(KafkaError) as exc:
            log.append_as_leader(bad, leader_epoch=0, now_ms=NOW)
        assert exc.value.code == code
    assert log.log_end_offset == 0


def test_idempotent_retries_are_deduplicated_and_gaps_refused(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    pid = dict(producer_id=7, producer_epoch=0)
    first = log.append_as_leader(batch(b"a", b"b", base_sequence=0, **pid), leader_epoch=0, now_ms=NOW)
    retry = log.append_as_leader(batch(b"a", b"b", base_sequence=0, **pid), leader_epoch=0, now_ms=NOW)
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (first.first_offset, first.last_offset)
    assert log.log_end_offset == 2
    with pytest.raises(KafkaError) as exc:
        log.append_as_leader(batch(b"c", base_sequence=5, **pid), leader_epoch=0, now_ms=NOW)
    assert exc.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    log.append_as_leader(batch(b"c", base_sequence=2, **pid), leader_epoch=0, now_ms=NOW)
    # A newer epoch fences the old one.
    log.append_as_leader(batch(b"d", base_sequence=0, producer_id=7, producer_epoch=1), leader_epoch=0, now_ms=NOW)
    with pytest.raises(KafkaError) as exc:
        log.append_as_leader(batch(b"e", base_sequence=3, **pid), leader_epoch=0, now_ms=NOW)
    assert exc.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    # The state is rebuilt from the log on open: the retry is still recognised.
    log.close()
    reopened = open_log(tmp_path / "t-0")
    again = reopened.append_as_leader(batch(b"d", base_sequence=0, producer_id=7, producer_epoch=1),
                                      leader_epoch=0, now_ms=NOW)
    assert again.duplicate and again.first_offset == 3


def test_retention_by_time_and_size(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=500, retention_ms=1000)
    for i in range(20):
        log.append_as_leader(batch(b"x" * 50, ts=NOW + i * 100), leader_epoch=0, now_ms=NOW)
    log.high_watermark = log.log_end_offset  # the partition layer commits what it appended
    segments = len(log.segments)
    assert log.apply_retention(NOW + 100) == 0
    deleted = log.apply_retention(NOW + 2500)
    assert 0 < deleted < segments
    assert log.log_start_offset == log.segments[0].base_offset > 0
    with pytest.raises(KafkaError):
        log.read(0, 100)
    # Everything expired: the log empties but keeps its offsets.
    log.apply_retention(NOW + 100_000)
    assert log.log_start_offset == log.log_end_offset == 20

    sized = open_log(tmp_path / "s-0", segment_bytes=500, retention_bytes=1000)
    for _ in range(20):
        sized.append_as_leader(batch(b"x" * 50), leader_epoch=0, now_ms=NOW)
    sized.high_watermark = sized.log_end_offset
    sized.apply_retention(NOW)
    assert sized.size_bytes <= 1000 + 500


def test_delete_records_moves_the_log_start(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=300)
    for _ in range(10):
        log.append_as_leader(batch(b"x" * 50), leader_epoch=0, now_ms=NOW)
    with pytest.raises(KafkaError) as exc:
        log.delete_records_before(6)  # nothing is committed yet
    assert exc.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    log.high_watermark = log.log_end_offset
    log.delete_records_before(6)
    assert log.log_start_offset == 6
    assert log.segments[0].base_offset <= 6
    with pytest.raises(KafkaError):
        log.read(5, 100)
    assert [o for o, _ in values(log.read(6, 1 << 20).data)][0] <= 6


def test_log_append_time_rewrites_the_timestamp(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", message_timestamp_type="LogAppendTime")
    result = log.append_as_leader(batch(b"a", ts=5), leader_epoch=0, now_ms=NOW + 42)
    assert result.log_append_time == NOW + 42
    _, records = decode_batch(log.read(0, 1000).data)
    assert records[0].timestamp == NOW + 42


def test_leader_epochs_answer_offset_for_leader_epoch(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(batch(b"a", b"b"), leader_epoch=1, now_ms=NOW)
    log.append_as_leader(batch(b"c"), leader_epoch=3, now_ms=NOW)
    assert log.end_offset_for_epoch(1) == (1, 2)
    assert log.end_offset_for_epoch(2) == (1, 2)
    assert log.end_offset_for_epoch(3) == (3, 3)
    assert log.end_offset_for_epoch(9) == (-1, -1)
    assert read_checkpoint(tmp_path / "t-0" / "leader-epoch-checkpoint", 2) == [["1", "0"], ["3", "2"]]


def test_manager_checkpoints_and_reloads(tmp_path: Path) -> None:
    manager = LogManager([tmp_path], LogConfig())
    manager.load_all(NOW)
    log = manager.get_or_create("orders", 2, LogConfig())
    log.append_as_leader(batch(b"a"), leader_epoch=0, now_ms=NOW)
    (tmp_path / "not-a-partition.txt").write_text("x")
    manager.close()
    assert (tmp_path / "recovery-point-offset-checkpoint").read_text() == "0\n1\norders 2 1\n"
    assert (tmp_path / "log-start-offset-checkpoint").read_text() == "0\n1\norders 2 0\n"
    again = LogManager([tmp_path], LogConfig())
    again.load_all(NOW)
    assert again.get("orders", 2).log_end_offset == 1
    again.delete("orders", 2)
    assert not (tmp_path / "orders-2").exists()
    with pytest.raises(KafkaError):
        again.get("orders", 2)


def test_read_names_the_file_region_for_sendfile(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    for i in range(3):
        log.append_as_leader(batch(b"v%d" % i), leader_epoch=0, now_ms=NOW)
    result = log.read(1, 1 << 20)
    assert result.segment is log.active
    assert result.length == len(result.data)
    with open(log.active.path, "rb") as f:
        f.seek(result.position)
        assert f.read(result.length) == result.data
    assert [o for o, _ in values(result.data)] == [1, 2]


def test_a_slice_still_reads_its_segment_after_the_segment_is_deleted(tmp_path: Path) -> None:
    # A fetch answer is sent after the read: retention may delete the segment in between.
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(batch(b"old"), leader_epoch=0, now_ms=NOW)
    expected = log.read(0, 1 << 20).data
    piece = log.read(0, 1 << 20).open_slice()
    assert piece is not None and len(piece) == len(expected)
    log.roll()
    log.append_as_leader(batch(b"new"), leader_epoch=0, now_ms=NOW)
    log.high_watermark = log.log_end_offset
    log.delete_records_before(1)  # the first segment goes
    assert not (tmp_path / "t-0" / "00000000000000000000.log").exists()
    assert piece.read(0, len(piece)) == expected
    piece.close()
    piece.close()  # closing twice is harmless
    assert log.read(log.log_end_offset, 100).open_slice() is None


def test_the_leader_epoch_is_stamped_on_every_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(batch(b"a", partition_leader_epoch=-1), leader_epoch=7, now_ms=NOW)
    header, _ = decode_batch(log.read(0, 1000).data)
    assert header.partition_leader_epoch == 7 and header.base_offset == 0


def test_several_batches_in_one_request(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", message_timestamp_type="LogAppendTime")
    pid = dict(producer_id=3, producer_epoch=0)
    request = batch(b"a", b"b", base_sequence=0, **pid) + batch(b"c", base_sequence=2, **pid)
    result = log.append_as_leader(request, leader_epoch=0, now_ms=NOW + 5)
    assert (result.first_offset, result.last_offset, result.log_append_time) == (0, 2, NOW + 5)
    data = log.read(0, 1 << 20).data
    assert [h.base_offset for _, h in split_batches(data)] == [0, 2]
    assert all(r.timestamp == NOW + 5 for pos, _ in split_batches(data) for r in decode_batch(data, pos)[1])


def test_request_and_batch_sizes_are_limited(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=500)
    with pytest.raises(KafkaError) as exc:
        log.append_as_leader(batch(*[b"x" * 50] * 12), leader_epoch=0, now_ms=NOW)
    assert exc.value.code == ErrorCode.RECORD_LIST_TOO_LARGE
    inconsistent = bytearray(batch(b"a", b"b"))
    inconsistent[57:61] = (5).to_bytes(4, "big")  # records count disagrees with the last offset delta
    inconsistent[17:21] = crc32c.crc32c(bytes(inconsistent[21:])).to_bytes(4, "big")
    with pytest.raises(KafkaError) as exc:
        log.append_as_leader(inconsistent, leader_epoch=0, now_ms=NOW)
    assert exc.value.code == ErrorCode.INVALID_RECORD
    assert log.log_end_offset == 0


def test_segments_roll_by_age_and_by_a_full_index(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_ms=1000)
    log.append_as_leader(batch(b"a"), leader_epoch=0, now_ms=NOW)
    log.append_as_leader(batch(b"b"), leader_epoch=0, now_ms=NOW + 999)
    assert len(log.segments) == 1
    log.append_as_leader(batch(b"c"), leader_epoch=0, now_ms=NOW + 1000)
    assert [s.base_offset for s in log.segments] == [0, 2]

    small = open_log(tmp_path / "u-0", segment_index_bytes=24, index_interval_bytes=1)
    for i in range(7):
        small.append_as_leader(batch(b"v%d" % i), leader_epoch=0, now_ms=NOW)
    # Three 8-byte entries fill the index: every third batch starts a segment.
    assert [s.base_offset for s in small.segments] == [0, 3, 6]
    assert (tmp_path / "u-0" / "00000000000000000003.log").exists()


def test_time_retention_survives_a_restart(tmp_path: Path) -> None:
    config = dict(segment_bytes=600, retention_ms=10_000, index_interval_bytes=4096)
    log = open_log(tmp_path / "t-0", **config)
    for i in range(20):
        # Timestamps rise inside a segment past its first (and only) index entry.
        log.append_as_leader(batch(b"x" * 50, ts=NOW + i * 1000), leader_epoch=0, now_ms=NOW)
    log.flush()
    recovery_point, first_max = log.recovery_point, log.segments[0].max_timestamp
    log.close()
    reopened = Log.open(tmp_path / "t-0", LogConfig(**config), recovery_point=recovery_point)  # type: ignore[arg-type]
    assert reopened.segments[0].max_timestamp == first_max
    reopened.high_watermark = reopened.log_end_offset
    assert reopened.apply_retention(first_max + 10_000) == 0
    assert reopened.apply_retention(first_max + 10_001) == 1


def test_retention_keeps_what_is_not_yet_committed(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=300, retention_ms=1000)
    for _ in range(10):
        log.append_as_leader(batch(b"x" * 50, ts=NOW), leader_epoch=0, now_ms=NOW)
    log.high_watermark = 3
    log.apply_retention(NOW + 10_000)
    # Only segments wholly below the high watermark may go; the active segment always stays.
    assert log.log_start_offset <= 3
    assert log.log_end_offset == 10
    assert log.segments[-1].size > 0
    log.high_watermark = 10
    log.apply_retention(NOW + 10_000)
    assert log.log_start_offset == log.log_end_offset == 10
    assert log.append_as_leader(batch(b"y"), leader_epoch=0, now_ms=NOW).first_offset == 10


def test_delete_records_removes_whole_segments_below_the_new_start(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=300)
    for _ in range(12):
        log.append_as_leader(batch(b"x" * 50), leader_epoch=0, now_ms=NOW)
    log.high_watermark = log.log_end_offset
    bases = [s.base_offset for s in log.segments]
    target = bases[2] + 1
    log.delete_records_before(target)
    assert [s.base_offset for s in log.segments] == bases[2:]
    assert not (tmp_path / "t-0" / f"{bases[0]:020d}.log").exists()
    log.delete_records_before(target - 1)  # never moves back
    assert log.log_start_offset == target
    log.delete_records_before(12)  # up to the high watermark: the log is logically empty
    assert log.read(12, 100).data == b""
    assert log.offset_for_timestamp(0) is None


def test_offset_lookups_by_timestamp(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", index_interval_bytes=1)
    assert log.offset_of_max_timestamp() is None
    log.append_as_leader(build_batch([Record(None, b"a", timestamp=NOW + 10), Record(None, b"b", timestamp=NOW + 50),
                                      Record(None, b"c", timestamp=NOW + 20)]), leader_epoch=0, now_ms=NOW)
    log.append_as_leader(batch(b"d", ts=NOW + 30), leader_epoch=0, now_ms=NOW)
    assert log.offset_of_max_timestamp() == (1, NOW + 50)
    assert log.offset_for_timestamp(NOW) == (0, NOW + 10)
    assert log.offset_for_timestamp(NOW + 15) == (1, NOW + 50)
    assert log.offset_for_timestamp(NOW + 50) == (1, NOW + 50)
    assert log.offset_for_timestamp(NOW + 51) is None


def test_flush_messages_moves_the_recovery_point(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", flush_messages=3)
    log.append_as_leader(batch(b"a", b"b"), leader_epoch=0, now_ms=NOW)
    assert log.recovery_point == 0
    log.append_as_leader(batch(b"c"), leader_epoch=0, now_ms=NOW)
    assert log.recovery_point == 3
    default = open_log(tmp_path / "u-0")
    default.append_as_leader(batch(b"a"), leader_epoch=0, now_ms=NOW)
    assert default.recovery_point == 0 and not default.flush_if_due(NOW + 10**9)
    default.flush()
    assert default.recovery_point == 1


def test_update_config_applies_to_an_open_log(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(batch(b"a", ts=5), leader_epoch=0, now_ms=NOW)
    log.update_config(LogConfig(message_timestamp_type="LogAppendTime", max_message_bytes=100))
    assert log.append_as_leader(batch(b"b", ts=5), leader_epoch=0, now_ms=NOW).log_append_time == NOW
    with pytest.raises(KafkaError) as exc:
        log.append_as_leader(batch(b"x" * 200), leader_epoch=0, now_ms=NOW)
    assert exc.value.code == ErrorCode.MESSAGE_TOO_LARGE


def test_truncate_to_cuts_a_divergent_tail(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=300)
    for i in range(10):
        log.append_as_leader(batch(b"x" * 50), leader_epoch=1 if i < 6 else 2, now_ms=NOW)
    log.high_watermark = 10
    log.truncate_to(6)
    assert log.log_end_offset == 6 and log.high_watermark == 6
    assert log.end_offset_for_epoch(1) == (1, 6)
    assert log.end_offset_for_epoch(2) == (-1, -1)
    assert log.append_as_leader(batch(b"z"), leader_epoch=3, now_ms=NOW).first_offset == 6
    assert values(log.read(6, 1000).data) == [(6, b"z")]


def test_a_reopened_log_keeps_producer_state_and_epochs(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(batch(b"a", producer_id=5, producer_epoch=2, base_sequence=0), leader_epoch=4, now_ms=NOW)
    log.close()
    reopened = open_log(tmp_path / "t-0")
    assert reopened.end_offset_for_epoch(4) == (4, 1)
    with pytest.raises(KafkaError) as exc:
        reopened.append_as_leader(batch(b"b", producer_id=5, producer_epoch=1, base_sequence=1), leader_epoch=4,
                                  now_ms=NOW)
    assert exc.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    with pytest.raises(KafkaError) as exc:
        reopened.append_as_leader(batch(b"b", producer_id=5, producer_epoch=2, base_sequence=2), leader_epoch=4,
                                  now_ms=NOW)
    assert exc.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
