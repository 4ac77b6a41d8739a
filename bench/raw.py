"""The broker's own ingest and fetch rates, without a client library in the way.

Pre-built record batches go out in pipelined ProduceRequests over one socket (and come back in
FetchRequests), so the figure is what the broker can take, not what a Python producer loop can
make. Batches are built once; the broker still checks each one's CRC and patches its offset.
"""

from __future__ import annotations

import socket
import struct
import time

from bench.clients import Throughput
from broker.protocol.api import ApiKey
from broker.protocol.headers import RequestHeader, encode_request_header
from broker.protocol.messages import FetchRequest, FetchResponse, ProduceRequest, ProduceResponse
from broker.protocol.records import Record, build_batch, split_batches

PRODUCE_VERSION = 9
FETCH_VERSION = 12


def _frame(key: int, version: int, body: bytes, correlation_id: int) -> bytes:
    header = encode_request_header(RequestHeader(key, version, correlation_id, "bench"), 2)
    return struct.pack(">i", len(header) + len(body)) + header + body


def _read_frame(sock: socket.socket) -> bytes:
    size = struct.unpack(">i", _exactly(sock, 4))[0]
    return _exactly(sock, size)


def _exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        buf += chunk
    return bytes(buf)


def produce(bootstrap: str, topic: str, count: int, size: int, *, per_batch: int = 1000,
            in_flight: int = 8) -> Throughput:
    """Send `count` records of `size` bytes as batches of `per_batch`, acks=1."""
    batch = build_batch([Record(None, b"v" * size) for _ in range(per_batch)])
    request = ProduceRequest(acks=1, timeout_ms=30_000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)])])
    body = bytes(request.encode(PRODUCE_VERSION))
    requests = count // per_batch
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port))) as sock:
        start = time.perf_counter()
        sent = received = 0
        while received < requests:
            while sent < requests and sent - received < in_flight:
                sock.sendall(_frame(ApiKey.PRODUCE, PRODUCE_VERSION, body, sent))
                sent += 1
            reply = _read_frame(sock)
            response = ProduceResponse.decode(memoryview(reply)[5:], PRODUCE_VERSION)
            code = response.responses[0].partition_responses[0].error_code
            if code:
                raise RuntimeError(f"produce failed with error {code}")
            received += 1
        elapsed = time.perf_counter() - start
    return Throughput(requests * per_batch, size, elapsed)


def fetch(bootstrap: str, topic: str, count: int, size: int, *, max_bytes: int = 8 << 20) -> Throughput:
    """Read `count` records back from offset 0 with FetchRequests of up to `max_bytes`."""
    host, port = bootstrap.rsplit(":", 1)
    offset = 0
    records = 0
    correlation = 0
    with socket.create_connection((host, int(port))) as sock:
        start = time.perf_counter()
        while records < count:
            request = FetchRequest(replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=max_bytes, topics=[
                FetchRequest.FetchTopic(topic=topic, partitions=[
                    FetchRequest.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=max_bytes)])])
            sock.sendall(_frame(ApiKey.FETCH, FETCH_VERSION, bytes(request.encode(FETCH_VERSION)), correlation))
            correlation += 1
            reply = _read_frame(sock)
            data = FetchResponse.decode(memoryview(reply)[5:], FETCH_VERSION).responses[0].partitions[0].records
            if not data:
                raise RuntimeError(f"fetch at offset {offset} returned nothing")
            for _, header in split_batches(data, allow_partial_tail=True):
                records += header.records_count
                offset = header.last_offset + 1
        elapsed = time.perf_counter() - start
    return Throughput(records, size, elapsed)
