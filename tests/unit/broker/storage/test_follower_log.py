"""Storage for followers: batches appended with the leader's offsets, truncation to quarantine."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker import metrics
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import Record, build_batch, decode_batch, split_batches
from broker.storage import Log, LogConfig
from broker.storage.quarantine import MANIFEST, quarantine_root

NOW = 1_700_000_000_000


def batch(*values: bytes, **kw: int) -> bytes:
    return build_batch([Record(None, v, timestamp=NOW) for v in values], **kw)  # type: ignore[arg-type]


def open_log(path: Path, **cfg: int | str) -> Log:
    return Log.open(path, LogConfig(**cfg), recovery_point=None, now_ms=NOW)  # type: ignore[arg-type]


def whole_log(log: Log) -> bytes:
    return b"".join(s.read(0, s.size) for s in log.segments)


def values(data: bytes) -> list[tuple[int, bytes | None]]:
    out = []
    for pos, _ in split_batches(data):
        _, records = decode_batch(data, pos)
        out += [(r.offset, r.value) for r in records]
    return out


def leader_with(tmp_path: Path, epochs: list[int], **cfg: int | str) -> Log:
    leader = open_log(tmp_path / "leader" / "t-0", **cfg)
    for i, epoch in enumerate(epochs):
        leader.append_as_leader(batch(b"%03d" % i, b"x" * 40, producer_id=7, producer_epoch=0, base_sequence=2 * i),
                                leader_epoch=epoch, now_ms=NOW)
    return leader


def test_follower_append_keeps_the_leaders_bytes_offsets_and_epochs(tmp_path: Path) -> None:
    leader = leader_with(tmp_path, [1, 1, 2, 2, 2, 5], segment_bytes=300)
    follower = open_log(tmp_path / "follower" / "t-0", segment_bytes=300)
    fetched = whole_log(leader)
    result = follower.append_as_follower(fetched, now_ms=NOW)
    assert result is not None and (result.first_offset, result.last_offset) == (0, 11)
    assert whole_log(follower) == fetched  # byte for byte: nothing patched
    assert follower.log_end_offset == leader.log_end_offset == 12
    assert len(follower.segments) > 1  # rolled as the segment size asks
    assert follower.epochs.entries == leader.epochs.entries == [(1, 0), (2, 4), (5, 10)]
    # Producer state followed: the producer's retry of its last batch is a duplicate here too.
    retry = follower.append_as_leader(batch(b"005", b"x" * 40, producer_id=7, producer_epoch=0, base_sequence=10),
                                      leader_epoch=6, now_ms=NOW)
    assert retry.duplicate and retry.first_offset == 10


def test_follower_append_refuses_going_back_and_a_bad_crc(tmp_path: Path) -> None:
    leader = leader_with(tmp_path, [0, 0, 0])
    data = whole_log(leader)
    follower = open_log(tmp_path / "follower" / "t-0")
    second = split_batches(data)[1][0]
    damaged = bytearray(data)
    damaged[-1] ^= 0xFF
    with pytest.raises(KafkaError) as exc:
        follower.append_as_follower(damaged, now_ms=NOW)
    assert exc.value.code == ErrorCode.CORRUPT_MESSAGE
    assert follower.log_end_offset == 0 and whole_log(follower) == b""  # nothing written
    assert follower.append_as_follower(b"", now_ms=NOW) is None
    # A batch before the log end is refused (Kafka's UnexpectedAppendOffsetException); one past it
    # is taken, as Kafka's follower takes it (a gap: a compacted log, a mirror topic's copy).
    follower.append_as_follower(data[:second], now_ms=NOW)
    end = follower.log_end_offset
    with pytest.raises(KafkaError) as exc:
        follower.append_as_follower(data, now_ms=NOW)
    assert f"expected the log end offset {end}" in str(exc.value)


def test_truncation_quarantines_the_divergent_tail(tmp_path: Path) -> None:
    log = leader_with(tmp_path, [1, 1, 1, 2, 2, 2, 2, 2], segment_bytes=300)
    before = whole_log(log)
    log.high_watermark = 6
    counted = metrics.TRUNCATED_RECORDS.labels("t", "0")._value.get()
    cut = log.truncate_to(6, reason="test")
    assert cut is not None
    assert log.log_end_offset == 6 and log.high_watermark == 6
    assert log.epochs.entries == [(1, 0)]  # epoch 2 began at offset 6: it is gone
    kept = whole_log(log)
    assert before.startswith(kept)
    # The 2 batches (4 records) cut are in the quarantine, byte for byte, with a manifest.
    root = quarantine_root(log.directory)
    (where,) = list(root.iterdir())
    moved = b"".join(p.read_bytes() for p in sorted(where.glob("*.log")))
    assert kept + moved == before
    assert [o for o, _ in values(moved)] == [6, 7, 8, 9, 10, 11, 12, 13, 14, 15]
    assert "follower truncation" in (where / MANIFEST).read_text()
    assert metrics.TRUNCATED_RECORDS.labels("t", "0")._value.get() == counted + 10
    # Producer state followed the cut: the producer's batch at offsets 6..7 is gone, so its
    # sequence 6 is accepted again rather than answered as a duplicate.
    again = log.append_as_leader(batch(b"003", b"x" * 40, producer_id=7, producer_epoch=0, base_sequence=6),
                                 leader_epoch=3, now_ms=NOW)
    assert not again.duplicate and again.first_offset == 6
    # The log reopens cleanly (no leftover files of the moved segments).
    log.close()
    reopened = open_log(log.directory, segment_bytes=300)
    assert reopened.log_end_offset == 8 and reopened.epochs.entries == [(1, 0), (3, 6)]


def test_truncation_inside_a_batch_drops_the_whole_batch(tmp_path: Path) -> None:
    log = leader_with(tmp_path, [1, 1, 1])  # batches of two records: 0-1, 2-3, 4-5
    log.truncate_to(3)
    assert log.log_end_offset == 2


def test_truncate_fully_and_start_at(tmp_path: Path) -> None:
    log = leader_with(tmp_path, [1, 1, 1], segment_bytes=200)
    log.truncate_fully_and_start_at(100, reason="below the leader's log start")
    assert (log.log_start_offset, log.log_end_offset, log.epochs.entries) == (100, 100, [])
    assert [p.name for p in log.directory.glob("*.log")] == [f"{100:020d}.log"]
    leader = leader_with(tmp_path / "x", [4])
    data = bytearray(whole_log(leader))
    from broker.protocol.records import patch_base_offset
    patch_base_offset(data, 0, 100)
    log.append_as_follower(bytes(data), now_ms=NOW)
    assert log.log_end_offset == 102 and log.epochs.entries == [(4, 100)]
