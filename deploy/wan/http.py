"""A small HTTP/1.1 server on trio and h11: enough for a JSON API driven by scripts.

Each connection reads requests one at a time (keep-alive supported), passes each whole request
to the handler and writes its reply with a Content-Length. Bodies are capped; a malformed
request gets a 400 and the connection is closed. Time is bounded too, as in any HTTP server: a
connection may sit idle between requests for a minute, a request must arrive whole (headers and
body) within the request timeout or gets a 408 and the connection is closed, and a reply the
client does not read within the same bound is abandoned.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Final

import h11
import trio

__all__ = ["Handler", "Request", "Response", "serve_http"]

log = logging.getLogger("causeway.wan.http")

MAX_BODY: Final = 4 * 1024 * 1024
IDLE_TIMEOUT_SECONDS: Final = 60.0
#: How long one request may take to arrive once it has begun, and one reply to be taken.
REQUEST_TIMEOUT_SECONDS: Final = 30.0
RECEIVE_SIZE: Final = 64 * 1024
ACCEPT_RETRY_SECONDS: Final = 0.1


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    target: str
    body: bytes


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes = b""
    content_type: str = "application/json"


Handler = Callable[[Request], Awaitable[Response]]


class _TooLarge(Exception):
    pass


async def _next_event(conn: h11.Connection, stream: trio.SocketStream) -> object:
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        if conn.they_are_waiting_for_100_continue:
            await stream.send_all(conn.send(h11.InformationalResponse(status_code=100, headers=[])) or b"")
        conn.receive_data(await stream.receive_some(RECEIVE_SIZE))


async def _read_body(conn: h11.Connection, stream: trio.SocketStream) -> bytes:
    parts: list[bytes] = []
    size = 0
    while True:
        event = await _next_event(conn, stream)
        if isinstance(event, h11.Data):
            size += len(event.data)
            if size > MAX_BODY:
                raise _TooLarge
            parts.append(bytes(event.data))
        elif isinstance(event, h11.EndOfMessage):
            return b"".join(parts)
        else:
            raise h11.RemoteProtocolError(f"unexpected {type(event).__name__} in request body")


_TIMEOUT_BODY: Final = b'{"error": "request timeout", "status": 408}\n'
_TIMEOUT_REPLY: Final = (
    b"HTTP/1.1 408 Request Timeout\r\nserver: causeway-wan\r\ncontent-type: application/json\r\n"
    b"content-length: %d\r\nconnection: close\r\n\r\n" % len(_TIMEOUT_BODY) + _TIMEOUT_BODY
)


async def _send_response(conn: h11.Connection, stream: trio.SocketStream, response: Response) -> None:
    headers = [("server", "causeway-wan")]
    if response.status not in (204, 304):
        headers += [("content-type", response.content_type), ("content-length", str(len(response.body)))]
    reason = HTTPStatus(response.status).phrase.encode() if response.status in HTTPStatus._value2member_map_ else b""
    data = conn.send(h11.Response(status_code=response.status, headers=headers, reason=reason)) or b""
    if response.body and response.status not in (204, 304):
        data += conn.send(h11.Data(data=response.body)) or b""
    data += conn.send(h11.EndOfMessage()) or b""
    await stream.send_all(data)


async def _serve_connection(stream: trio.SocketStream, handler: Handler, request_timeout_s: float) -> None:
    conn = h11.Connection(h11.SERVER)
    try:
        while True:
            event: object = None
            # Idle between requests; the request's own deadline starts with its first bytes.
            with trio.move_on_after(IDLE_TIMEOUT_SECONDS):
                await _first_bytes(conn, stream)
            if conn.their_state is h11.IDLE and not conn.trailing_data[0]:
                return  # idle too long, or the client closed
            with trio.move_on_after(request_timeout_s) as timer:
                event = await _next_event(conn, stream)
                if isinstance(event, h11.Request):
                    try:
                        body = await _read_body(conn, stream)
                    except _TooLarge:
                        await _send_response(conn, stream, Response(
                            413, b'{"error": "request body too large", "status": 413}'))
                        return
            if timer.cancelled_caught:
                # A request that never finishes would hold this connection (and its task) forever.
                log.info("closing an API connection whose request did not arrive within %.0f s", request_timeout_s)
                with trio.move_on_after(request_timeout_s):
                    # Raw bytes: h11 has no request to answer while the headers are unfinished.
                    await stream.send_all(_TIMEOUT_REPLY)
                return
            if not isinstance(event, h11.Request):
                return  # the client closed
            request = Request(event.method.decode("ascii"), event.target.decode("ascii", "replace"), body)
            try:
                response = await handler(request)
            except Exception:
                log.exception("API handler failed on %s %s", request.method, request.target)
                response = Response(500, b'{"error": "internal error", "status": 500}')
            with trio.move_on_after(request_timeout_s) as timer:
                await _send_response(conn, stream, response)
            if timer.cancelled_caught:
                return  # a client that does not read its reply
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                return
            conn.start_next_cycle()
    except h11.RemoteProtocolError as error:
        if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            message = str(error).replace('"', "'")
            body = f'{{"error": "bad request: {message}", "status": 400}}'.encode()
            with trio.move_on_after(request_timeout_s):
                try:
                    await _send_response(conn, stream, Response(400, body))
                except (trio.BrokenResourceError, h11.LocalProtocolError):
                    pass
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        stream.socket.close()


async def _first_bytes(conn: h11.Connection, stream: trio.SocketStream) -> None:
    """Wait for the start of the next request (h11 may already hold it from the last read)."""
    if conn.trailing_data[0] or conn.their_state is not h11.IDLE:
        return
    data = await stream.receive_some(RECEIVE_SIZE)
    conn.receive_data(data)  # b"": the client closed, which h11 reports as the next event


async def serve_http(
    listener: trio.SocketListener,
    handler: Handler,
    *,
    request_timeout_s: float = REQUEST_TIMEOUT_SECONDS,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``handler`` on ``listener`` until cancelled; the listener is closed on exit.

    Errors inside one connection close that connection only; a failing accept (out of file
    descriptors) is retried after a pause.
    """
    try:
        async with trio.open_nursery() as nursery:
            task_status.started()
            while True:
                try:
                    stream = await listener.accept()
                except OSError as error:
                    log.warning("API accept failed: %s", error)
                    await trio.sleep(ACCEPT_RETRY_SECONDS)
                    continue
                nursery.start_soon(_serve_connection, stream, handler, request_timeout_s)
    finally:
        listener.socket.close()
