from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.protocol.frames import NEED_DATA, FrameReader, FrameTooLarge


def framed(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def split_frames(stream: bytes, chunk: int, max_frame_size: int) -> list[bytes]:
    """Feed `stream` in pieces of `chunk` bytes; every frame taken out, in order."""
    reader = FrameReader(max_frame_size)
    out = []
    for i in range(0, len(stream), chunk):
        reader.feed(stream[i : i + chunk])
        while (frame := reader.next_frame()) is not NEED_DATA:
            out.append(bytes(frame))
    assert reader.buffered() == 0
    return out


def test_frames_come_out_whole_and_in_order_however_the_bytes_arrive() -> None:
    bodies = [b"a", b"", b"x" * 1000, b"last"]
    stream = b"".join(framed(b) for b in bodies)
    for chunk in (1, 3, 7, len(stream)):
        assert split_frames(stream, chunk, 4096) == bodies


@given(st.lists(st.binary(max_size=300), max_size=20), st.integers(1, 64))
def test_any_split_yields_the_same_frames(bodies: list[bytes], chunk: int) -> None:
    stream = b"".join(framed(b) for b in bodies)
    assert split_frames(stream, chunk, 300) == bodies


def test_an_oversized_size_field_is_refused_before_the_body_arrives() -> None:
    reader = FrameReader(max_frame_size=100)
    reader.feed(struct.pack(">i", 90 * 1024 * 1024))
    with pytest.raises(FrameTooLarge):
        reader.next_frame()
    assert reader.buffered() == 4  # nothing was allocated for the claimed 90 MiB


def test_a_negative_size_is_refused() -> None:
    reader = FrameReader(max_frame_size=100)
    reader.feed(struct.pack(">i", -5))
    with pytest.raises(FrameTooLarge):
        reader.pending_frame_size()


def test_pending_frame_size_is_known_after_four_bytes() -> None:
    reader = FrameReader(max_frame_size=100)
    reader.feed(b"\x00\x00")
    assert reader.pending_frame_size() is None
    reader.feed(b"\x00\x40ab")
    assert reader.pending_frame_size() == 64
    assert reader.next_frame() is NEED_DATA


def test_frames_taken_earlier_stay_intact_when_more_bytes_arrive() -> None:
    reader = FrameReader(max_frame_size=1 << 20)
    reader.feed(framed(b"first") + framed(b"second")[:3])
    first = reader.next_frame()
    assert first is not NEED_DATA
    reader.feed(framed(b"second")[3:] + b"\x00" * 200_000)
    second = reader.next_frame()
    assert bytes(first) == b"first"
    assert second is not NEED_DATA and bytes(second) == b"second"
