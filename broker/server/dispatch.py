"""Route each request frame to its handler and encode the answer.

The supported version range of each API is declared next to its handler (see
``broker.server.handlers``); ApiVersions reports exactly those ranges (an answer built once,
with that table), so clients negotiate only what the handlers implement.
"""

from __future__ import annotations

import logging
from typing import cast

from broker.protocol.api import API_SPECS, ApiKey
from broker.protocol.errors import ProtocolError
from broker.protocol.headers import decode_request_header, encode_response
from broker.protocol.messages import FetchResponse
from broker.protocol.spliced import Splice, encode_response_parts
from broker.server.context import BrokerServices, ConnectionInfo, RequestContext
from broker.server.handlers import ANSWER, HANDLERS
from broker.server.handlers.fetch import close_slices

__all__ = ["Dispatcher", "Response"]

# An encoded response: one buffer, or (for fetch) bytes with file slices between them.
Response = bytearray | list[bytearray | Splice]

log = logging.getLogger(__name__)


class Dispatcher:
    def __init__(self, services: BrokerServices) -> None:
        self._services = services

    async def handle(self, frame: memoryview, connection: ConnectionInfo) -> Response | None:
        """Answer one request frame; None when the request wants no answer (acks=0 produce).

        A fetch is answered as a list of parts: bytes, and the file slices of its record sets
        between them (their descriptors are the caller's to close: ``sending.close_parts``).

        Raises ProtocolError when the frame cannot be parsed or names an API or version this
        broker does not serve (the connection is then closed, as Kafka does), except for
        ApiVersions, which is always answered so that a client can learn what to use.
        """
        header, body_offset = decode_request_header(frame)
        handler = HANDLERS.get(header.api_key)
        if handler is None:
            raise ProtocolError(f"unsupported API key {header.api_key}")
        if not handler.min_version <= header.api_version <= handler.max_version:
            if header.api_key == ApiKey.API_VERSIONS:
                return self._unsupported_api_versions(header.correlation_id)
            raise ProtocolError(
                f"unsupported version {header.api_version} of {ApiKey(header.api_key).name}"
            )
        spec = API_SPECS[header.api_key]
        request = spec.request.decode(frame[body_offset:], header.api_version)
        context = RequestContext(self._services, header, connection)
        response = await handler.handle(context, request)
        if response is None:
            return None
        header_version = spec.response_header_version(header.api_version)
        if header.api_key == ApiKey.FETCH:
            # Record data stays in the segment files: the answer is bytes with file slices
            # between them, which the connection sends (sendfile where it can).
            try:
                return encode_response_parts(header.correlation_id, header_version, response,
                                             header.api_version)
            except BaseException:
                close_slices(cast(FetchResponse, response))  # the fetch handler's answer
                raise
        return encode_response(header.correlation_id, header_version, response, header.api_version)

    def _unsupported_api_versions(self, correlation_id: int) -> bytearray:
        # KIP-511: answered as v0 (header and body), whatever version was asked for.
        return encode_response(correlation_id, 0, ANSWER.unsupported_version, 0)
