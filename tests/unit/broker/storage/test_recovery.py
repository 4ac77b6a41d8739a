"""Opening a log after a crash: the tail is checked batch by batch, a torn or corrupt tail is cut,
indexes are rebuilt, and a missing or damaged index of a finished segment is rebuilt too."""

from __future__ import annotations

import struct
from pathlib import Path

from broker.protocol.records import Record, build_batch, decode_batch, split_batches
from broker.storage import Log, LogConfig

NOW = 1_700_000_000_000


def batch(value: bytes, ts: int = NOW, **kw: int) -> bytes:
    return build_batch([Record(None, value, timestamp=ts)], **kw)  # type: ignore[arg-type]


def offsets(data: bytes) -> list[int]:
    out: list[int] = []
    for pos, _ in split_batches(data):
        out += [r.offset for r in decode_batch(data, pos)[1]]
    return out


def filled(path: Path, count: int, **cfg: int) -> Log:
    log = Log.open(path, LogConfig(**cfg), now_ms=NOW)  # type: ignore[arg-type]
    for i in range(count):
        log.append_as_leader(batch(b"value-%03d" % i, ts=NOW + i), leader_epoch=0, now_ms=NOW)
    return log


def index_entries(path: Path) -> list[tuple[int, int]]:
    data = path.read_bytes()
    return [struct.unpack_from(">ii", data, i) for i in range(0, len(data), 8)]


def test_a_torn_tail_is_cut_and_the_indexes_rebuilt(tmp_path: Path) -> None:
    log = filled(tmp_path / "t-0", 30, index_interval_bytes=1)
    log.flush()
    full_index = index_entries(log.active.offset_index.path)
    path = log.active.path
    log.close()
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 10)
    recovered = Log.open(tmp_path / "t-0", LogConfig(index_interval_bytes=1), now_ms=NOW)
    assert recovered.log_end_offset == 29
    assert offsets(recovered.read(0, 1 << 20).data) == list(range(29))
    # The index of the cut segment no longer names the torn batch.
    assert index_entries(recovered.active.offset_index.path) == full_index[:-1]
    assert recovered.offset_for_timestamp(NOW + 28) == (28, NOW + 28)
    assert recovered.offset_for_timestamp(NOW + 29) is None


def test_garbage_after_the_last_batch_is_removed(tmp_path: Path) -> None:
    log = filled(tmp_path / "t-0", 5)
    path = log.active.path
    size = path.stat().st_size
    log.close()
    with open(path, "ab") as f:
        f.write(b"\x00" * 7 + b"\xde\xad\xbe\xef" * 30)
    recovered = Log.open(tmp_path / "t-0", LogConfig(), now_ms=NOW)
    assert path.stat().st_size == size
    assert recovered.log_end_offset == 5


def test_a_cut_in_an_earlier_segment_drops_the_segments_after_it(tmp_path: Path) -> None:
    log = filled(tmp_path / "t-0", 30, segment_bytes=400)
    assert len(log.segments) >= 3
    second = log.segments[1]
    cut_at = second.base_offset
    path = second.path
    log.close()
    with open(path, "r+b") as f:
        f.seek(70)
        f.write(b"\x00\x01\x02")  # inside the first batch's records: its CRC fails
    recovered = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=400), now_ms=NOW)
    assert recovered.log_end_offset == cut_at
    assert len(recovered.segments) == 2
    assert not [p for p in (tmp_path / "t-0").glob("*.log") if int(p.stem) > cut_at]


def test_segments_below_the_recovery_point_are_trusted(tmp_path: Path) -> None:
    log = filled(tmp_path / "t-0", 30, segment_bytes=400)
    first = log.segments[0]
    first_path, first_end = first.path, first.next_offset
    log.flush()
    recovery_point = log.recovery_point
    log.close()
    with open(first_path, "r+b") as f:
        f.seek(70)
        f.write(b"\x00\x01\x02")  # a flipped bit in flushed data is not what a crash leaves
    reopened = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=400), recovery_point=recovery_point, now_ms=NOW)
    assert reopened.log_end_offset == 30
    assert reopened.segments[0].next_offset == first_end


def test_a_missing_index_is_rebuilt(tmp_path: Path) -> None:
    log = filled(tmp_path / "t-0", 40, segment_bytes=600, index_interval_bytes=100)
    log.flush()
    first = log.segments[0]
    index_path, time_path = first.offset_index.path, first.time_index.path
    expected = index_entries(index_path)
    recovery_point = log.recovery_point
    log.close()
    index_path.unlink()
    time_path.unlink()
    reopened = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=600, index_interval_bytes=100),
                        recovery_point=recovery_point, now_ms=NOW)
    assert index_entries(index_path) == expected
    assert time_path.exists()
    assert offsets(reopened.read(3, 1 << 20).data)[0] == 3
    assert reopened.offset_for_timestamp(NOW + 2) == (2, NOW + 2)


def test_a_damaged_index_is_rebuilt(tmp_path: Path) -> None:
    log = filled(tmp_path / "t-0", 40, segment_bytes=600, index_interval_bytes=100)
    log.flush()
    first = log.segments[0]
    index_path = first.offset_index.path
    expected = index_entries(index_path)
    recovery_point = log.recovery_point
    log.close()
    assert len(expected) >= 2
    # Increasing and inside the file, but the last entry points into the middle of a batch.
    damaged = expected[:-1] + [(expected[-1][0], expected[-1][1] + 3)]
    index_path.write_bytes(b"".join(struct.pack(">ii", *e) for e in damaged))
    reopened = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=600, index_interval_bytes=100),
                        recovery_point=recovery_point, now_ms=NOW)
    assert index_entries(index_path) == expected
    assert offsets(reopened.read(0, 1 << 20).data)[:3] == [0, 1, 2]


def test_orphan_indexes_and_temporary_files_are_removed(tmp_path: Path) -> None:
    log = filled(tmp_path / "t-0", 3)
    log.close()
    directory = tmp_path / "t-0"
    (directory / "00000000000000000500.index").write_bytes(b"")
    (directory / "00000000000000000500.timeindex").write_bytes(b"")
    (directory / "leader-epoch-checkpoint.tmp").write_text("half")
    Log.open(directory, LogConfig(), now_ms=NOW)
    names = sorted(p.name for p in directory.iterdir())
    assert names == [
        "00000000000000000000.index",
        "00000000000000000000.log",
        "00000000000000000000.timeindex",
        "00000000000000000003.snapshot",  # the producer state at the clean close
        "leader-epoch-checkpoint",
    ]


def test_recovery_after_a_crash_keeps_the_producer_state(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(), now_ms=NOW)
    for seq in range(3):
        log.append_as_leader(batch(b"x", producer_id=9, producer_epoch=0, base_sequence=seq), leader_epoch=0,
                             now_ms=NOW)
    path = log.active.path
    # No close: a crash. The last batch is torn.
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 1)
    recovered = Log.open(tmp_path / "t-0", LogConfig(), now_ms=NOW)
    assert recovered.log_end_offset == 2
    # The torn batch was never acknowledged as written: its retry is appended, not a duplicate.
    again = recovered.append_as_leader(batch(b"x", producer_id=9, producer_epoch=0, base_sequence=2),
                                       leader_epoch=0, now_ms=NOW)
    assert not again.duplicate and again.first_offset == 2
    dup = recovered.append_as_leader(batch(b"x", producer_id=9, producer_epoch=0, base_sequence=1),
                                     leader_epoch=0, now_ms=NOW)
    assert dup.duplicate and dup.first_offset == 1
