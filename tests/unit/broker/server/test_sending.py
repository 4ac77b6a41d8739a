"""The chunked path (streams that cannot sendfile): same bytes, bounded memory, a stall deadline."""

import os
from pathlib import Path

import pytest
import trio
import trio.testing

from broker.server.memory import ResponseMemoryPool
from broker.server.sending import CHUNK, SendStalled, SliceTruncated, send_parts
from broker.storage.file_slice import FileSlice


def _slice(path: Path, position: int, length: int) -> FileSlice:
    return FileSlice(os.open(path, os.O_RDONLY), position, length)


async def test_chunked_send_writes_the_slices_bytes_between_the_parts(tmp_path: Path) -> None:
    path = tmp_path / "segment"
    data = os.urandom(3 * CHUNK + 123)
    path.write_bytes(b"xx" + data)
    pool = ResponseMemoryPool(CHUNK)
    send, receive = trio.testing.memory_stream_pair()
    piece = _slice(path, 2, len(data))
    received = bytearray()

    async def reader() -> None:
        while len(received) < len(data) + 8:
            received.extend(await receive.receive_some(1 << 20))
            assert pool.reserved <= CHUNK  # one chunk in memory at a time

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        await send_parts(send, [bytearray(b"head"), piece, bytearray(b"tail")], use_sendfile=True,
                         pool=pool, stall_timeout_s=10)
    assert bytes(received) == b"head" + data + b"tail"
    assert piece.fd == -1 and pool.reserved == 0  # closed and given back


async def test_a_peer_that_reads_nothing_stalls_the_send_and_frees_everything(tmp_path: Path) -> None:
    path = tmp_path / "segment"
    path.write_bytes(os.urandom(4 * CHUNK))
    pool = ResponseMemoryPool(CHUNK)
    send, _receive = trio.testing.lockstep_stream_pair()  # send_all blocks until the peer reads
    piece = _slice(path, 0, 4 * CHUNK)
    with pytest.raises(SendStalled):
        await send_parts(send, [piece], use_sendfile=False, pool=pool, stall_timeout_s=0.05)
    assert piece.fd == -1 and pool.reserved == 0


async def test_a_file_cut_under_the_slice_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "segment"
    path.write_bytes(b"x" * 100)
    send, receive = trio.testing.memory_stream_pair()
    piece = _slice(path, 0, 200)
    with pytest.raises(SliceTruncated):
        await send_parts(send, [piece], use_sendfile=False, pool=None, stall_timeout_s=1)
    assert piece.fd == -1
