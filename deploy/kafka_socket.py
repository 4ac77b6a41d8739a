"""Kafka requests by hand over a plain blocking socket: the one way tools, tests and benchmarks
that are not a client talk to a broker.

The fuzzer's probes, the tests that attack a broker (pipelined, half-sent, never-read or
malformed requests) and anything that asks for what no client library exposes build their
frames here: the header from the API table, the body from the generated messages; answers are
read back whole and decoded. Every failure of the connection is an OSError: ConnectionError
when the broker closes it before answering or answers another request, TimeoutError when the
socket's timeout passes. `read_frame_or_none` and `exchange` answer None for a closed
connection instead, for callers that expect the broker to close it.

A socket with a timeout waits for data even on `recv(..., MSG_DONTWAIT)`: a caller that peeks
without blocking connects with `timeout_s=None`.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

from broker.address import parse_host_port
from broker.protocol.api import API_SPECS
from broker.protocol.headers import RequestHeader, encode_request_header
from broker.protocol.primitives import Reader

__all__ = ["ask", "call", "connect", "decode_response", "exchange", "message_frame", "read_frame", "read_frame_or_none",
           "request_frame"]

CLIENT_ID = "test"
_CHUNK = 1 << 20  # the most one recv asks for: a 100 MB answer is not one 100 MB buffer


def connect(address: str | tuple[str, int], *, timeout_s: float | None = 60.0,
            rcvbuf: int | None = None) -> socket.socket:
    """A connection to `address` (HOST:PORT, or a (host, port) pair); `rcvbuf` sets SO_RCVBUF
    before connecting, so a client that never reads advertises a small window from the start."""
    if isinstance(address, str):
        address = parse_host_port(address)
    if rcvbuf is None:
        return socket.create_connection(address, timeout=timeout_s)
    sock = socket.socket(socket.AF_INET6 if ":" in address[0] else socket.AF_INET)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.settimeout(timeout_s)
        sock.connect(address)
    except BaseException:
        sock.close()
        raise
    return sock


def request_frame(api_key: int, version: int, body: bytes, correlation_id: int = 1, *,
                  client_id: str | None = CLIENT_ID) -> bytes:
    """A whole request frame: size, header, `body`. The header has the version the API table gives
    for `api_key` at `version`, or v1 for a key or version the broker does not know (as clients
    send before they know the broker's versions)."""
    spec = API_SPECS.get(api_key)
    header_version = 1
    if spec is not None and spec.min_version <= version <= spec.max_version:
        header_version = spec.request_header_version(version)
    payload = encode_request_header(RequestHeader(api_key, version, correlation_id, client_id), header_version) + body
    return struct.pack(">i", len(payload)) + payload


def message_frame(message: Any, version: int, correlation_id: int = 1, *, client_id: str | None = CLIENT_ID) -> bytes:
    """`request_frame` of a generated request message encoded at `version`."""
    return request_frame(message.API_KEY, version, bytes(message.encode(version)), correlation_id,
                         client_id=client_id)


def _exactly(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), _CHUNK))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def read_frame_or_none(sock: socket.socket) -> bytes | None:
    """The next response frame without its size prefix (correlation id, header, body), or None
    when the broker closes the connection first."""
    size = _exactly(sock, 4)
    if size is None:
        return None
    return _exactly(sock, struct.unpack(">i", size)[0])


def read_frame(sock: socket.socket) -> bytes:
    """`read_frame_or_none`; ConnectionError when the broker closed the connection."""
    frame = read_frame_or_none(sock)
    if frame is None:
        raise ConnectionError("the broker closed the connection")
    return frame


def decode_response(frame: bytes, api_key: int, version: int, correlation_id: int) -> Any:
    """The response message in `frame` (as `read_frame` returns it), once it is seen to answer
    `correlation_id` (ConnectionError if not); the tagged fields of a flexible response header
    are skipped. An answer that does not decode raises ProtocolError."""
    spec = API_SPECS[api_key]
    r = Reader(frame)
    answered = r.int32()
    if answered != correlation_id:
        raise ConnectionError(f"the answer carries correlation id {answered}, not {correlation_id}")
    if spec.response_header_version(version) >= 1:
        r.skip_tagged_fields()
    return spec.response.decode_from(r, version)


def exchange(sock: socket.socket, message: Any, version: int, correlation_id: int = 1, *,
             client_id: str | None = CLIENT_ID) -> Any | None:
    """Send `message` at `version` and return the decoded answer; None when the broker closes
    the connection instead of answering."""
    sock.sendall(message_frame(message, version, correlation_id, client_id=client_id))
    frame = read_frame_or_none(sock)
    return None if frame is None else decode_response(frame, message.API_KEY, version, correlation_id)


def call(sock: socket.socket, message: Any, version: int, correlation_id: int = 1, *,
         client_id: str | None = CLIENT_ID) -> Any:
    """`exchange`; ConnectionError when the broker closed the connection."""
    answer = exchange(sock, message, version, correlation_id, client_id=client_id)
    if answer is None:
        raise ConnectionError("the broker closed the connection")
    return answer


def ask(address: str | tuple[str, int], message: Any, version: int, *, correlation_id: int = 1,
        timeout_s: float = 60.0, client_id: str | None = CLIENT_ID) -> Any:
    """`call` on a new connection of its own, closed once the answer is in."""
    with connect(address, timeout_s=timeout_s) as sock:
        return call(sock, message, version, correlation_id, client_id=client_id)
