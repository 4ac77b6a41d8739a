"""ApiVersions through the dispatcher: the versions every handler declares, an answer built once,
KIP-511's client software check and its v0 answer to a version we do not know."""

from __future__ import annotations

import struct
from typing import cast

import pytest

from broker.protocol.api import API_SPECS, ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.headers import RequestHeader, encode_request_header
from broker.protocol.messages import ApiVersionsRequest, ApiVersionsResponse
from broker.server.context import BrokerServices, ConnectionInfo, RequestContext
from broker.server.dispatch import Dispatcher
from broker.server.handlers import HANDLERS

CONNECTION = ConnectionInfo("PLAINTEXT", "127.0.0.1:1234", "PLAINTEXT")
# ApiVersions reads nothing from the broker's parts: none are needed to answer it.
DISPATCHER = Dispatcher(cast(BrokerServices, None))


async def ask(version: int, request: ApiVersionsRequest | None = None, correlation_id: int = 7) -> ApiVersionsResponse:
    spec = API_SPECS[ApiKey.API_VERSIONS]
    known = spec.min_version <= version <= spec.max_version
    header = RequestHeader(ApiKey.API_VERSIONS, version, correlation_id, "test")
    body = bytes((request or ApiVersionsRequest()).encode(version)) if known else b""
    frame = encode_request_header(header, spec.request_header_version(version) if known else 1) + body
    reply = await DISPATCHER.handle(memoryview(frame), CONNECTION)
    assert isinstance(reply, bytearray)
    # Size, then a v0 response header (the correlation id): ApiVersions never uses a flexible one.
    assert struct.unpack(">ii", reply[:8]) == (len(reply) - 4, correlation_id)
    return ApiVersionsResponse.decode(bytes(reply[8:]), version if known else 0)


@pytest.mark.parametrize("version", range(0, 5))
async def test_lists_exactly_what_the_handlers_declare(version: int) -> None:
    client = ApiVersionsRequest(client_software_name="causeway-test", client_software_version="1.0")
    reply = await ask(version, client)
    assert reply.error_code == ErrorCode.NONE
    offered = [(k.api_key, k.min_version, k.max_version) for k in reply.api_keys]
    assert offered == sorted((key, h.min_version, h.max_version) for key, h in HANDLERS.items())
    assert (ApiKey.API_VERSIONS, 0, 4) in offered


@pytest.mark.parametrize(("name", "version"), [
    ("", "1.0"), ("librdkafka", ""), ("bad name", "1.0"), ("-leading", "1.0"), ("trailing.", "1.0"),
    ("librdkafka\n", "1.0"),  # the whole name must match (Kafka's Matcher.matches), not a prefix
])
async def test_v3_refuses_client_software_kafka_would_refuse(name: str, version: str) -> None:
    reply = await ask(3, ApiVersionsRequest(client_software_name=name, client_software_version=version))
    assert reply.error_code == ErrorCode.INVALID_REQUEST
    assert reply.api_keys, "the table still comes with the error"


async def test_before_v3_there_is_no_client_software_to_check() -> None:
    assert (await ask(2)).error_code == ErrorCode.NONE


async def test_an_unknown_version_gets_error_35_and_the_table_in_v0() -> None:
    reply = await ask(99, correlation_id=41)
    assert reply.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert [(k.api_key, k.min_version, k.max_version) for k in reply.api_keys] == [
        (key, h.min_version, h.max_version) for key, h in sorted(HANDLERS.items())
    ]


async def test_the_answer_is_built_once() -> None:
    handler = HANDLERS[ApiKey.API_VERSIONS]
    header = RequestHeader(ApiKey.API_VERSIONS, 3, 1, "test")
    ctx = RequestContext(cast(BrokerServices, None), header, CONNECTION)
    request = ApiVersionsRequest(client_software_name="a", client_software_version="1")
    first = await handler.handle(ctx, request)
    assert first is await handler.handle(ctx, request)
