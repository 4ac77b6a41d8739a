"""The budget of descriptors that file slices keep pinned (broker/storage/handles.py)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from broker.storage.handles import FileHandleCache, TooManyOpenFilesError, slice_budget_for


def _files(tmp_path: Path, count: int) -> list[Path]:
    paths = [tmp_path / f"{i}.log" for i in range(count)]
    for path in paths:
        path.write_bytes(b"x" * 16)
    return paths


def _opener(path: Path):  # type: ignore[no-untyped-def]
    return lambda: os.open(path, os.O_RDONLY | os.O_CLOEXEC)


def test_the_budget_is_half_the_cache_and_never_zero() -> None:
    assert slice_budget_for(128) == 64
    assert slice_budget_for(1) == 1
    assert FileHandleCache(10).slice_budget == 5


def test_slices_beyond_the_budget_get_no_pin_and_nothing_is_opened(tmp_path: Path) -> None:
    cache = FileHandleCache(8)
    paths = _files(tmp_path, 6)
    fds = [cache.pin_slice(path, _opener(path)) for path in paths]
    assert all(fd is not None for fd in fds[:4])
    assert fds[4:] == [None, None]
    assert cache.sliced == 4 and cache.slice_refusals == 2
    assert len(cache) == 4  # a refusal opens nothing
    cache.unpin_slice(paths[0])
    assert cache.sliced == 3
    assert cache.pin_slice(paths[4], _opener(paths[4])) is not None
    for path in paths[1:5]:
        cache.unpin_slice(path)
    assert cache.sliced == 0


def test_slices_of_one_file_cost_one_descriptor_of_the_budget(tmp_path: Path) -> None:
    cache = FileHandleCache(2)  # budget 1
    [a, b] = _files(tmp_path, 2)
    first = cache.pin_slice(a, _opener(a))
    assert first is not None
    assert [cache.pin_slice(a, _opener(a)) for _ in range(5)] == [first] * 5  # many fetches, one file
    assert cache.pin_slice(b, _opener(b)) is None
    assert cache.sliced == 1
    for _ in range(6):
        cache.unpin_slice(a)
    assert cache.sliced == 0
    assert cache.pin_slice(b, _opener(b)) is not None


def test_over_budget_always_pins_and_counts(tmp_path: Path) -> None:
    cache = FileHandleCache(2)  # budget 1
    [a, b] = _files(tmp_path, 2)
    assert cache.pin_slice(a, _opener(a)) is not None
    assert cache.pin_slice(b, _opener(b), over_budget=True) is not None
    assert cache.sliced == 2
    cache.unpin_slice(a)
    assert cache.pin_slice(a, _opener(a)) is None  # b alone fills the budget
    cache.unpin_slice(b)
    assert cache.sliced == 0


def test_a_pinned_descriptor_is_neither_evicted_nor_closed_until_unpinned(tmp_path: Path) -> None:
    cache = FileHandleCache(2)
    paths = _files(tmp_path, 4)
    fd = cache.pin_slice(paths[0], _opener(paths[0]))
    assert fd is not None
    for path in paths[1:]:  # reads of other files cycle through the cache
        with cache.use(path, _opener(path)):
            pass
    cache.close(paths[0])  # the segment is deleted while its slice is in flight
    assert os.pread(fd, 4, 0) == b"xxxx"
    cache.unpin_slice(paths[0])
    with pytest.raises(OSError):
        os.fstat(fd)


def test_the_surplus_that_pins_allowed_is_closed_when_they_are_released(tmp_path: Path) -> None:
    # Pinned descriptors cannot be evicted, so pins let the cache grow past its capacity. The
    # surplus used to stay open until the next open, which may never come while the process is
    # out of descriptors (accepts failed for minutes).
    cache = FileHandleCache(4)
    paths = _files(tmp_path, 8)
    for path in paths:
        assert cache.pin_slice(path, _opener(path), over_budget=True) is not None
    assert len(cache) == 8
    for path in paths:
        cache.unpin_slice(path)
    assert len(cache) == 4 and cache.sliced == 0


def test_idle_descriptors_can_be_shed_pinned_ones_stay(tmp_path: Path) -> None:
    cache = FileHandleCache(8)
    paths = _files(tmp_path, 4)
    for path in paths[1:]:
        with cache.use(path, _opener(path)):
            pass
    assert cache.pin_slice(paths[0], _opener(paths[0])) is not None
    assert cache.shed_idle() == 3
    assert len(cache) == 1
    cache.unpin_slice(paths[0])


def test_a_failed_open_gives_its_reservation_back(tmp_path: Path) -> None:
    cache = FileHandleCache(2)  # budget 1

    def missing() -> int:
        raise FileNotFoundError(errno.ENOENT, "gone")

    def out_of_files() -> int:
        raise OSError(errno.EMFILE, "Too many open files")

    with pytest.raises(FileNotFoundError):
        cache.pin_slice("gone", missing)
    with pytest.raises(TooManyOpenFilesError):
        cache.pin_slice("emfile", out_of_files)
    assert cache.sliced == 0 and len(cache) == 0
    [a] = _files(tmp_path, 1)
    assert cache.pin_slice(a, _opener(a)) is not None


def test_a_file_being_closed_refuses_new_slices(tmp_path: Path) -> None:
    cache = FileHandleCache(4)
    [a] = _files(tmp_path, 1)
    assert cache.pin_slice(a, _opener(a)) is not None
    cache.close(a)  # deleted while a slice is in flight
    with pytest.raises(OSError) as exc:
        cache.pin_slice(a, _opener(a))
    assert exc.value.errno == errno.EBADF
    cache.unpin_slice(a)
    assert cache.sliced == 0 and len(cache) == 0
