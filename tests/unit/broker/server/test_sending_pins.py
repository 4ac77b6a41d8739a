"""A fetch answer's file slices give their pins back as they are sent, and on every other path."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest
import trio
import trio.testing

from broker.server.sending import SendStalled, send_parts
from broker.storage.handles import FileHandleCache


def _cache_with_slices(tmp_path: Path, count: int) -> tuple[FileHandleCache, list[object]]:
    from broker.storage.file_slice import FileSlice

    cache = FileHandleCache(2 * count)
    parts: list[object] = []
    for i in range(count):
        path = tmp_path / f"{i}.log"
        path.write_bytes(bytes([65 + i]) * 1000)
        fd = cache.pin_slice(path, functools.partial(os.open, path, os.O_RDONLY))
        assert fd is not None
        parts.append(FileSlice(fd, 0, 1000, functools.partial(cache.unpin_slice, path)))
        parts.append(bytearray(b"|"))
    return cache, parts


class _Recording(trio.abc.SendStream):
    """Takes everything at once and notes how many slices were pinned at each send."""

    def __init__(self, cache: FileHandleCache) -> None:
        self.cache = cache
        self.sends: list[tuple[bytes, int]] = []

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await trio.lowlevel.checkpoint()
        self.sends.append((bytes(data[:1]), self.cache.sliced))

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


async def test_each_slice_is_released_once_sent_not_after_the_whole_answer(tmp_path: Path) -> None:
    cache, parts = _cache_with_slices(tmp_path, 3)
    stream = _Recording(cache)
    await send_parts(stream, parts, use_sendfile=False, pool=None, stall_timeout_s=10)  # type: ignore[arg-type]
    assert stream.sends == [(b"A", 3), (b"|", 2), (b"B", 2), (b"|", 1), (b"C", 1), (b"|", 0)]
    assert cache.sliced == 0


async def test_a_stalled_send_releases_every_slice(tmp_path: Path) -> None:
    cache, parts = _cache_with_slices(tmp_path, 3)
    send, _receive = trio.testing.lockstep_stream_pair()
    with pytest.raises(SendStalled):
        await send_parts(send, parts, use_sendfile=False, pool=None, stall_timeout_s=0.05)  # type: ignore[arg-type]
    assert cache.sliced == 0


async def test_a_cancelled_send_releases_every_slice(tmp_path: Path) -> None:
    cache, parts = _cache_with_slices(tmp_path, 3)
    send, _receive = trio.testing.lockstep_stream_pair()
    with trio.move_on_after(0.05):
        await send_parts(send, parts, use_sendfile=False, pool=None, stall_timeout_s=10)  # type: ignore[arg-type]
    assert cache.sliced == 0
