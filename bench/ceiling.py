"""This machine's own ceilings, measured in the same run as the benchmarks they frame.

Two trivial Python programs: push bytes through a loopback TCP connection (or TLS over it), and
append bytes to a file. A broker in Python cannot beat either; how close it comes is the useful figure.
"""

from __future__ import annotations

import os
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Callable

__all__ = ["loopback_tcp_mb_s", "loopback_tls_mb_s", "file_append_mb_s", "loopback_round_trip_us", "machine_summary"]

CHUNK = 1 << 20


def loopback_tcp_mb_s(total_bytes: int = 2 << 30) -> float:
    """MB/s of one Python thread sending 1 MiB chunks to another over 127.0.0.1."""
    return _loopback_mb_s(total_bytes, lambda conn: conn, lambda conn: conn)


def loopback_tls_mb_s(server: ssl.SSLContext, client: ssl.SSLContext, total_bytes: int = 1 << 30) -> float:
    """The same through TLS (the client checks the server's certificate for 127.0.0.1): what
    encryption alone leaves of loopback TCP on these cores."""
    return _loopback_mb_s(total_bytes, lambda conn: server.wrap_socket(conn, server_side=True),
                          lambda conn: client.wrap_socket(conn, server_hostname="127.0.0.1"))


def _loopback_mb_s(total_bytes: int, wrap_server: Callable[[socket.socket], socket.socket],
                   wrap_client: Callable[[socket.socket], socket.socket]) -> float:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    received = 0

    def sink() -> None:
        nonlocal received
        conn, _ = server.accept()
        with wrap_server(conn) as stream:
            buf = bytearray(CHUNK)
            view = memoryview(buf)
            while True:
                n = stream.recv_into(view)
                if n == 0:
                    return
                received += n

    thread = threading.Thread(target=sink)
    thread.start()
    payload = b"x" * CHUNK
    start = time.perf_counter()
    try:
        with wrap_client(socket.create_connection(("127.0.0.1", port))) as client:
            sent = 0
            while sent < total_bytes:
                client.sendall(payload)
                sent += CHUNK
    finally:
        thread.join()
        server.close()
    elapsed = time.perf_counter() - start
    return received / elapsed / 1e6


def file_append_mb_s(total_bytes: int = 1 << 30) -> float:
    """MB/s of appending 1 MiB chunks to a file (page cache, no fsync, as Kafka by default)."""
    payload = b"x" * CHUNK
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        path = os.path.join(tmp, "append.bin")
        start = time.perf_counter()
        with open(path, "ab", buffering=0) as f:
            written = 0
            while written < total_bytes:
                f.write(payload)
                written += CHUNK
        elapsed = time.perf_counter() - start
    return total_bytes / elapsed / 1e6


def machine_summary() -> str:
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} cores ({cpu}), {mem_gib:.0f} GiB"


def loopback_round_trip_us(count: int = 2000) -> tuple[float, float]:
    """(p50, p99) in µs of a 100-byte request and its 100-byte answer between two Python threads
    over 127.0.0.1: the floor under any one-record request/response latency on this machine."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def echo() -> None:
        conn, _ = server.accept()
        with conn:
            while data := conn.recv(100):
                conn.sendall(data)

    thread = threading.Thread(target=echo)
    thread.start()
    times: list[float] = []
    with socket.create_connection(("127.0.0.1", port)) as client:
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(count):
            start = time.perf_counter()
            client.sendall(b"x" * 100)
            got = 0
            while got < 100:
                got += len(client.recv(100 - got))
            times.append(time.perf_counter() - start)
    thread.join()
    server.close()
    times.sort()
    return times[len(times) // 2] * 1e6, times[int(len(times) * 0.99)] * 1e6
