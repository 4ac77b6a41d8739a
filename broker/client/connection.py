"""One connection to one broker: many requests in flight, answers matched in order.

Kafka answers the requests of one connection in the order they were sent, so the connection
keeps a FIFO of outstanding requests and checks each answer's correlation id against its head.
A reader task, in a nursery the connection owns, takes frames off the socket and hands each to
the request waiting for it; decoding happens in the requesting task, so an answer nobody waits
for any more (its caller was cancelled) costs nothing but the read.

On connect the client asks for the broker's API versions (ApiVersions v3, falling back to v0
for brokers that predate KIP-511) and afterwards sends each API at the highest version both
sides implement, optionally capped by the caller.

Deadlines: a request takes no timeout argument. It is bounded by the caller's cancel scope
(`trio.fail_after`) and by the connection's request timeout (Kafka's request.timeout.ms) plus
the time the request itself asks the broker to wait (a Fetch's max_wait_ms, a timeout_ms,
JoinGroup's rebalance_timeout_ms), whichever ends first; either way a request that gets no
answer in time raises `RequestTimeout` naming the API and the broker (see `deadline`).

Failure model: any transport error, a malformed answer or a request that gets no answer within
its timeout closes the whole connection and fails every request in flight with
`ConnectionFailed` (or its subclass `RequestTimeout`). A request whose outcome is unknown is
never silently resent here; the cluster layer decides what is safe to retry.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any

import trio

from broker.address import format_host_port
from broker.client.deadline import timeout_error
from broker.protocol.api import API_SPECS, ApiKey, ApiSpec
from broker.protocol.errors import ErrorCode, KafkaError, ProtocolError
from broker.protocol.frames import NEED_DATA, FrameReader
from broker.protocol.headers import RequestHeader, encode_request_header
from broker.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from broker.protocol.primitives import Reader
from broker.protocol.schema import Message

if TYPE_CHECKING:
    # For type hints only (importing it would load TLS and SCRAM into every client): callers below
    # broker/client (a broker's fetchers and controller) name the type of `security` from here.
    from security.client import ClientSecurity, SaslLogin

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "BrokerConnection",
    "ClientSecurity",
    "ClientError",
    "ConnectionFailed",
    "Message",
    "check_error",
    "RequestTimeout",
    "open_connection",
    "pick_version",
    "unwrap_single_exception",
]

DEFAULT_MAX_FRAME_SIZE = 256 * 1024 * 1024  # a fetch answer may carry up to fetch.max.bytes and more
CLIENT_SOFTWARE_NAME = "causeway"
CLIENT_SOFTWARE_VERSION = "0.1.0"
_RECEIVE_SIZE = 256 * 1024
_API_VERSIONS_FIRST = 3  # the version a client sends first (KIP-511 made v3 the usual opener)
_INT32_MAX = 2**31 - 1


class ClientError(Exception):
    """A failure of the client itself (not a Kafka error code from the broker)."""


class ConnectionFailed(ClientError):
    """The connection could not be made, was lost, or was closed; requests in flight on it
    have an unknown outcome."""

    #: Kafka's code for a partition whose request failed this way.
    error_code = ErrorCode.NETWORK_EXCEPTION


class RequestTimeout(ConnectionFailed):
    """No answer before the deadline (the caller's, or the request or connect timeout): how the
    client reports every deadline that passes, never a bare trio.TooSlowError. A connection
    whose request got no answer was closed, because the broker's answers to later requests
    could no longer be trusted to arrive."""

    error_code = ErrorCode.REQUEST_TIMED_OUT


def pick_version(
    ours: tuple[int, int], theirs: tuple[int, int] | None, cap: int | None = None
) -> int | None:
    """The highest version in both ranges (inclusive) and at most `cap`; None when there is none.

    `theirs` None means the broker did not list the API at all.
    """
    if theirs is None:
        return None
    low = max(ours[0], theirs[0])
    high = min(ours[1], theirs[1])
    if cap is not None:
        high = min(high, cap)
    return high if high >= low else None


def check_error(code: int, context: str, message: str | None = None) -> None:
    """Raise KafkaError for a non-zero Kafka error code; `context` says what failed.

    A code this client does not know becomes UNKNOWN_SERVER_ERROR with the number in the text.
    """
    if code == ErrorCode.NONE:
        return
    raise KafkaError(ErrorCode(code), f"{context}: {message}" if message else context)


# Fields by which a request asks the broker to hold it before answering (a Fetch's long poll,
# an acks=all produce's or a topic change's wait, a JoinGroup's rebalance): the answer may come
# that much later than usual, so the request's own bound grows by it, as Kafka's clients do.
_WAIT_FIELDS = ("max_wait_ms", "timeout_ms", "rebalance_timeout_ms")


def _broker_wait_s(msg: Message) -> float:
    return max(0, *(getattr(msg, name, 0) or 0 for name in _WAIT_FIELDS)) / 1000


class _Pending:
    """One request waiting for its answer."""

    __slots__ = ("correlation_id", "done", "error", "frame")

    def __init__(self, correlation_id: int) -> None:
        self.correlation_id = correlation_id
        self.done = trio.Event()
        self.frame: memoryview | None = None
        self.error: ConnectionFailed | None = None


class BrokerConnection:
    """A negotiated connection to one broker. Build it with `open_connection`.

    Safe to use from many tasks at once; requests are pipelined.
    """

    def __init__(
        self,
        stream: trio.abc.Stream,
        *,
        address: str,
        client_id: str | None,
        request_timeout_s: float,
        max_frame_size: int,
        version_caps: Mapping[int, int] | None,
    ) -> None:
        self.address = address
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        # api key -> (min, max) as the broker reported them; filled by the handshake
        self.broker_versions: dict[int, tuple[int, int]] = {}
        self._stream = stream
        self._version_caps = dict(version_caps or {})
        self._frames = FrameReader(max_frame_size)
        self._send_lock = trio.Lock()
        self._pending: deque[_Pending] = deque()
        self._next_correlation_id = 0
        self._error: ConnectionFailed | None = None
        self._closed = trio.Event()
        self._reader_scope = trio.CancelScope()

    # -- public -------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once the connection has failed or been closed; it never reopens."""
        return self._error is not None

    @property
    def in_flight(self) -> int:
        """Requests sent whose answer has not arrived yet."""
        return len(self._pending)

    def version_for(self, api_key: int, max_version: int | None = None) -> int:
        """The version to use for `api_key`: the highest both sides implement, capped by
        `max_version` and by the connection's caps.

        Raises KafkaError(UNSUPPORTED_VERSION) when there is no common version.
        """
        spec = API_SPECS[api_key]
        caps = [c for c in (max_version, self._version_caps.get(api_key)) if c is not None]
        version = pick_version(
            (spec.min_version, spec.max_version), self.broker_versions.get(api_key), min(caps) if caps else None
        )
        if version is None:
            theirs = self.broker_versions.get(api_key)
            raise KafkaError(
                ErrorCode.UNSUPPORTED_VERSION,
                f"{spec.name}: broker {self.address} supports {theirs or 'no version'}, "
                f"client {spec.min_version}..{spec.max_version}"
                + (f" capped at {min(caps)}" if caps else ""),
            )
        return version

    async def request(self, msg: Message, *, max_version: int | None = None, version: int | None = None) -> Any:
        """Send `msg` and return the decoded response (the matching generated class).

        The version is negotiated (see `version_for`) unless `version` is given. A
        ProduceRequest with acks=0 gets no answer from Kafka: it returns None once sent.

        Raises ConnectionFailed when the connection is or becomes unusable, RequestTimeout
        when no answer came by the caller's deadline or within the connection's request
        timeout (plus the wait the request asks for), and KafkaError(UNSUPPORTED_VERSION) when
        no version is common. Error codes inside the response are the caller's to read. If the
        calling task is cancelled otherwise (not by a deadline) while waiting, the answer is
        read and dropped and the connection stays usable.
        """
        api_key = msg.API_KEY
        spec = API_SPECS[api_key]
        if version is None:
            version = self.version_for(api_key, max_version)
        body = await self._roundtrip(msg, spec, version)
        return None if body is None else self._decode(spec, version, body)

    async def _roundtrip(self, msg: Message, spec: ApiSpec, version: int) -> memoryview | None:
        """Send `msg` at `version`; the response body (after its header), or None for acks=0."""
        expects_response = not (spec.api_key == ApiKey.PRODUCE and getattr(msg, "acks", -1) == 0)

        def no_answer(seconds: float) -> RequestTimeout:
            # The broker's answers to later requests can no longer be trusted to arrive.
            error = RequestTimeout(f"{spec.name} v{version} to {self.address}: no answer within {seconds:.3g}s")
            self._fail(error)
            return error

        with timeout_error(no_answer, at_most_s=self.request_timeout_s + _broker_wait_s(msg)):
            pending = await self._send(msg, spec, version, expects_response)
            if pending is None:
                return None
            await pending.done.wait()
        assert pending is not None
        if pending.error is not None:
            raise pending.error
        assert pending.frame is not None
        frame = pending.frame
        try:
            r = Reader(frame)
            r.int32()  # correlation id, already matched by the reader task
            if spec.response_header_version(version) >= 1:
                r.skip_tagged_fields()
        except ProtocolError as exc:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"bad {spec.name} answer header: {exc}") from exc
        return frame[r.pos :]

    def close(self) -> None:
        """Close the connection; requests in flight fail with ConnectionFailed. Idempotent."""
        self._fail(ConnectionFailed(f"connection to {self.address} closed by the client"))

    async def wait_closed(self) -> None:
        """Return once the connection has failed or been closed."""
        await self._closed.wait()

    # -- internals ------------------------------------------------------------------------

    async def _send(self, msg: Message, spec: ApiSpec, version: int, expects_response: bool) -> _Pending | None:
        header_version = spec.request_header_version(version)
        async with self._send_lock:
            if self._error is not None:
                raise self._error
            correlation_id = self._next_correlation_id
            self._next_correlation_id = (correlation_id + 1) & _INT32_MAX
            header = RequestHeader(spec.api_key, version, correlation_id, self.client_id)
            body = msg.encode(version)
            head = encode_request_header(header, header_version)
            frame = bytearray((len(head) + len(body)).to_bytes(4, "big"))
            frame += head
            frame += body
            pending = _Pending(correlation_id) if expects_response else None
            if pending is not None:
                # Queued before sending: the answer may arrive before send_all returns.
                self._pending.append(pending)
            try:
                await self._stream.send_all(frame)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                error = self._error or ConnectionFailed(f"send to {self.address} failed: {exc!r}")
                self._fail(error)
                raise error from exc
            except BaseException:
                # Cancelled mid-send: part of the frame may be on the wire, so the byte stream
                # is no longer aligned on frames. Nothing can be sent on it any more.
                self._fail(ConnectionFailed(f"send to {self.address} interrupted; connection closed"))
                raise
            return pending

    def _decode(self, spec: ApiSpec, version: int, body: memoryview) -> Any:
        try:
            return spec.response.decode(body, version)
        except ProtocolError as exc:
            # The framing is intact, so the connection survives a body we cannot parse.
            raise KafkaError(
                ErrorCode.CORRUPT_MESSAGE, f"undecodable {spec.name} v{version} answer from {self.address}: {exc}"
            ) from exc

    def _fail(self, error: ConnectionFailed) -> None:
        if self._error is not None:
            return
        self._error = error
        while self._pending:
            pending = self._pending.popleft()
            pending.error = error
            pending.done.set()
        self._reader_scope.cancel()
        self._closed.set()

    def _deliver(self, frame: memoryview) -> None:
        if len(frame) < 4:
            raise ProtocolError(f"response frame of {len(frame)} bytes has no correlation id")
        correlation_id = int.from_bytes(frame[:4], "big", signed=True)
        if not self._pending:
            raise ProtocolError(f"answer with correlation id {correlation_id} to no request")
        head = self._pending[0]
        if head.correlation_id != correlation_id:
            raise ProtocolError(f"answer with correlation id {correlation_id}, expected {head.correlation_id}")
        self._pending.popleft()
        head.frame = frame
        head.done.set()

    async def _read_loop(self) -> None:
        # The reader lives as long as the connection and is ended only by closing it (which
        # `open_connection` does on exit): the deadline of the task that opened the connection
        # must not cancel it, nor add its Cancelled to the handshake's RequestTimeout.
        with trio.CancelScope(shield=True):
            with self._reader_scope:
                try:
                    while True:
                        data = await self._stream.receive_some(_RECEIVE_SIZE)
                        if not data:
                            self._fail(ConnectionFailed(f"connection to {self.address} closed by the broker"))
                            break
                        self._frames.feed(data)
                        while (frame := self._frames.next_frame()) is not NEED_DATA:
                            self._deliver(frame)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                    self._fail(ConnectionFailed(f"connection to {self.address} lost: {exc!r}"))
                except ProtocolError as exc:
                    self._fail(ConnectionFailed(f"bad answer from {self.address}: {exc}"))
            self._fail(ConnectionFailed(f"connection to {self.address} closed"))
            await trio.aclose_forcefully(self._stream)

    async def _negotiate_versions(self) -> None:
        """Ask for the broker's versions with ApiVersions v3. A broker that does not know v3
        answers error 35 in a v0 body listing its versions (KIP-511); ask again with the highest
        ApiVersions version it lists (v0 when the list is empty)."""
        spec = API_SPECS[ApiKey.API_VERSIONS]
        request = ApiVersionsRequest(
            client_software_name=CLIENT_SOFTWARE_NAME, client_software_version=CLIENT_SOFTWARE_VERSION
        )
        version = _API_VERSIONS_FIRST
        body = await self._roundtrip(request, spec, version)
        assert body is not None
        if len(body) >= 2 and int.from_bytes(body[:2], "big", signed=True) == ErrorCode.UNSUPPORTED_VERSION:
            listed: ApiVersionsResponse = self._decode(spec, 0, body)
            theirs = {k.api_key: (k.min_version, k.max_version) for k in listed.api_keys}
            version = pick_version((0, _API_VERSIONS_FIRST - 1), theirs.get(ApiKey.API_VERSIONS)) or 0
            body = await self._roundtrip(request, spec, version)
            assert body is not None
        response: ApiVersionsResponse = self._decode(spec, version, body)
        check_error(response.error_code, f"ApiVersions v{version} to {self.address}")
        self.broker_versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}

    async def _authenticate(self, login: SaslLogin) -> None:
        """Log in with SASL before any other request (a SASL listener closes the connection on
        anything else): SaslHandshake v1, then the mechanism's tokens in SaslAuthenticate.

        Raises KafkaError (SASL_AUTHENTICATION_FAILED with the broker's message,
        UNSUPPORTED_SASL_MECHANISM naming what the broker offers)."""
        handshake: SaslHandshakeResponse = await self.request(SaslHandshakeRequest(mechanism=login.mechanism),
                                                              version=1)
        if handshake.error_code != ErrorCode.NONE:
            raise KafkaError(ErrorCode(handshake.error_code), f"{self.address} offers SASL mechanisms "
                             f"{', '.join(handshake.mechanisms) or 'none'}, not {login.mechanism}")
        exchange = login.exchange()
        token: bytes | None = exchange.first()
        while token is not None:
            answer: SaslAuthenticateResponse = await self.request(SaslAuthenticateRequest(auth_bytes=token))
            check_error(answer.error_code, f"SASL {login.mechanism} login as {login.username!r} to {self.address}",
                        answer.error_message)
            token = exchange.respond(answer.auth_bytes)  # KafkaError when the broker's answer does not verify


async def _tls(stream: trio.SocketStream, security: ClientSecurity, host: str, timeout_s: float) -> trio.abc.Stream:
    """The client side of a TLS handshake over `stream`, within `timeout_s`; the broker's name
    is checked against its certificate unless ssl.endpoint.identification.algorithm is empty."""
    assert security.ssl_context is not None
    tls = trio.SSLStream(stream, security.ssl_context, server_hostname=host)
    try:
        with timeout_error(lambda s: RequestTimeout(f"TLS handshake with {host}: no answer within {s:.3g}s"),
                           at_most_s=timeout_s):
            await tls.do_handshake()
    except trio.BrokenResourceError as exc:
        await trio.aclose_forcefully(stream)
        cause = exc.__cause__
        reason = getattr(cause, "verify_message", None) or getattr(cause, "reason", None) or str(cause or exc)
        raise ConnectionFailed(f"TLS handshake with {host} failed: {reason}") from exc
    except BaseException:
        await trio.aclose_forcefully(stream)
        raise
    return tls


async def _connect(host: str, port: int, connect_timeout_s: float) -> trio.SocketStream:
    address = format_host_port(host, port)

    def no_answer(seconds: float) -> RequestTimeout:
        return RequestTimeout(f"connect to {address}: no answer within {seconds:.3g}s")

    try:
        with timeout_error(no_answer, at_most_s=connect_timeout_s):
            return await trio.open_tcp_stream(host, port)
    except OSError as exc:
        raise ConnectionFailed(f"connect to {address} failed: {exc}") from exc


@contextmanager
def unwrap_single_exception() -> Iterator[None]:
    """Re-raise the only exception of an ExceptionGroup as itself.

    A context manager that runs a private nursery would otherwise hand its caller every
    exception (even one raised in the caller's own `async with` body) wrapped in a group; the
    background tasks here never raise, so a group of one is the caller's exception.
    """
    try:
        yield
    except BaseExceptionGroup as group:
        if len(group.exceptions) != 1:
            raise
        exc = group.exceptions[0]
        context = exc.__context__
        try:
            raise exc
        finally:
            exc.__context__ = context
            del exc, group


@asynccontextmanager
async def open_connection(
    host: str,
    port: int,
    *,
    client_id: str | None = "causeway",
    request_timeout_s: float = 30.0,
    connect_timeout_s: float | None = None,
    version_caps: Mapping[int, int] | None = None,
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    security: ClientSecurity | None = None,
) -> AsyncIterator[BrokerConnection]:
    """Connect to one broker, negotiate API versions, and close the connection on exit.

    `security` (``security.client.client_security``): TLS around the connection, then a SASL
    login, as its ``security.protocol`` says; None is PLAINTEXT.

    `version_caps` maps API keys to the highest version to use (e.g. {ApiKey.FETCH: 12}).
    `connect_timeout_s` bounds the TCP connect (default: the request timeout); the version
    handshake is bounded by the request timeout.

    Raises ConnectionFailed if the connection cannot be made, RequestTimeout if the connect or
    the ApiVersions handshake gets no answer in time, KafkaError if the broker refuses it.
    """
    connect_timeout = request_timeout_s if connect_timeout_s is None else connect_timeout_s
    tcp = await _connect(host, port, connect_timeout)
    stream: trio.abc.Stream = tcp
    if security is not None and security.ssl_context is not None:
        stream = await _tls(tcp, security, host, connect_timeout)
    with unwrap_single_exception():
        async with trio.open_nursery() as nursery:
            conn = BrokerConnection(
                stream,
                address=format_host_port(host, port),
                client_id=client_id,
                request_timeout_s=request_timeout_s,
                max_frame_size=max_frame_size,
                version_caps=version_caps,
            )
            nursery.start_soon(conn._read_loop)
            try:
                await conn._negotiate_versions()
                if security is not None and security.sasl is not None:
                    await conn._authenticate(security.sasl)
                yield conn
            finally:
                conn.close()

