from __future__ import annotations

import struct

import pytest

from broker.protocol.api import API_SPECS, ApiKey
from broker.protocol.errors import ProtocolError
from broker.protocol.headers import (
    RequestHeader,
    decode_request_header,
    encode_request_header,
    encode_response_frame,
    start_response,
)
from broker.protocol.primitives import Writer


@pytest.mark.parametrize(
    ("key", "version", "header_version"),
    [
        (ApiKey.METADATA, 8, 1),
        (ApiKey.METADATA, 9, 2),
        (ApiKey.PRODUCE, 9, 2),
        (ApiKey.API_VERSIONS, 3, 2),
    ],
)
def test_header_round_trip(key: ApiKey, version: int, header_version: int) -> None:
    assert API_SPECS[key].request_header_version(version) == header_version
    header = RequestHeader(key, version, 42, "rdkafka")
    frame = encode_request_header(header, header_version) + b"BODY"
    decoded, offset = decode_request_header(memoryview(frame))
    assert decoded == header
    assert frame[offset:] == b"BODY"


def test_unknown_version_is_read_as_v1_so_the_correlation_id_survives() -> None:
    frame = encode_request_header(RequestHeader(ApiKey.API_VERSIONS, 99, 7, "new-client"), 1)
    header, _ = decode_request_header(frame)
    assert (header.api_version, header.correlation_id, header.client_id) == (99, 7, "new-client")


def test_truncated_header_raises() -> None:
    with pytest.raises(ProtocolError):
        decode_request_header(b"\x00\x03\x00")


def test_api_versions_always_answers_with_header_v0() -> None:
    assert API_SPECS[ApiKey.API_VERSIONS].response_header_version(3) == 0
    assert API_SPECS[ApiKey.METADATA].response_header_version(12) == 1


def test_response_frame_layout() -> None:
    frame = encode_response_frame(5, 1, b"xy")
    assert frame == struct.pack(">ii", 7, 5) + b"\x00xy"


def test_encode_response_matches_header_plus_body() -> None:
    from broker.protocol.headers import encode_response
    from broker.protocol.messages import MetadataResponse

    message = MetadataResponse(cluster_id="c", controller_id=0)
    for header_version, version in ((0, 5), (1, 12)):
        expected = encode_response_frame(3, header_version, message.encode(version))
        assert encode_response(3, header_version, message, version) == expected


@pytest.mark.parametrize(("header_version", "expected"), [
    (0, b"\0\0\0\0" + struct.pack(">i", 7)),
    (1, b"\0\0\0\0" + struct.pack(">i", 7) + b"\0"),
])
def test_start_response_writes_a_size_to_patch_then_the_header(header_version: int, expected: bytes) -> None:
    w = Writer()
    start_response(w, 7, header_version)
    assert bytes(w.getvalue()) == expected
