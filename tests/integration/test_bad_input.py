"""Hostile and malformed requests against a real broker process: it answers or closes the
connection, keeps serving everyone else, and holds bounded memory."""

from __future__ import annotations

import random
import selectors
import socket
import struct

from confluent_kafka import Consumer, Producer, TopicPartition

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.headers import RequestHeader, encode_request_header
from broker.protocol.messages import ApiVersionsResponse, MetadataRequest, MetadataResponse, ProduceRequest
from tests.support.broker import BrokerProcess, rss_bytes

MiB = 1024 * 1024


def connect(broker: BrokerProcess) -> socket.socket:
    host, port = broker.bootstrap.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=30)
    return sock


def request_frame(key: int, version: int, body: bytes, correlation_id: int = 1, header_version: int = 1) -> bytes:
    payload = encode_request_header(RequestHeader(key, version, correlation_id, "test"), header_version) + body
    return struct.pack(">i", len(payload)) + payload


def read_frame(sock: socket.socket) -> bytes | None:
    """One response frame, or None when the broker closed the connection."""
    def exactly(n: int) -> bytes | None:
        out = b""
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            if not chunk:
                return None
            out += chunk
        return out

    size = exactly(4)
    if size is None:
        return None
    return exactly(struct.unpack(">i", size)[0])


def metadata_works(broker: BrokerProcess) -> bool:
    with connect(broker) as sock:
        sock.sendall(request_frame(ApiKey.METADATA, 1, bytes(MetadataRequest(topics=None).encode(1)), 9))
        frame = read_frame(sock)
    assert frame is not None
    assert struct.unpack(">i", frame[:4])[0] == 9
    return bool(MetadataResponse.decode(frame[4:], 1).brokers)


def real_client_round_trip(broker: BrokerProcess) -> bool:
    """A librdkafka producer and consumer still work: the fuzzing left nothing broken."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    producer.produce("after-fuzz", b"still alive", partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "f", "enable.auto.commit": False})
    consumer.assign([TopicPartition("after-fuzz", 0, 0)])
    try:
        for _ in range(30):  # bounded: at most 30 polls of a second
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                return bool(msg.value() == b"still alive")
        return False
    finally:
        consumer.close()


def test_unknown_api_versions_version_gets_error_35_in_a_v0_reply(broker: BrokerProcess) -> None:
    with connect(broker) as sock:
        sock.sendall(request_frame(ApiKey.API_VERSIONS, 99, b"", correlation_id=77))
        frame = read_frame(sock)
    assert frame is not None
    assert struct.unpack(">i", frame[:4])[0] == 77
    reply = ApiVersionsResponse.decode(frame[4:], 0)
    assert reply.error_code == ErrorCode.UNSUPPORTED_VERSION
    keys = {k.api_key: (k.min_version, k.max_version) for k in reply.api_keys}
    assert keys[ApiKey.API_VERSIONS][0] == 0 and keys[ApiKey.PRODUCE][0] <= 3


def test_unknown_api_key_closes_only_that_connection(broker: BrokerProcess) -> None:
    with connect(broker) as sock:
        sock.sendall(request_frame(999, 0, b"junk"))
        assert read_frame(sock) is None
    assert metadata_works(broker)


def test_oversized_frame_is_refused_before_its_body(broker: BrokerProcess) -> None:
    with connect(broker) as sock:
        sock.sendall(struct.pack(">i", 2**31 - 1))
        assert read_frame(sock) is None
    assert metadata_works(broker)


def test_truncated_and_garbled_bodies_never_crash_the_broker(broker: BrokerProcess) -> None:
    rng = random.Random(1234)  # fixed seed: a failure reproduces
    produce = ProduceRequest(acks=1, timeout_ms=1000, topic_data=[ProduceRequest.TopicProduceData(
        name="fuzz", partition_data=[ProduceRequest.PartitionProduceData(index=0, records=b"\x00" * 80)])])
    seeds = [
        (ApiKey.PRODUCE, 9, bytes(produce.encode(9)), 2),
        (ApiKey.PRODUCE, 3, bytes(produce.encode(3)), 1),
        (ApiKey.METADATA, 12, bytes(MetadataRequest(topics=None).encode(12)), 2),
        (ApiKey.FETCH, 4, b"\xff\xff\xff\xff" + b"\x00" * 30, 1),
    ]
    pending: dict[socket.socket, int] = {}
    try:
        for round_ in range(300):
            key, version, body, header_version = rng.choice(seeds)
            mutated = bytearray(body)
            for _ in range(rng.randint(1, 6)):
                action = rng.random()
                if action < 0.4 and mutated:
                    mutated[rng.randrange(len(mutated))] = rng.randrange(256)
                elif action < 0.7:
                    del mutated[rng.randrange(len(mutated) + 1):]
                else:
                    mutated += bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
            sock = connect(broker)
            sock.sendall(request_frame(key, version, bytes(mutated), round_, header_version))
            pending[sock] = round_
        # Each connection gets its answer (with its own correlation id) or is closed; a few may
        # legitimately stay silent (a mutated acks=0 produce, a fetch long-poll with a mutated
        # max wait). Meanwhile the broker keeps serving everyone else.
        answered = closed = 0
        with selectors.DefaultSelector() as sel:
            for sock in pending:
                sel.register(sock, selectors.EVENT_READ)
            while sel.get_map():
                ready = sel.select(timeout=10)
                if not ready:
                    break
                for key_, _ in ready:
                    sock = key_.fileobj  # type: ignore[assignment]
                    sel.unregister(sock)
                    frame = read_frame(sock)
                    if frame is None:
                        closed += 1
                    else:
                        assert struct.unpack(">i", frame[:4])[0] == pending[sock]
                        answered += 1
        assert answered + closed >= 290, (answered, closed)
        assert broker.proc is not None and broker.proc.poll() is None
        assert metadata_works(broker)
        assert real_client_round_trip(broker)
    finally:
        for sock in pending:
            sock.close()


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
            sock = connect(broker)
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
