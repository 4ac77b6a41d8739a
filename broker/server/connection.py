"""One client connection: read frames, answer requests in order, never crash the broker.

Kafka answers the requests of one connection in the order they arrived and reads the next one
only after the current one is answered (a connection is "muted" while a request is in flight).
That is what this loop does, and it is why a long-polling fetch holds back the requests behind
it on the same connection, as it does in Kafka.

What a peer can make the connection hold is bounded:

- *Request bytes*: budget is taken from the shared :class:`RequestMemoryPool` only for bytes
  that are about to be read (after the socket says they are there), never for the size a frame
  announces; see ``broker.server.memory`` for why no connection can hold it hostage.
- *Time for a partial request*: once the first bytes of a request are in, the rest must arrive
  within ``causeway.request.arrival.timeout.ms``, or the connection is closed (a peer trickling
  a byte every few seconds never looks idle). A silent connection is closed after
  ``connections.max.idle.ms``, as in Kafka.
- *Responses*: record data goes from the segment files (``broker.server.sending``), and a peer
  that takes no bytes for ``connections.max.idle.ms`` is disconnected.
- *Long polls*: while a fetch waits for data, the receive side (free, the connection being
  muted) is watched; a peer that closes or resets is noticed at once and the poll abandoned, so
  neither the socket (in CLOSE_WAIT) nor the request lingers until ``max_wait_ms``.

Errors are translated here, at one place: bytes that do not parse close the connection (Kafka
closes it on a request it cannot parse); a handler bug is logged with its traceback and closes
the connection; the broker goes on serving everyone else. Per-connection messages go through a
:class:`~broker.log_limits.RepeatLimiter`, so hostile peers cannot flood the log.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from broker.log_limits import limiter
from broker.protocol.errors import ProtocolError
from broker.protocol.frames import NEED_DATA, FrameReader
from broker.server import request_metrics
from broker.server.authenticator import Authenticated, Close, Dispatch, SaslAuthenticator
from broker.server.context import ConnectionInfo
from broker.server.sending import SendStalled, SliceTruncated, close_parts, send_bytes, send_parts

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from broker.protocol.spliced import Splice
    from broker.server.dispatch import Dispatcher, Response
    from broker.server.memory import RequestMemoryPool, ResponseMemoryPool

__all__ = ["ConnectionLimits", "serve_connection"]

log = logging.getLogger(__name__)
_limited = limiter(log)

# How much to ask the socket for at once. Large produce requests arrive in chunks of this size.
RECEIVE_CHUNK = 256 * 1024
# Requests that may wait long for something else to happen (a fetch's long poll, a JoinGroup or
# SyncGroup parked until the group's rebalance), by api key: abandoned when their peer goes away,
# so a gone client never holds a socket and its descriptor for the rest of the wait. The group
# coordinator forgets an abandoned join or sync and leaves the member to its session timeout.
_WAITING_REQUESTS = frozenset({1, 11, 14})  # Fetch, JoinGroup, SyncGroup
# Security protocols whose listeners hand record data to the kernel with sendfile (no TLS layer).
_SENDFILE_PROTOCOLS = frozenset({"PLAINTEXT", "SASL_PLAINTEXT"})


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """What bounds one connection; ``math.inf`` for a timeout that is off."""

    max_frame_size: int  # socket.request.max.bytes
    idle_timeout_s: float  # connections.max.idle.ms: silence, and a send that makes no progress
    arrival_timeout_s: float = math.inf  # causeway.request.arrival.timeout.ms
    sasl_max_receive_size: int = 524288  # sasl.server.max.receive.size: a frame before authentication

    @classmethod
    def from_config(cls, config: BrokerConfig) -> ConnectionLimits:
        def seconds(ms: int) -> float:
            return ms / 1000 if ms >= 0 else math.inf

        return cls(config.socket_request_max_bytes, seconds(config.connections_max_idle_ms),
                   seconds(config.request_arrival_timeout_ms), config.sasl_server_max_receive_size)


class _PeerGone(Exception):
    """The peer closed or reset the connection while its request was in flight."""


async def serve_connection(
    stream: trio.abc.Stream,
    info: ConnectionInfo,
    dispatcher: Dispatcher,
    pool: RequestMemoryPool,
    *,
    limits: ConnectionLimits,
    responses: ResponseMemoryPool | None = None,
    authenticator: SaslAuthenticator | None = None,
) -> None:
    """Serve one connection until the peer closes it, sends garbage, idles or stalls too long.

    On a SASL listener, `authenticator` runs the SASL exchange first: nothing but ApiVersions
    reaches the handlers before the client has authenticated.

    Never raises for anything the peer does; always closes the stream and gives back what the
    connection held in ``pool``.
    """
    # Until a SASL client has authenticated, what it may send is bounded by sasl.server.max.receive.size.
    frames = FrameReader(limits.max_frame_size if authenticator is None
                         else min(limits.max_frame_size, limits.sasl_max_receive_size))
    owner = object()  # this connection, as the pool knows it
    use_sendfile = isinstance(stream, trio.SocketStream) and info.security_protocol in _SENDFILE_PROTOCOLS
    partial_since: float | None = None  # when the first bytes of the unfinished request came
    # When bytes last came: every frame the reader holds complete was completed by them, since
    # the socket is read only when no frame is (a request's queue time starts there).
    received_at = trio.current_time()
    try:
        while True:
            frame = frames.next_frame()
            if frame is NEED_DATA:
                if partial_since is None and frames.buffered():
                    partial_since = trio.current_time()
                if not await _receive(stream, frames, pool, owner, info, limits, partial_since):
                    return
                received_at = trio.current_time()
                continue
            partial_since = None
            pool.frame_complete(owner)
            timer = request_metrics.start_request(frame, received_at)
            try:
                if authenticator is not None and not authenticator.done:
                    step = await authenticator.step(frame)
                    if isinstance(step, Close):
                        if step.frame is not None:
                            await send_bytes(stream, step.frame, limits.idle_timeout_s)
                        _limited.info(f"authentication failed on {info.listener_name}",
                                      "closing connection from %s on %s: %s", info.peer, info.listener_name,
                                      step.reason)
                        await _linger(stream, step.linger_s)
                        return
                    if isinstance(step, Authenticated):
                        info = dataclasses.replace(info, principal=step.principal)
                        frames.max_frame_size = limits.max_frame_size
                    response = (await _handle(stream, dispatcher, frame, info)) if isinstance(step, Dispatch) \
                        else step.frame
                else:
                    response = await _handle(stream, dispatcher, frame, info)
            finally:
                pool.release(owner, min(len(frame) + 4, pool.held(owner)))
            if isinstance(response, bytearray):
                await send_bytes(stream, response, limits.idle_timeout_s)
            elif response is not None:
                await _send_spliced(stream, response, use_sendfile, responses, limits.idle_timeout_s)
            timer.done()
    except ProtocolError as exc:
        _limited.warning("protocol error", "closing connection from %s on %s: %s",
                         info.peer, info.listener_name, exc)
    except SendStalled:
        _limited.warning("send stalled", "closing connection from %s on %s: it read nothing of a "
                         "response for %s s (connections.max.idle.ms)", info.peer, info.listener_name,
                         _seconds(limits.idle_timeout_s))
    except SliceTruncated as exc:
        _limited.warning("log truncated during send", "closing connection from %s on %s: %s",
                         info.peer, info.listener_name, exc)
    except _PeerGone:
        log.debug("%s closed the connection while its fetch was waiting", info.peer)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass  # the peer went away mid-send; nothing to answer
    except Exception:  # noqa: BLE001 - a bug in one request must not take the broker down
        _limited.error("internal error", "closing connection from %s after an internal error",
                       info.peer, exc_info=True)
    finally:
        pool.forget(owner)
        with trio.CancelScope(shield=True):
            await stream.aclose()


async def _linger(stream: trio.abc.Stream, seconds: float) -> None:
    """Keep a refused connection open `seconds` (or until the peer closes it), reading and
    dropping what it sends: the peer reads its answer before the close, and bytes left unread at
    the close would make it a reset that can drop the answer before the peer has read it."""
    with trio.move_on_after(seconds):
        try:
            while await stream.receive_some(_LINGER_READ_BYTES):
                pass
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass


_LINGER_READ_BYTES = 4096


async def _receive(
    stream: trio.abc.Stream,
    frames: FrameReader,
    pool: RequestMemoryPool,
    owner: object,
    info: ConnectionInfo,
    limits: ConnectionLimits,
    partial_since: float | None,
) -> bool:
    """Read more of the current frame; False when the connection should close.

    Raises FrameTooLarge (a ProtocolError) as soon as a size field is out of bounds.
    """
    pending = frames.pending_frame_size()
    want = RECEIVE_CHUNK if pending is None else min(RECEIVE_CHUNK, 4 + pending - frames.buffered())
    now = trio.current_time()
    deadline = now + limits.idle_timeout_s
    if partial_since is not None:
        deadline = min(deadline, partial_since + limits.arrival_timeout_s)
    data: bytes | bytearray = b""
    with trio.move_on_at(deadline) as scope:
        # Budget is taken only once bytes are there: a silent or trickling peer holds none of it
        # while it makes us wait. (Streams without a socket cannot tell; they take it first.)
        if isinstance(stream, trio.SocketStream):
            await trio.lowlevel.wait_readable(stream.socket)
    if not scope.cancelled_caught:
        await pool.reserve(owner, want)  # waiting for budget is the broker's doing: no deadline
        try:
            with trio.move_on_at(deadline) as scope:
                data = await stream.receive_some(want)
        finally:
            pool.release(owner, want - len(data))
        if not scope.cancelled_caught:
            if not data:
                return False  # the peer closed the connection
            frames.feed(data)
            return True
    if partial_since is not None and trio.current_time() >= partial_since + limits.arrival_timeout_s:
        _limited.warning(
            "request arrival timeout",
            "closing connection from %s on %s: a request of %s bytes did not arrive within %s s "
            "(%d bytes came; causeway.request.arrival.timeout.ms)",
            info.peer, info.listener_name, pending if pending is not None else "?",
            _seconds(limits.arrival_timeout_s), frames.buffered())
    else:
        _limited.info("idle connection", "closing idle connection from %s on %s (connections.max.idle.ms)",
                      info.peer, info.listener_name)
    return False


async def _handle(stream: trio.abc.Stream, dispatcher: Dispatcher, frame: memoryview,
                  info: ConnectionInfo) -> Response | None:
    """Answer one frame. A request that may wait long is abandoned (raising _PeerGone) if its
    peer goes away meanwhile."""
    if not (isinstance(stream, trio.SocketStream) and len(frame) >= 2 and frame[0] == 0
            and frame[1] in _WAITING_REQUESTS):
        return await dispatcher.handle(frame, info)
    result: Response | None = None
    error: Exception | None = None
    with trio.CancelScope() as abandon:
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_watch_for_close, stream.socket, abandon)
                try:
                    result = await dispatcher.handle(frame, info)
                except Exception as exc:  # noqa: BLE001 - re-raised below, outside the nursery
                    # Raised here it would reach the caller wrapped in an ExceptionGroup.
                    error = exc
                nursery.cancel_scope.cancel()
        except BaseException:
            # Cancelled (the broker stopping) after the answer was built: its file slices hold
            # pinned descriptors of a broker-wide budget, given back here or never.
            if isinstance(result, list):
                close_parts(result)
            raise
    if error is not None:
        raise error
    if abandon.cancelled_caught:
        if isinstance(result, list):
            close_parts(result)
        raise _PeerGone
    return result


async def _watch_for_close(sock: trio.socket.SocketType, abandon: trio.CancelScope) -> None:
    """Cancel ``abandon`` when the peer closes or resets the connection.

    The connection is muted while a request is in flight, so nothing else reads: a readable
    socket means either end of stream, a reset, or the peer's next request already on its way.
    Peeking tells them apart without taking any bytes. A peer with a request queued behind the
    poll may still close before the poll ends, and the socket then stays readable without the
    end of stream being visible behind the queued bytes; the kernel's TCP state says it (the
    peer's FIN turns ours into CLOSE_WAIT, a reset into CLOSE), so it is asked twice a second.
    """
    await trio.lowlevel.wait_readable(sock)
    try:
        peeked = await sock.recv(1, socket.MSG_PEEK)
    except OSError:
        peeked = b""  # reset
    if not peeked:
        abandon.cancel()
        return
    if not hasattr(socket, "TCP_INFO"):
        await trio.sleep_forever()
    while True:
        await trio.sleep(_PEER_STATE_CHECK_S)
        if _peer_has_closed(sock):
            abandon.cancel()
            return


# How often a long poll with a request queued behind it asks whether its peer went away.
_PEER_STATE_CHECK_S = 0.5
_TCP_CLOSE, _TCP_CLOSE_WAIT = 7, 8  # tcpi_state values (include/net/tcp_states.h)


def _peer_has_closed(sock: trio.socket.SocketType) -> bool:
    """Whether the peer has closed or reset the connection, from the first byte of tcp_info."""
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)
    except OSError:
        return True  # the socket is gone
    return bool(info) and info[0] in (_TCP_CLOSE, _TCP_CLOSE_WAIT)


async def _send_spliced(stream: trio.abc.Stream, parts: list[bytearray | Splice], use_sendfile: bool,
                        responses: ResponseMemoryPool | None, stall_timeout_s: float) -> None:
    """Send a response of bytes and file slices; its bytes parts count against ``responses``."""
    taken = 0
    try:
        if responses is not None:
            taken = await responses.reserve(sum(len(p) for p in parts if isinstance(p, bytearray)))
        await send_parts(stream, parts, use_sendfile=use_sendfile, pool=responses,
                         stall_timeout_s=stall_timeout_s)
    finally:
        close_parts(parts)  # already closed if send_parts ran; not if the reservation was cancelled
        if responses is not None and taken:
            responses.release(taken)


def _seconds(value: float) -> str:
    return f"{value:g}" if math.isfinite(value) else "inf"
