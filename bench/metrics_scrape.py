"""What a Prometheus scrape costs a broker with 10,000 partitions: how long the scrape takes, how
big it is, and what it does meanwhile to the broker's answers.

    python -m bench.metrics_scrape                      # 10 topics x 1,000 partitions
    python -m bench.metrics_scrape --topics 2 --partitions 500

One standalone broker with ``causeway.metrics.listener``; its partitions each get a record so
their logs are not empty. A probe sends ApiVersions requests on one connection, one at a time,
for a few seconds: its round trips are the time a request waits for the event loop. The probe
runs twice, with nobody scraping and with a scraper scraping back to back in a thread of its
own, so the difference is what scrapes cost the loop (the per-partition gauges are computed in
the endpoint's thread, which shares the interpreter with the loop). Figures go to BENCHMARKS.md,
"Metrics scrape".
"""

from __future__ import annotations

import argparse
import socket
import statistics
import struct
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from deploy.broker_process import BrokerProcess

PROBE_S = 5.0


@dataclass(frozen=True, slots=True)
class Probe:
    p50_ms: float
    p99_ms: float
    max_ms: float
    count: int


def _api_versions_frame(correlation: int) -> bytes:
    body = struct.pack(">hhih", 18, 0, correlation, -1)  # ApiVersions v0, null client id
    return struct.pack(">i", len(body)) + body


def _read_exact(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the broker closed the probe's connection")
        data += chunk
    return data


def probe(bootstrap: str, seconds: float) -> Probe:
    """ApiVersions round trips, one at a time, for `seconds`."""
    host, port = bootstrap.rsplit(":", 1)
    times: list[float] = []
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        end = time.monotonic() + seconds
        correlation = 0
        while time.monotonic() < end:
            correlation += 1
            started = time.perf_counter()
            sock.sendall(_api_versions_frame(correlation))
            (size,) = struct.unpack(">i", _read_exact(sock, 4))
            _read_exact(sock, size)
            times.append((time.perf_counter() - started) * 1000)
            time.sleep(0.002)
    times.sort()
    return Probe(statistics.median(times), times[int(len(times) * 0.99)], times[-1], len(times))


def scrape(url: str) -> tuple[float, int, int]:
    """(seconds, bytes, samples) of one scrape."""
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=60) as response:  # noqa: S310 - a loopback bench server
        body = response.read()
    elapsed = time.perf_counter() - started
    samples = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
    return elapsed, len(body), samples


def run(topics: int, partitions: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data", overrides=(
            "causeway.metrics.listener=127.0.0.1:0", f"max.broker.partitions={topics * partitions + 100}",
            "offsets.topic.num.partitions=1")).start()
        try:
            _fill(broker.bootstrap, topics, partitions)
            url = _metrics_url(broker)
            first = scrape(url)
            print(f"{topics * partitions} partitions: one scrape is {first[1] / 1e6:.1f} MB, {first[2]} samples")
            durations = [scrape(url)[0] for _ in range(10)]
            print(f"scrape time over 10 scrapes: median {statistics.median(durations) * 1000:.0f} ms, "
                  f"max {max(durations) * 1000:.0f} ms")
            quiet = probe(broker.bootstrap, PROBE_S)
            stop = threading.Event()
            during: list[float] = []

            def scrape_loop() -> None:
                while not stop.is_set():
                    during.append(scrape(url)[0])

            scraper = threading.Thread(target=scrape_loop)
            scraper.start()
            try:
                busy = probe(broker.bootstrap, PROBE_S)
            finally:
                stop.set()
                scraper.join()
            for name, p in (("no scrape", quiet), (f"scraping back to back ({len(during)} scrapes)", busy)):
                print(f"ApiVersions round trip, {name}: p50 {p.p50_ms:.2f} ms, p99 {p.p99_ms:.2f} ms, "
                      f"max {p.max_ms:.1f} ms ({p.count} probes)")
        finally:
            broker.stop()


def _fill(bootstrap: str, topics: int, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for t in range(topics):
        name = f"scrape-{t}"
        admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=300)[name].result(timeout=600)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    for t in range(topics):
        for p in range(partitions):
            producer.produce(f"scrape-{t}", b"x" * 100, partition=p)
    assert producer.flush(300) == 0


def _metrics_url(broker: BrokerProcess) -> str:
    for line in broker.log_path.read_text(errors="replace").splitlines():
        if "metrics served on " in line:
            return line.split("metrics served on ", 1)[1].split()[0]
    raise RuntimeError(f"no metrics endpoint in {broker.log_path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.metrics_scrape", description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=1000, help="per topic")
    args = parser.parse_args(argv)
    run(args.topics, args.partitions)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
