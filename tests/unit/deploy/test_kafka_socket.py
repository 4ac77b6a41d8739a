"""deploy.kafka_socket, the raw request frames of the attacking tests and the fuzzer's probes,
against a socketpair standing in for a broker: the frames the broker's own header decoder reads
back, and every way an answer can be wrong reported, never taken for a good one."""

from __future__ import annotations

import socket
import struct
import threading

import pytest

from broker.protocol.api import ApiKey
from broker.protocol.headers import decode_request_header, encode_response
from broker.protocol.messages import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse
from deploy import kafka_socket


def _answer(peer: socket.socket, reply: bytes) -> None:
    """Read one request frame on `peer`, then send `reply` (whole frames) and close."""
    size = struct.unpack(">i", peer.recv(4, socket.MSG_WAITALL))[0]
    peer.recv(size, socket.MSG_WAITALL)
    peer.sendall(reply)
    peer.close()


def _served(reply: bytes) -> tuple[socket.socket, threading.Thread]:
    ours, peer = socket.socketpair()
    ours.settimeout(10)
    server = threading.Thread(target=_answer, args=(peer, reply))
    server.start()
    return ours, server


@pytest.mark.parametrize(("key", "version", "header_version"), [
    (ApiKey.METADATA, 8, 1), (ApiKey.METADATA, 9, 2), (ApiKey.API_VERSIONS, 99, 1), (999, 0, 1)])
def test_frames_carry_the_header_version_the_broker_reads(key: int, version: int, header_version: int) -> None:
    frame = kafka_socket.request_frame(key, version, b"body", 42, client_id="probe")
    assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
    header, body_at = decode_request_header(frame[4:])
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (key, version, 42, "probe")
    assert frame[4 + body_at:] == b"body"
    assert body_at == 10 + len("probe") + (1 if header_version == 2 else 0)


def test_an_answer_is_decoded_past_a_flexible_response_header() -> None:
    answer = MetadataResponse(brokers=[MetadataResponse.MetadataResponseBroker(node_id=3, host="h", port=1)])
    ours, server = _served(bytes(encode_response(7, 1, answer, 9)))
    with ours:
        got = kafka_socket.call(ours, MetadataRequest(topics=None), 9, 7)
    server.join()
    assert [b.node_id for b in got.brokers] == [3]


def test_an_answer_to_another_request_is_refused() -> None:
    ours, server = _served(bytes(encode_response(8, 0, ApiVersionsResponse(), 0)))
    with ours, pytest.raises(ConnectionError, match="correlation id 8, not 7"):
        kafka_socket.call(ours, ApiVersionsRequest(), 0, 7)
    server.join()


@pytest.mark.parametrize("reply", [b"", b"\x00\x00", struct.pack(">i", 100) + b"cut short"])
def test_a_connection_closed_before_a_whole_answer_is_none_or_an_error(reply: bytes) -> None:
    ours, server = _served(reply)
    with ours:
        assert kafka_socket.exchange(ours, ApiVersionsRequest(), 0) is None
    server.join()
    ours, server = _served(reply)
    with ours, pytest.raises(ConnectionError, match="closed the connection"):
        kafka_socket.call(ours, ApiVersionsRequest(), 0)
    server.join()
