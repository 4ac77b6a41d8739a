"""The SASL exchange that opens every connection on a SASL listener, as Kafka's
SaslServerAuthenticator runs it before any request reaches the handlers.

Until the client has authenticated, a connection may send only ApiVersions and SaslHandshake, then
the mechanism's tokens: in SaslAuthenticate requests after a v1 handshake, or as bare size-
prefixed frames after a v0 one (the framing Kafka's clients used before KIP-152). Anything else
closes the connection, as in Kafka. A failed authentication is answered at once with
SASL_AUTHENTICATION_FAILED and Kafka's message, and the connection is closed
``connection.failed.authentication.delay.ms`` later (as Kafka delays the close, not the answer):
password guessing costs a connection and a delay per guess, and the client reads why it was
refused before the close (closing at once, with the client's next bytes unread, can reset the
connection and lose the answer on the way).
What a client may send before it authenticates is bounded by ``sasl.server.max.receive.size``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from broker.protocol.api import API_SPECS, ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.headers import decode_request_header, encode_response
from broker.protocol.messages import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from broker.protocol.schema import Message
from security.sasl import MechanismServer, SaslAuthenticationFailed

__all__ = ["Authenticated", "Close", "Dispatch", "SaslAuthenticator", "Step"]


class _State(enum.Enum):
    HANDSHAKE = "handshake"  # ApiVersions or SaslHandshake expected
    AUTHENTICATE = "authenticate"  # SaslAuthenticate requests (after a v1 handshake)
    RAW_TOKENS = "raw tokens"  # bare tokens (after a v0 handshake)
    DONE = "done"


@dataclass(frozen=True)
class Dispatch:
    """Hand the frame to the dispatcher as usual (ApiVersions during the handshake)."""


@dataclass(frozen=True)
class Answer:
    """Send `frame` (a whole response, size prefix included) and read the next request."""

    frame: bytearray


@dataclass(frozen=True)
class Authenticated:
    """Send `frame`; the connection now belongs to `principal` and its requests go to the handlers."""

    frame: bytearray
    principal: str


@dataclass(frozen=True)
class Close:
    """Send `frame` (when there is one), then close the connection, `linger_s` later (what the
    client sends meanwhile is read and dropped); `reason` is for the log."""

    frame: bytearray | None
    reason: str
    linger_s: float = 0.0


Step = Dispatch | Answer | Authenticated | Close


def _respond(correlation_id: int, api_key: ApiKey, version: int, message: Message) -> bytearray:
    header_version = API_SPECS[api_key].response_header_version(version)
    return encode_response(correlation_id, header_version, message, version)


class SaslAuthenticator:
    """One connection's authentication, frame by frame (:meth:`step`)."""

    def __init__(self, mechanisms: Mapping[str, Callable[[], MechanismServer]], failed_delay_s: float) -> None:
        self._mechanisms = mechanisms
        self._failed_delay_s = failed_delay_s
        self._state = _State.HANDSHAKE
        self._server: MechanismServer | None = None

    @property
    def done(self) -> bool:
        return self._state is _State.DONE

    async def step(self, frame: memoryview) -> Step:
        if self._state is _State.RAW_TOKENS:
            return await self._raw_token(bytes(frame))
        header, body_offset = decode_request_header(frame)  # ProtocolError: the caller closes
        api_key, version = header.api_key, header.api_version
        if self._state is _State.HANDSHAKE and api_key == ApiKey.API_VERSIONS:
            return Dispatch()
        if self._state is _State.HANDSHAKE and api_key == ApiKey.SASL_HANDSHAKE and version in (0, 1):
            handshake = SaslHandshakeRequest.decode(frame[body_offset:], version)
            enabled = list(self._mechanisms)
            factory = self._mechanisms.get(handshake.mechanism)
            if factory is None:
                response = SaslHandshakeResponse(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=enabled)
                return Close(_respond(header.correlation_id, ApiKey.SASL_HANDSHAKE, version, response),
                             f"unsupported SASL mechanism {handshake.mechanism[:64]!r}")
            self._server = factory()
            self._state = _State.AUTHENTICATE if version == 1 else _State.RAW_TOKENS
            response = SaslHandshakeResponse(error_code=ErrorCode.NONE, mechanisms=enabled)
            return Answer(_respond(header.correlation_id, ApiKey.SASL_HANDSHAKE, version, response))
        if self._state is _State.AUTHENTICATE and api_key == ApiKey.SASL_AUTHENTICATE and 0 <= version <= 2:
            authenticate = SaslAuthenticateRequest.decode(frame[body_offset:], version)
            return await self._authenticate(header.correlation_id, version, authenticate.auth_bytes)
        try:
            name = ApiKey(api_key).name
        except ValueError:
            name = f"api key {api_key}"
        return Close(None, f"unexpected request {name} v{version} during SASL {self._state.value}")

    async def _authenticate(self, correlation_id: int, version: int, token: bytes) -> Step:
        try:
            challenge = await self._evaluate(token)
        except SaslAuthenticationFailed as exc:
            response = SaslAuthenticateResponse(error_code=ErrorCode.SASL_AUTHENTICATION_FAILED,
                                                error_message=str(exc))
            return Close(_respond(correlation_id, ApiKey.SASL_AUTHENTICATE, version, response), str(exc),
                         self._failed_delay_s)
        return self._next(_respond(correlation_id, ApiKey.SASL_AUTHENTICATE, version, SaslAuthenticateResponse(
            error_code=ErrorCode.NONE, error_message=None, auth_bytes=challenge)))

    async def _raw_token(self, token: bytes) -> Step:
        # KIP-43 framing: the token is the whole frame, the challenge goes back the same way; a
        # failure can only be told by closing.
        try:
            challenge = await self._evaluate(token)
        except SaslAuthenticationFailed as exc:
            return Close(None, str(exc), self._failed_delay_s)
        return self._next(bytearray(len(challenge).to_bytes(4, "big") + challenge))

    async def _evaluate(self, token: bytes) -> bytes:
        """The mechanism's challenge. Raises SaslAuthenticationFailed."""
        assert self._server is not None
        return await self._server.evaluate(token)

    def _next(self, frame: bytearray) -> Step:
        """Send `frame`; the exchange is over once the mechanism names the principal."""
        assert self._server is not None
        principal = self._server.principal
        if principal is None:
            return Answer(frame)
        self._state = _State.DONE
        return Authenticated(frame, principal)
