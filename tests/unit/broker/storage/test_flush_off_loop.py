"""Nothing slow on the event loop thread (issue 11): with the broker's Flusher, a log's fsyncs,
epoch checkpoints and unlinks run in worker threads, and the recovery point only moves once
they are done. Correctness only: durations are for bench/loopstall.py."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from broker.protocol.records import Record, build_batch, decode_batch, split_batches
from broker.replication.partition import Partition
from broker.storage import Log, LogConfig
from broker.storage.checkpoints import read_pairs
from broker.storage.flusher import Flusher
from tests.support.polling import wait_for

NOW = 1_700_000_000_000


def batch(*values: bytes, ts: int = NOW) -> bytes:
    return build_batch([Record(b"k", v, timestamp=ts) for v in values])


def values(partition_log: Log) -> list[bytes | None]:
    out: list[bytes | None] = []
    for segment in partition_log.segments:
        data = segment.read(0, segment.size)
        for pos, _ in split_batches(data):
            out += [r.value for r in decode_batch(data, pos)[1]]
    return out


class Fsyncs:
    """Every os.fsync of the test, by thread: the loop's (the main thread) and the workers'."""

    def __init__(self) -> None:
        self.on_loop = 0
        self.in_workers = 0


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> Iterator[Fsyncs]:
    seen = Fsyncs()
    real = os.fsync

    def counting(fd: int) -> None:
        if threading.current_thread() is threading.main_thread():
            seen.on_loop += 1
        else:
            seen.in_workers += 1
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    yield seen


def open_log(path: Path, flusher: Flusher | None, **cfg: int) -> Log:
    opened = Log.open(path, LogConfig(**cfg), recovery_point=None, now_ms=NOW)  # type: ignore[arg-type]
    opened.scheduler = flusher
    return opened


async def test_rolls_fsync_in_workers_and_then_move_the_recovery_point(tmp_path: Path, fsyncs: Fsyncs) -> None:
    flusher = Flusher()
    partition_log = open_log(tmp_path / "t-0", flusher, segment_bytes=400)
    async with trio.open_nursery() as nursery:
        await nursery.start(flusher.run)
        for i in range(30):
            partition_log.append_as_leader(batch(b"%03d" % i), leader_epoch=0, now_ms=NOW)
        assert len(partition_log.segments) > 3
        assert fsyncs.on_loop == 0  # the rolls (and the epoch checkpoint) waited on nothing
        last_roll = partition_log.active.base_offset
        await wait_for(lambda: partition_log.recovery_point >= last_roll, what="the rolled segments fsynced")
        nursery.cancel_scope.cancel()
    assert fsyncs.on_loop == 0 and fsyncs.in_workers > 0
    assert partition_log.recovery_point == last_roll  # the active segment is not flushed by a roll
    # What the flushes wrote is whole: a reopen from that recovery point trusts the finished
    # segments' indexes (no rebuild) and finds every record and the epoch.
    assert read_pairs(tmp_path / "t-0" / "leader-epoch-checkpoint") == [(0, 0)]
    reopened = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=400), recovery_point=last_roll, now_ms=NOW)
    assert values(reopened) == [b"%03d" % i for i in range(30)]
    assert [s.offset_index.keys for s in reopened.segments] == [s.offset_index.keys for s in partition_log.segments]


async def test_flush_messages_holds_the_answer_not_the_loop(tmp_path: Path, fsyncs: Fsyncs) -> None:
    flusher = Flusher()
    partition_log = open_log(tmp_path / "t-0", flusher, flush_messages=1)
    partition = Partition("t", 0, partition_log, leader_epoch=0, is_leader=True)
    result = partition.append(batch(b"a", b"b"), now_ms=NOW)
    # The write is done and visible; the fsync is the produce's to wait for, in a worker.
    assert result.needs_flush and partition_log.recovery_point == 0 and partition.high_watermark == 2
    assert fsyncs.on_loop == 0
    await partition.wait_flushed(result)
    assert partition_log.recovery_point == 2 and fsyncs.on_loop == 0 and fsyncs.in_workers > 0
    # Concurrent producers share flushes: each returns once its own offsets are durable.
    results = [partition.append(batch(b"%d" % i), now_ms=NOW) for i in range(5)]
    async with trio.open_nursery() as nursery:
        for each in results:
            nursery.start_soon(partition.wait_flushed, each)
    assert partition_log.recovery_point == 7 and fsyncs.on_loop == 0


def test_without_a_scheduler_a_log_flushes_inline(tmp_path: Path, fsyncs: Fsyncs) -> None:
    partition_log = open_log(tmp_path / "t-0", None, flush_messages=2, segment_bytes=400)
    result = partition_log.append_as_leader(batch(b"a", b"b"), leader_epoch=0, now_ms=NOW)
    assert not result.needs_flush and partition_log.recovery_point == 2 and fsyncs.on_loop > 0


def test_a_crash_right_after_a_roll_recovers_everything(tmp_path: Path) -> None:
    flusher = Flusher()  # never run: the rolled segments' fsync and the epoch checkpoint are pending
    partition_log = open_log(tmp_path / "t-0", flusher, segment_bytes=400)
    for i in range(20):
        partition_log.append_as_leader(batch(b"%03d" % i), leader_epoch=3, now_ms=NOW)
    assert len(partition_log.segments) > 2 and partition_log.recovery_point == 0
    assert not (tmp_path / "t-0" / "leader-epoch-checkpoint").exists() or \
        read_pairs(tmp_path / "t-0" / "leader-epoch-checkpoint") == []
    # The process dies here (no close, no flush): a restart recovers from the old recovery
    # point, re-checking every segment, and rebuilds the epoch entry from the batches.
    reopened = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=400), recovery_point=partition_log.recovery_point,
                        now_ms=NOW)
    assert values(reopened) == [b"%03d" % i for i in range(20)]
    assert reopened.epochs.entries == [(3, 0)] and reopened.end_offset_for_epoch(3) == (3, 20)
    assert read_pairs(tmp_path / "t-0" / "leader-epoch-checkpoint") == [(3, 0)]


def test_a_flush_taken_before_a_truncation_does_not_move_the_recovery_point(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path / "t-0", Flusher())
    for i in range(6):
        partition_log.append_as_leader(batch(b"%d" % i), leader_epoch=0, now_ms=NOW)
    job = partition_log.begin_flush()
    assert job.upto == 6
    partition_log.truncate_to(3)  # a follower cuts a divergent tail while the fsync runs
    job.run()
    partition_log.end_flush(job)
    assert partition_log.recovery_point == 0  # nothing claimed durable that the log no longer holds
    partition_log.flush()
    assert partition_log.recovery_point == 3 == partition_log.log_end_offset
    # A flush up to an offset moves the recovery point that far, no further.
    partition_log.append_as_leader(batch(b"x", b"y"), leader_epoch=0, now_ms=NOW)
    job = partition_log.begin_flush(4)
    job.run()
    partition_log.end_flush(job)
    assert partition_log.recovery_point == 4


async def test_retention_unlinks_in_a_worker_and_respects_pinned_slices(tmp_path: Path, fsyncs: Fsyncs) -> None:
    flusher = Flusher()
    partition_log = open_log(tmp_path / "t-0", flusher, segment_bytes=400, retention_ms=1000)
    for i in range(20):
        partition_log.append_as_leader(batch(b"%03d" % i, ts=NOW + i), leader_epoch=0, now_ms=NOW)
    partition_log.high_watermark = partition_log.log_end_offset
    first = partition_log.segments[0]
    sliced = partition_log.read(0, 1 << 20).open_slice()
    assert sliced is not None
    deleted = partition_log.apply_retention(NOW + 100_000)
    assert deleted > 0
    # Detached at once (no read can reach them), unlinked later by the flusher.
    assert partition_log.log_start_offset == partition_log.segments[0].base_offset > 0
    assert first.path.exists()
    async with trio.open_nursery() as nursery:
        await nursery.start(flusher.run)
        await wait_for(lambda: not first.path.exists(), what="the expired segment's files unlinked")
        nursery.cancel_scope.cancel()
    assert not first.offset_index.path.exists() and not first.time_index.path.exists()
    # A fetch answer pinned before the deletion still reads its bytes from the unlinked file.
    try:
        data = os.pread(sliced.fd, sliced.length, sliced.position)
        assert [r.value for r in decode_batch(data, 0)[1]] == [b"000"]
    finally:
        sliced.close()
    assert fsyncs.on_loop == 0
