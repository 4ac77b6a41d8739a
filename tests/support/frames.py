"""The requests a client sends to a fake broker in a trio test, frame by frame.

    async with stream:
        async for frame in request_frames(stream):
            header, pos = decode_request_header(frame)
            ...

Each frame is a request without its size prefix; the views stay valid (see FrameReader).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import trio

from broker.protocol.frames import NEED_DATA, FrameReader

__all__ = ["request_frames"]


async def request_frames(stream: trio.abc.ReceiveStream, max_frame_size: int = 1 << 20) -> AsyncIterator[memoryview]:
    """Every request frame `stream` carries, until the client closes it."""
    frames = FrameReader(max_frame_size)
    while data := await stream.receive_some(65536):
        frames.feed(data)
        while (frame := frames.next_frame()) is not NEED_DATA:
            yield frame
