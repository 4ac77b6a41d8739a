"""One client connection: read frames, answer requests in order, never crash the broker.

Kafka answers the requests of one connection in the order they arrived and reads the next one
only after the current one is answered (a connection is "muted" while a request is in flight).
That is what this loop does, and it is why a long-polling fetch holds back the requests behind
it on the same connection, as it does in Kafka.

Errors are translated here, at one place: bytes that do not parse close the connection (Kafka
closes it on a request it cannot parse); a handler bug is logged with its traceback and closes
the connection; the broker goes on serving everyone else.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from broker.protocol.errors import ProtocolError
from broker.protocol.frames import NEED_DATA, FrameReader

if TYPE_CHECKING:
    from broker.server.dispatch import Dispatcher
    from broker.server.memory import RequestMemoryPool

__all__ = ["ConnectionInfo", "serve_connection"]

log = logging.getLogger(__name__)

# How much to ask the socket for at once. Large produce requests arrive in chunks of this size.
RECEIVE_CHUNK = 256 * 1024


@dataclass(frozen=True, slots=True)
class ConnectionInfo:
    listener_name: str
    peer: str
    security_protocol: str


async def serve_connection(
    stream: trio.abc.Stream,
    info: ConnectionInfo,
    dispatcher: Dispatcher,
    pool: RequestMemoryPool,
    *,
    max_frame_size: int,
    idle_timeout_s: float,
) -> None:
    """Serve one connection until the peer closes it, sends garbage, or idles too long.

    Never raises for anything the peer does; always closes the stream.
    """
    frames = FrameReader(max_frame_size)
    reserved = 0
    try:
        while True:
            frame = frames.next_frame()
            if frame is NEED_DATA:
                pending = frames.pending_frame_size()
                if pending is not None and reserved == 0:
                    # Take the frame's size from the shared budget before reading the rest of it.
                    await pool.reserve(pending)
                    reserved = pending
                data: bytes | bytearray = b""
                with trio.move_on_after(idle_timeout_s):
                    data = await stream.receive_some(RECEIVE_CHUNK)
                    if not data:
                        return  # the peer closed the connection
                if not data:
                    log.info("closing idle connection from %s", info.peer)
                    return
                frames.feed(data)
                continue
            response = await dispatcher.handle(frame, info)
            if reserved:
                pool.release(reserved)
                reserved = 0
            if response is not None:
                await stream.send_all(response)
    except ProtocolError as exc:
        log.warning("closing connection from %s on %s: %s", info.peer, info.listener_name, exc)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass  # the peer went away mid-send; nothing to answer
    except Exception:  # noqa: BLE001 - a bug in one request must not take the broker down
        log.exception("closing connection from %s after an internal error", info.peer)
    finally:
        if reserved:
            pool.release(reserved)
        with trio.CancelScope(shield=True):
            await stream.aclose()
