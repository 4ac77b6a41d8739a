"""A small HTTP/1.1 server on trio and h11: enough for a JSON API driven by scripts.

Each connection reads requests one at a time (keep-alive supported), passes each whole request
to the handler and writes its reply with a Content-Length. Bodies are capped; a malformed
request gets a 400 and the connection is closed.
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


async def _serve_connection(stream: trio.SocketStream, handler: Handler) -> None:
    conn = h11.Connection(h11.SERVER)
    try:
        while True:
            event: object = None
            with trio.move_on_after(IDLE_TIMEOUT_SECONDS):
                event = await _next_event(conn, stream)
            if not isinstance(event, h11.Request):
                return  # idle too long, or the client closed
            try:
                body = await _read_body(conn, stream)
            except _TooLarge:
                await _send_response(conn, stream, Response(413, b'{"error": "request body too large", "status": 413}'))
                return
            request = Request(event.method.decode("ascii"), event.target.decode("ascii", "replace"), body)
            try:
                response = await handler(request)
            except Exception:
                log.exception("API handler failed on %s %s", request.method, request.target)
                response = Response(500, b'{"error": "internal error", "status": 500}')
            await _send_response(conn, stream, response)
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                return
            conn.start_next_cycle()
    except h11.RemoteProtocolError as error:
        if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            message = str(error).replace('"', "'")
            body = f'{{"error": "bad request: {message}", "status": 400}}'.encode()
            try:
                await _send_response(conn, stream, Response(400, body))
            except (trio.BrokenResourceError, h11.LocalProtocolError):
                pass
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        stream.socket.close()


async def serve_http(
    listener: trio.SocketListener, handler: Handler, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
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
                nursery.start_soon(_serve_connection, stream, handler)
    finally:
        listener.socket.close()
