"""SaslHandshake and SaslAuthenticate when they reach the handlers: on a listener without SASL, or
after the connection has authenticated. The exchange itself happens before any request reaches
the handlers (``broker/server/authenticator.py``); here, as in Kafka's KafkaApis, they can only be
in the wrong state. Listed here so that ApiVersions advertises them, as Kafka's brokers do."""

from __future__ import annotations

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from broker.server.context import RequestContext
from broker.server.handlers.base import ApiHandler


async def handshake(ctx: RequestContext, request: SaslHandshakeRequest) -> SaslHandshakeResponse:
    return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])


async def authenticate(ctx: RequestContext, request: SaslAuthenticateRequest) -> SaslAuthenticateResponse:
    message = ("SaslAuthenticate request received after successful authentication"
               if ctx.connection.security_protocol.startswith("SASL_")
               else f"listener {ctx.connection.listener_name} does not use SASL")
    return SaslAuthenticateResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, error_message=message)


HANDLERS = (
    ApiHandler(ApiKey.SASL_HANDSHAKE, 0, 1, handshake),
    ApiHandler(ApiKey.SASL_AUTHENTICATE, 0, 2, authenticate),
)
