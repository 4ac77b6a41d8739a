"""Transactions in a partition's log: ongoing transactions, the last stable offset, markers and
the aborted transaction index (``.txnindex``) through roll, truncation, deletion and reopening."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.protocol.control_records import ControlType, end_txn_marker, marker_of
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import Record, build_batch, read_batch_header, split_batches
from broker.storage.config import LogConfig
from broker.storage.log import Log
from broker.storage.producer_snapshot import (
    SnapshotEntry,
    SnapshotError,
    read_snapshot,
    snapshot_offsets,
    snapshot_path,
    write_snapshot,
)
from broker.storage.txn_index import AbortedTxn, read_entries

NOW = 1_700_000_000_000


def txn_batch(pid: int, seq: int, *values: bytes, epoch: int = 0) -> bytes:
    return build_batch([Record(None, v, timestamp=NOW) for v in values], producer_id=pid, producer_epoch=epoch,
                       base_sequence=seq, is_transactional=True)


def produce(log: Log, batch: bytes) -> int:
    result = log.append_as_leader(batch, leader_epoch=0, now_ms=NOW, transactional=True)
    log.high_watermark = log.log_end_offset  # an ISR of one
    return result.first_offset


def mark(log: Log, pid: int, kind: ControlType, *, epoch: int = 0, coordinator_epoch: int = 0) -> int:
    result = log.append_marker(kind, producer_id=pid, producer_epoch=epoch, coordinator_epoch=coordinator_epoch,
                               leader_epoch=0, now_ms=NOW)
    log.high_watermark = log.log_end_offset
    return result.first_offset


def test_marker_format_is_kafkas() -> None:
    batch = end_txn_marker(ControlType.COMMIT, producer_id=5, producer_epoch=3, coordinator_epoch=9, now_ms=NOW)
    header = read_batch_header(batch)
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (5, 3, -1)
    assert marker_of(batch, 0, header) == (ControlType.COMMIT, 9)
    # The key and value bytes as Kafka writes them: version 0, type 1; version 0, coordinator epoch.
    assert b"\x00\x00\x00\x01" in batch and b"\x00\x00\x00\x00\x00\x09" in batch


def test_last_stable_offset_stops_at_the_earliest_open_transaction(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig())
    produce(log, build_batch([Record(None, b"plain", timestamp=NOW)]))
    first = produce(log, txn_batch(7, 0, b"a", b"b"))
    produce(log, txn_batch(8, 0, b"c"))
    assert log.last_stable_offset == first == 1
    aborted_at = mark(log, 7, ControlType.ABORT)
    assert log.last_stable_offset == 3  # producer 8's transaction is still open
    mark(log, 8, ControlType.COMMIT)
    assert log.last_stable_offset == log.high_watermark == log.log_end_offset
    assert log.aborted_transactions(0, log.log_end_offset) == [AbortedTxn(7, 1, aborted_at, 3)]
    assert read_entries(tmp_path / "t-0" / "00000000000000000000.txnindex") == [AbortedTxn(7, 1, aborted_at, 3)]


def test_a_completed_transaction_stays_unstable_until_the_high_watermark_passes_its_marker(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig())
    first = produce(log, txn_batch(7, 0, b"a"))
    log.append_marker(ControlType.COMMIT, producer_id=7, producer_epoch=0, coordinator_epoch=0, leader_epoch=0,
                      now_ms=NOW)
    assert log.last_stable_offset == first  # the followers have not the marker yet
    log.high_watermark = log.log_end_offset
    assert log.last_stable_offset == log.log_end_offset


def test_marker_checks_follow_kafka(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig())
    produce(log, txn_batch(7, 0, b"a", epoch=2))
    with pytest.raises(KafkaError) as older:
        mark(log, 7, ControlType.COMMIT, epoch=1)
    assert older.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    # A plain batch from a producer inside its transaction.
    plain = build_batch([Record(None, b"x", timestamp=NOW)], producer_id=7, producer_epoch=2, base_sequence=1)
    with pytest.raises(KafkaError) as mixed:
        log.append_as_leader(plain, leader_epoch=0, now_ms=NOW)
    assert mixed.value.code == ErrorCode.INVALID_TXN_STATE
    mark(log, 7, ControlType.COMMIT, epoch=2, coordinator_epoch=4)
    with pytest.raises(KafkaError) as fenced:
        mark(log, 7, ControlType.ABORT, epoch=2, coordinator_epoch=3)
    assert fenced.value.code == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    # No ongoing transaction: written, an empty transaction at the marker (as Kafka's).
    at = mark(log, 9, ControlType.ABORT)
    assert log.aborted_transactions(at, at + 1) == [AbortedTxn(9, at, at, at + 1)]
    assert log.last_stable_offset == log.log_end_offset


def test_the_index_follows_rolls_truncation_deletion_and_reopening(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    config = LogConfig(segment_bytes=300)
    log = Log.open(directory, config)
    aborted = []
    for pid in range(6):
        first = produce(log, txn_batch(pid, 0, b"v" * 40))
        at = mark(log, pid, ControlType.ABORT if pid % 2 == 0 else ControlType.COMMIT)
        if pid % 2 == 0:
            aborted.append(AbortedTxn(pid, first, at, at + 1))
    assert len(log.segments) > 2
    files = sorted(p.name for p in directory.glob("*.txnindex"))
    assert len(files) >= 2  # each abort's entry went to the segment holding its marker
    assert log.aborted_transactions(0, log.log_end_offset) == aborted
    # A transaction left open, then reopening: from the snapshot of the clean close.
    open_at = produce(log, txn_batch(10, 0, b"open"))
    log.close()
    assert snapshot_offsets(directory)[-1] == open_at + 1
    log = Log.open(directory, config, high_watermark=open_at + 1)
    assert log.aborted_transactions(0, log.log_end_offset) == aborted
    assert log.last_stable_offset == open_at
    log.close()
    # Without snapshots the log is read again, and a damaged index file is rewritten from it.
    for offset in snapshot_offsets(directory):
        snapshot_path(directory, offset).unlink()
    (directory / files[0]).write_bytes(b"\x00" * 34)
    log = Log.open(directory, config, high_watermark=open_at + 1)
    assert log.aborted_transactions(0, log.log_end_offset) == aborted
    assert log.last_stable_offset == open_at
    assert [e for f in sorted(directory.glob("*.txnindex")) for e in read_entries(f)] == aborted
    # Truncation below the last abort's marker drops its entry; below a commit's marker reopens it.
    last = aborted[-1]
    log.truncate_to(last.last_offset)
    assert log.aborted_transactions(0, log.log_end_offset) == aborted[:-1]
    assert log.last_stable_offset == last.first_offset  # its transaction is open again
    # Deleting the first segments removes their index files.
    log.high_watermark = log.log_end_offset
    log.delete_records_before(log.segments[2].base_offset)
    assert all(int(p.name[:20]) >= log.segments[0].base_offset for p in directory.glob("*.txnindex"))
    log.close()


def test_a_follower_tracks_what_the_leader_wrote(tmp_path: Path) -> None:
    leader = Log.open(tmp_path / "l-0", LogConfig())
    follower = Log.open(tmp_path / "f-0", LogConfig())
    produce(leader, txn_batch(3, 0, b"a", b"b"))
    mark(leader, 3, ControlType.ABORT)
    data = leader.read(0, 1 << 20).data
    assert len(split_batches(data)) == 2
    follower.append_as_follower(data, now_ms=NOW)
    assert follower.aborted_transactions(0, 10) == leader.aborted_transactions(0, 10)
    assert follower.last_stable_offset == 0  # its high watermark has not moved yet
    follower.high_watermark = follower.log_end_offset
    assert follower.last_stable_offset == 3


def test_a_snapshot_holds_kafkas_fields_and_a_damaged_one_is_not_used(tmp_path: Path) -> None:
    entries = [SnapshotEntry(7, 2, 41, 100, 4, NOW, 3, 90), SnapshotEntry(8, -1, -1, -1, 0, -1, -1, 95)]
    write_snapshot(tmp_path, 120, entries)
    path = snapshot_path(tmp_path, 120)
    assert path.name == "00000000000000000120.snapshot"
    data = path.read_bytes()
    assert data[:2] == b"\x00\x01" and len(data) == 2 + 4 + 4 + 2 * 46  # version, crc, count, entries
    assert read_snapshot(path) == entries
    path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(SnapshotError, match="CRC"):
        read_snapshot(path)


def test_after_a_crash_the_last_rolls_snapshot_keeps_an_old_transaction_and_sequences(tmp_path: Path) -> None:
    """A transaction opened many segments ago and a producer idle since: neither is in the last
    two segments, which is all a log without snapshots would read for sequences."""
    directory = tmp_path / "t-0"
    config = LogConfig(segment_bytes=300)
    log = Log.open(directory, config)
    old_first = produce(log, txn_batch(1, 0, b"early"))
    idle = build_batch([Record(None, b"idle", timestamp=NOW)], producer_id=2, producer_epoch=0, base_sequence=0)
    idle_offset = log.append_as_leader(idle, leader_epoch=0, now_ms=NOW).first_offset
    for seq in range(12):
        produce(log, build_batch([Record(None, b"x" * 60, timestamp=NOW)], producer_id=3, producer_epoch=0,
                                 base_sequence=seq))
    assert len(log.segments) > 4 and snapshot_offsets(directory)
    assert len(snapshot_offsets(directory)) <= 2  # the newest are kept
    log.flush()
    # No close (a crash): the broker opens the directory again.
    again = Log.open(directory, config, high_watermark=log.log_end_offset)
    assert again.last_stable_offset == old_first
    retried = again.append_as_leader(idle, leader_epoch=0, now_ms=NOW)
    assert retried.duplicate and retried.first_offset == idle_offset
    mark(again, 1, ControlType.COMMIT)
    assert again.last_stable_offset == again.log_end_offset


def test_a_snapshot_past_the_log_end_is_removed(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = Log.open(directory, LogConfig())
    produce(log, txn_batch(1, 0, b"a"))
    log.close()
    write_snapshot(directory, 50, [])  # taken before a cut the log no longer holds
    reopened = Log.open(directory, LogConfig())
    assert snapshot_offsets(directory) == [1]
    assert reopened.last_stable_offset == 0  # producer 1's transaction, from the snapshot at 1


def test_a_mirror_topics_copy_tracks_the_sources_transactions(tmp_path: Path) -> None:
    """A link-mode copy keeps the source's offsets, producers and markers: its read_committed
    readers get the same last stable offset and aborted transactions as the source's."""
    source = Log.open(tmp_path / "s-0", LogConfig())
    produce(source, txn_batch(4, 0, b"kept"))
    produce(source, txn_batch(5, 0, b"dropped"))
    mark(source, 5, ControlType.ABORT)
    mark(source, 4, ControlType.COMMIT)
    produce(source, txn_batch(6, 0, b"open"))
    copy = Log.open(tmp_path / "c-0", LogConfig(mirror_name="east-to-west"))
    copy.append_copied(source.read(0, 1 << 20).data, leader_epoch=0, now_ms=NOW)
    copy.high_watermark = copy.log_end_offset
    assert copy.last_stable_offset == source.last_stable_offset == 4
    assert copy.aborted_transactions(0, 4) == source.aborted_transactions(0, 4) == [AbortedTxn(5, 1, 2, 0)]
    assert not copy.producers.producers  # the source's producers constrain nobody's sequences here


def test_a_reads_aborted_transactions_stop_near_its_data(tmp_path: Path) -> None:
    """Many aborted transactions in one segment: a small read is told of those its batches may
    overlap, not of every one in the segment (Kafka's fetchUpperBoundOffset)."""
    log = Log.open(tmp_path / "t-0", LogConfig(index_interval_bytes=1))
    for pid in range(200):
        produce(log, txn_batch(pid, 0, b"v" * 20))
        mark(log, pid, ControlType.ABORT)
    read = log.read(10, 1, min_one_batch=True)  # one batch: producer 5's
    assert read.upper_bound_offset == 11  # the marker after it is the next indexed batch
    assert [t.producer_id for t in log.aborted_transactions(10, read.upper_bound_offset)] == [5]
    assert len(log.aborted_transactions(10, log.log_end_offset)) == 195
