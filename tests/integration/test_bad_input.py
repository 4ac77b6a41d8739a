"""Hostile and malformed requests against a real broker process: it answers or closes the
connection, keeps serving everyone else, and holds bounded memory."""

from __future__ import annotations

import struct

import pytest

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.headers import RequestHeader, encode_request_header
from broker.protocol.messages import ApiVersionsResponse, MetadataRequest, MetadataResponse
from deploy.broker_process import BrokerProcess
from deploy.child_process import rss_bytes
from deploy.kafka_socket import ask, connect, read_frame_or_none, request_frame

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def broker(module_broker: BrokerProcess) -> BrokerProcess:
    """The module's one broker (tests/conftest.py), not one per test: each test checks that it
    still serves after its hostile input, which a later test would see too."""
    return module_broker


def metadata_works(broker: BrokerProcess) -> bool:
    metadata: MetadataResponse = ask(broker.bootstrap, MetadataRequest(topics=None), 1, correlation_id=9, timeout_s=30)
    return bool(metadata.brokers)


def test_unknown_api_versions_version_gets_error_35_in_a_v0_reply(broker: BrokerProcess) -> None:
    with connect(broker.bootstrap, timeout_s=30) as sock:
        sock.sendall(request_frame(ApiKey.API_VERSIONS, 99, b"", correlation_id=77))
        frame = read_frame_or_none(sock)
    assert frame is not None
    assert struct.unpack(">i", frame[:4])[0] == 77
    reply = ApiVersionsResponse.decode(frame[4:], 0)
    assert reply.error_code == ErrorCode.UNSUPPORTED_VERSION
    keys = {k.api_key: (k.min_version, k.max_version) for k in reply.api_keys}
    assert keys[ApiKey.API_VERSIONS][0] == 0 and keys[ApiKey.PRODUCE][0] <= 3


def test_unknown_api_key_closes_only_that_connection(broker: BrokerProcess) -> None:
    with connect(broker.bootstrap, timeout_s=30) as sock:
        sock.sendall(request_frame(999, 0, b"junk"))
        assert read_frame_or_none(sock) is None
    assert metadata_works(broker)


def test_oversized_frame_is_refused_before_its_body(broker: BrokerProcess) -> None:
    with connect(broker.bootstrap, timeout_s=30) as sock:
        sock.sendall(struct.pack(">i", 2**31 - 1))
        assert read_frame_or_none(sock) is None
    assert metadata_works(broker)


# The mutated-frame fuzzing that used to live here is tests/integration/test_fuzz.py (deploy/fuzz).


def test_many_connections_claiming_90_mib_each_hold_bounded_memory(broker: BrokerProcess) -> None:
    # Defaults as Kafka's: socket.request.max.bytes is 100 MiB, and the budget for requests
    # still arriving (queued.max.request.bytes) is twice that: two 90 MiB claims fit, the other
    # 38 connections wait unread, and small requests still pass.
    assert broker.proc is not None
    before = rss_bytes(broker.proc.pid)
    header = encode_request_header(RequestHeader(ApiKey.PRODUCE, 9, 1, "hog"), 2)
    socks = []
    try:
        for _ in range(40):  # 40 x 90 MiB = 3.5 GiB claimed
            sock = connect(broker.bootstrap, timeout_s=30)
            sock.sendall(struct.pack(">i", 90 * MiB) + header + b"\x00" * 65536)
            socks.append(sock)
        # A request on a fresh connection still gets its answer while the hogs wait.
        assert metadata_works(broker)
        grown = rss_bytes(broker.proc.pid) - before
        # What is buffered is what arrived (64 KiB each), far below the claimed 3.5 GiB.
        assert grown < 256 * MiB, f"RSS grew by {grown / MiB:.0f} MiB"
    finally:
        for sock in socks:
            sock.close()
    assert metadata_works(broker)
