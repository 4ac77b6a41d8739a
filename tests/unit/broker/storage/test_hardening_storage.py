"""Storage integrity pieces on their own: the log dir lock, the bounded segment-file cache,
recovery's quarantine, and damaged checkpoints (issue 10, items 1, 2, 3 and 7)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from broker.protocol.records import Record, build_batch, split_batches
from broker.storage import Log, LogConfig, LogManager
from broker.storage.checkpoints import CheckpointError, read_offsets, read_pairs
from broker.storage.handles import FileHandleCache, TooManyOpenFilesError
from broker.storage.lock import LogDirLock, LogDirLockedError
from broker.storage.log import parse_partition_dir
from broker.storage.quarantine import survey_file

NOW = 1_700_000_000_000


def filled(path: Path, count: int, **cfg: int) -> Log:
    log = Log.open(path, LogConfig(**cfg), now_ms=NOW)  # type: ignore[arg-type]
    for i in range(count):
        log.append_as_leader(build_batch([Record(None, b"value-%03d" % i, timestamp=NOW + i)]),
                             leader_epoch=i // 10, now_ms=NOW)
    return log


# -- the lock -------------------------------------------------------------------------------


def test_a_locked_dir_names_the_holder_and_is_left_untouched(tmp_path: Path) -> None:
    # The holder is another process, as in life (flock is per open file, so this works in-process
    # too, but a child proves the pid in the message is the holder's).
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from pathlib import Path; from broker.storage.lock import LogDirLock; "
         "LogDirLock(Path(sys.argv[1])).acquire(); print('locked', flush=True); sys.stdin.read()", str(tmp_path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[4],
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(LogDirLockedError) as exc:
            LogDirLock(tmp_path).acquire()
        assert f"log dir {tmp_path} is in use by pid {holder.pid}" in str(exc.value)
        assert (tmp_path / ".lock").read_text() == f"{holder.pid}\n"
    finally:
        holder.communicate("")
    # Its death released the lock: the next owner takes it and writes its own pid.
    lock = LogDirLock(tmp_path)
    lock.acquire()
    assert (tmp_path / ".lock").read_text() == f"{os.getpid()}\n"
    lock.release()


def test_a_manager_locks_every_dir_or_none(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    other = LogDirLock(b)
    other.acquire()
    manager = LogManager([a, b], LogConfig())
    with pytest.raises(LogDirLockedError):
        manager.lock_dirs()
    LogDirLock(a).acquire()  # the first dir was released again
    other.release()


# -- the segment-file cache -----------------------------------------------------------------


def test_the_cache_keeps_at_most_its_capacity_and_never_closes_a_pinned_file(tmp_path: Path) -> None:
    cache = FileHandleCache(3)
    paths = [tmp_path / f"f{i}" for i in range(6)]
    for p in paths:
        p.write_bytes(p.name.encode())
    owners = [object() for _ in paths]

    def opener(i: int):  # noqa: ANN202
        return lambda: os.open(paths[i], os.O_RDONLY)

    with cache.use(owners[0], opener(0)) as pinned:
        for i in range(1, 6):
            with cache.use(owners[i], opener(i)) as fd:
                assert os.pread(fd, 2, 0) == paths[i].name.encode()
        assert len(cache) <= 3 + 1  # the pinned one may exceed the bound, nothing else
        assert os.pread(pinned, 2, 0) == b"f0"  # still the same file
    assert len(cache) <= 3
    opened = cache.opened
    with cache.use(owners[5], opener(5)):  # recently used: still open
        pass
    assert cache.opened == opened


def test_threads_sharing_a_small_cache_always_read_their_own_file(tmp_path: Path) -> None:
    # A worker thread opening logs (topic creation) evicts descriptors the event loop uses: a
    # pinned descriptor must never be closed or reused under its user.
    cache = FileHandleCache(2)
    paths = [tmp_path / f"f{i}" for i in range(8)]
    for p in paths:
        p.write_bytes(p.name.encode() * 4)
    owners = [object() for _ in paths]
    wrong: list[str] = []

    def hammer(offset: int) -> None:
        for n in range(2000):
            i = (n + offset) % len(paths)
            with cache.use(owners[i], lambda i=i: os.open(paths[i], os.O_RDONLY)) as fd:  # type: ignore[misc]
                if os.pread(fd, 2, 0) != paths[i].name.encode():
                    wrong.append(paths[i].name)

    threads = [threading.Thread(target=hammer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert wrong == []
    assert len(cache) <= 2


def test_emfile_empties_the_cache_then_names_the_limit(tmp_path: Path) -> None:
    cache = FileHandleCache(10)
    (tmp_path / "f").write_bytes(b"x")
    idle = object()
    with cache.use(idle, lambda: os.open(tmp_path / "f", os.O_RDONLY)):
        pass
    calls = 0

    def flaky() -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise OSError(errno.EMFILE, "Too many open files")
        return os.open(tmp_path / "f", os.O_RDONLY)

    with cache.use(object(), flaky):  # retried after giving back the idle descriptor
        pass
    assert calls == 2 and len(cache) == 1

    def never() -> int:
        raise OSError(errno.EMFILE, "Too many open files")

    with pytest.raises(TooManyOpenFilesError) as exc:
        with cache.use(object(), never):
            pass
    assert "RLIMIT_NOFILE" in str(exc.value) and "ulimit -n" in str(exc.value)


def test_a_log_with_more_segments_than_the_cache_holds_works(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from broker.storage import handles, segment

    small = FileHandleCache(4)
    monkeypatch.setattr(handles, "HANDLES", small)
    monkeypatch.setattr(segment, "HANDLES", small)
    log = filled(tmp_path / "t-0", 60, segment_bytes=400)
    assert len(log.segments) > 8
    assert len(small) <= 4
    assert [p for p, _ in split_batches(log.read(0, 1 << 20).data)]
    log.flush()
    log.close()
    reopened = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=400), now_ms=NOW)
    assert reopened.log_end_offset == 60
    assert len(small) <= 4


# -- quarantine -----------------------------------------------------------------------------


def test_a_torn_tail_is_quarantined_as_such(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log = filled(tmp_path / "t-0", 5)
    path = log.active.path
    whole = path.read_bytes()
    log.close()
    path.write_bytes(whole[:-7])  # a partial last batch
    recovered = Log.open(tmp_path / "t-0", LogConfig(), now_ms=NOW)
    assert recovered.log_end_offset == 4
    [where] = (tmp_path / "t-0.quarantine").iterdir()
    last = split_batches(whole)[-1][0]
    assert (where / f"{4:020d}.log").read_bytes() == whole[last:-7]
    assert "torn tail: t-0: recovery cut the log at offset 4" in caplog.text
    assert "mid-log" not in caplog.text
    assert "kind: torn tail" in (where / "quarantine.txt").read_text()


def test_corruption_with_intact_batches_after_it_is_an_error_and_nothing_is_deleted(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log = filled(tmp_path / "t-0", 30, segment_bytes=400)
    second = log.segments[1]
    cut_at = second.base_offset
    later = {s.path.name: s.path.read_bytes() for s in log.segments[2:]}
    path = second.path
    log.close()
    raw = bytearray(path.read_bytes())
    raw[70:73] = b"\x00\x01\x02"  # inside the first batch's records: its CRC fails
    path.write_bytes(raw)
    recovered = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=400), now_ms=NOW)
    assert recovered.log_end_offset == cut_at
    [where] = (tmp_path / "t-0.quarantine").iterdir()
    assert (where / f"{cut_at:020d}.log").read_bytes() == bytes(raw)
    for name, content in later.items():
        assert (where / name).read_bytes() == content
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert errors and f"recovery cut the log at offset {cut_at}" in errors[0].getMessage()
    assert "records in" in errors[0].getMessage() and f"offsets {cut_at + 1}..29" in errors[0].getMessage()
    # The quarantine is no partition: a manager loading the dir skips it.
    assert parse_partition_dir("t-0.quarantine") is None
    recovered.close()
    manager = LogManager([tmp_path], LogConfig(segment_bytes=400))
    manager.load_all(NOW)
    assert list(manager.logs()) == [("t", 0)]


def test_damage_to_a_length_field_is_stepped_over_by_scanning(tmp_path: Path) -> None:
    log = filled(tmp_path / "t-0", 10)
    path = log.active.path
    log.close()
    raw = bytearray(path.read_bytes())
    batches = split_batches(bytes(raw))
    pos = batches[3][0]
    raw[pos + 8:pos + 12] = b"\x7f\xff\xff\xff"  # the length of batch 3 is now absurd
    path.write_bytes(raw)
    survey, damage = survey_file(path, pos, 3)
    assert (survey.batches, survey.first_offset, survey.last_offset) == (6, 4, 9)
    assert damage.size == batches[4][0] - pos


# -- damaged checkpoints --------------------------------------------------------------------


@pytest.mark.parametrize("content", [b"\x00\xff\xfe\x80binary", b"0\n1\norders 0 twelve\n", b"0\nmany\n",
                                     b"0\n1\norders x 5\n", b"0\n1\norders 0 -5\n", "0\n1\norders 0 ٣\n".encode()])
def test_a_damaged_offset_checkpoint_is_a_checkpoint_error_naming_the_file(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    path.write_bytes(content)
    with pytest.raises(CheckpointError) as exc:
        read_offsets(path)
    assert str(path) in str(exc.value)


def test_a_damaged_leader_epoch_checkpoint_is_rebuilt_from_the_batches(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log = filled(tmp_path / "t-0", 30)
    epochs = list(log.epochs.entries)
    assert epochs == [(0, 0), (1, 10), (2, 20)]
    log.close()
    path = tmp_path / "t-0" / "leader-epoch-checkpoint"
    path.write_bytes(bytes(range(256)))
    reopened = Log.open(tmp_path / "t-0", LogConfig(), recovery_point=30, now_ms=NOW)
    assert reopened.epochs.entries == epochs
    assert read_pairs(path) == epochs
    assert f"ignoring damaged leader epoch checkpoint {path}" in caplog.text


def test_damaged_root_checkpoints_are_named_and_everything_is_recovered(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    manager = LogManager([tmp_path], LogConfig())
    manager.load_all(NOW)
    log = manager.get_or_create("orders", 0, LogConfig())
    for _ in range(3):
        log.append_as_leader(build_batch([Record(None, b"x", timestamp=NOW)]), leader_epoch=0, now_ms=NOW)
    manager.close()
    for name in ["recovery-point-offset-checkpoint", "log-start-offset-checkpoint", "replication-offset-checkpoint"]:
        (tmp_path / name).write_bytes(b"\xff\xfe\x00")
    again = LogManager([tmp_path], LogConfig())
    again.load_all(NOW)
    assert again.get("orders", 0).log_end_offset == 3
    for name in ["recovery-point-offset-checkpoint", "log-start-offset-checkpoint", "replication-offset-checkpoint"]:
        assert f"ignoring damaged checkpoint {tmp_path / name}" in caplog.text


def test_the_soft_open_file_limit_is_raised_to_the_hard_one() -> None:
    code = ("import resource; from broker.storage.handles import raise_open_file_limit, capacity_for; "
            "resource.setrlimit(resource.RLIMIT_NOFILE, (128, 512)); "
            "print(raise_open_file_limit(), resource.getrlimit(resource.RLIMIT_NOFILE), capacity_for(512))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[4]).stdout
    assert out.split() == ["(512,", "512)", "(512,", "512)", "256"]
