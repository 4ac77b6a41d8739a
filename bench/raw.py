"""The broker's own ingest and fetch rates, without a client library in the way.

Pre-built record batches go out in pipelined ProduceRequests over one socket (and come back in
FetchRequests), so the figure is what the broker can take, not what a Python producer loop can
make. Batches are built once; the broker still checks each one's CRC and patches its offset.
"""

from __future__ import annotations

import argparse
import random
import socket
import tempfile
import time
from pathlib import Path

from bench.clients import Throughput
from broker.address import parse_host_port
from broker.clock import now_ms
from broker.protocol.api import ApiKey
from broker.protocol.messages import FetchRequest, ProduceRequest
from broker.protocol.records import Record, build_batch, split_batches
from deploy.kafka_socket import connect, decode_response, read_frame, request_frame

PRODUCE_VERSION = 9
FETCH_VERSION = 12
CLIENT_ID = "bench"


def build(size: int, *, per_batch: int = 1000, compression: int = 0, mixed: bool = False) -> bytes:
    """The batch `produce` sends: `per_batch` records of `size` bytes (see `produce`)."""
    rng = random.Random(size)
    sizes = [size] * per_batch
    if mixed:  # pairs size+d, size-d, shuffled: the batch holds the same bytes as with one size
        spread = [rng.randint(-size // 2, size // 2) for _ in range(per_batch // 2)]
        sizes = [size + d for d in spread] + [size - d for d in spread] + [size] * (per_batch % 2)
        rng.shuffle(sizes)
    # Random text over 20 symbols, no two records alike: it compresses about 1.8:1, as log
    # lines or JSON might (repeated values would make compressed batches unrealistically small).
    table = bytes(b"abcdefghij0123456789"[i % 20] for i in range(256))
    text = rng.randbytes(sum(sizes)).translate(table)
    starts = [0]
    for n in sizes:
        starts.append(starts[-1] + n)
    values = [text[a:b] for a, b in zip(starts, starts[1:], strict=False)]
    # Timestamps as a producer's: now, a few milliseconds apart (so a broker bounding them with
    # log.message.timestamp.*.max.ms accepts them, and reads each).
    now = now_ms()
    batch = build_batch([Record(None, v, timestamp=now + i // 10) for i, v in enumerate(values)],
                        compression=compression)
    return batch


def produce(bootstrap: str, topic: str, count: int, size: int, *, per_batch: int = 1000,
            in_flight: int = 8, compression: int = 0, mixed: bool = False) -> Throughput:
    """Send `count` records of `size` bytes as batches of `per_batch`, acks=1.

    `compression` is the batch's codec (0 none ... 4 zstd); `mixed` draws each record's size
    from size/2 to 3*size/2 (mean exactly `size`), so that no two neighbours need be alike.
    """
    batch = build(size, per_batch=per_batch, compression=compression, mixed=mixed)
    request = ProduceRequest(acks=1, timeout_ms=30_000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)])])
    body = bytes(request.encode(PRODUCE_VERSION))
    requests = count // per_batch
    with connect(parse_host_port(bootstrap, "bootstrap"), timeout_s=None) as sock:
        start = time.perf_counter()
        sent = received = 0
        while received < requests:
            while sent < requests and sent - received < in_flight:
                sock.sendall(request_frame(ApiKey.PRODUCE, PRODUCE_VERSION, body, sent, client_id=CLIENT_ID))
                sent += 1
            # The broker answers a connection's requests in order: the next answer is `received`'s.
            response = decode_response(read_frame(sock), ApiKey.PRODUCE, PRODUCE_VERSION, received)
            code = response.responses[0].partition_responses[0].error_code
            if code:
                raise RuntimeError(f"produce failed with error {code}")
            received += 1
        elapsed = time.perf_counter() - start
    return Throughput(requests * per_batch, size, elapsed)


def fetch(bootstrap: str, topic: str, count: int, size: int, *, max_bytes: int = 8 << 20) -> Throughput:
    """Read `count` records back from offset 0 with FetchRequests of up to `max_bytes`."""
    offset = 0
    records = 0
    correlation = 0
    with connect(parse_host_port(bootstrap, "bootstrap"), timeout_s=None) as sock:
        start = time.perf_counter()
        while records < count:
            request = FetchRequest(replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=max_bytes, topics=[
                FetchRequest.FetchTopic(topic=topic, partitions=[
                    FetchRequest.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=max_bytes)])])
            sock.sendall(request_frame(ApiKey.FETCH, FETCH_VERSION, bytes(request.encode(FETCH_VERSION)), correlation,
                                       client_id=CLIENT_ID))
            response = decode_response(read_frame(sock), ApiKey.FETCH, FETCH_VERSION, correlation)
            correlation += 1
            data = response.responses[0].partitions[0].records
            if not data:
                raise RuntimeError(f"fetch at offset {offset} returned nothing")
            for _, header in split_batches(data, allow_partial_tail=True):
                records += header.records_count
                offset = header.last_offset + 1
        elapsed = time.perf_counter() - start
    return Throughput(records, size, elapsed)


def stalled_fetches_rss(bootstrap: str, topic: str, pid: int, *, clients: int = 12,
                        max_bytes: int = 2**31 - 1, settle_s: float = 3.0) -> int:
    """Broker RSS once `clients` sockets have each asked for `max_bytes` and read nothing.

    Each client shrinks its receive buffer so that what stays behind is what the broker holds.
    RSS is read from /proc until it has not grown for `settle_s` (bounded at 60 s).
    """
    from deploy.child_process import rss_bytes

    request = FetchRequest(replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=max_bytes, topics=[
        FetchRequest.FetchTopic(topic=topic, partitions=[
            FetchRequest.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=max_bytes)])])
    frame = request_frame(ApiKey.FETCH, FETCH_VERSION, bytes(request.encode(FETCH_VERSION)), 1, client_id=CLIENT_ID)
    address = parse_host_port(bootstrap, "bootstrap")
    socks: list[socket.socket] = []
    try:
        for _ in range(clients):
            sock = connect(address, timeout_s=None, rcvbuf=4096)
            sock.sendall(frame)
            socks.append(sock)
        peak = rss_bytes(pid)
        stable_since = time.monotonic()
        deadline = stable_since + 60
        while time.monotonic() - stable_since < settle_s and time.monotonic() < deadline:
            time.sleep(0.1)
            now = rss_bytes(pid)
            if now > peak * 1.01:
                stable_since = time.monotonic()
            peak = max(peak, now)
        return peak
    finally:
        for sock in socks:
            sock.close()


def main() -> None:
    """Stalled-fetch RSS and fetch throughput on a fresh broker: the figures of BENCHMARKS.md's
    "Fetch memory" section (python -m bench.raw)."""
    from bench.clients import create_topic
    from deploy.broker_process import BrokerProcess
    from deploy.child_process import rss_bytes

    parser = argparse.ArgumentParser(prog="python -m bench.raw")
    parser.add_argument("--clients", type=int, default=12)
    parser.add_argument("--megabytes", type=int, default=128, help="data in the fetched topic")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        process = BrokerProcess(Path(tmp) / "data", log_level="warning").start()
        try:
            assert process.proc is not None
            pid = process.proc.pid
            create_topic(process.bootstrap, "stalled")
            produce(process.bootstrap, "stalled", args.megabytes * 1000, 1000)
            idle = rss_bytes(pid)
            stalled = stalled_fetches_rss(process.bootstrap, "stalled", pid, clients=args.clients)
            print(f"broker RSS: {idle / 2**20:,.0f} MiB idle, {stalled / 2**20:,.0f} MiB with "
                  f"{args.clients} clients each asking for 2 GiB and not reading", flush=True)
            for size, count in ((100, 2_000_000), (1024, 500_000)):
                topic = f"fetch-{size}"
                create_topic(process.bootstrap, topic)
                ingest = produce(process.bootstrap, topic, count, size)
                print(f"broker ingest {size} B: {ingest.rates}", flush=True)
                out = fetch(process.bootstrap, topic, count, size)
                print(f"broker fetch {size} B: {out.rates}", flush=True)
        finally:
            process.stop()


if __name__ == "__main__":
    main()
