"""How long the broker's event loop can be blocked: produce latency of a light probe while a
heavy producer makes segments roll every few MB and, in the worst case, fsync every append.

    python -m bench.loopstall                        # this tree only
    python -m bench.loopstall --before /tmp/base     # and a baseline tree, in the same run
        (make the baseline with: git archive HEAD | tar -x -C /tmp/base)

The probe writes 100-byte records at a fixed rate, acks=1, linger 0, to a topic of its own that
never fsyncs: its latency is the time its request waits for the event loop, so its tail is the
longest stall the loop had. The load writes 1 KiB records as fast as it can to a topic with
``segment.bytes`` of 4 MiB (a roll every 4 MB) and, in the ``flush.messages=1`` scenario, an
fsync demanded by every append. Kafka's own worst case is the same setting: its append flushes
inline on the request thread. Figures go to BENCHMARKS.md, "Event loop stalls".
"""

from __future__ import annotations

import argparse
import functools
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from deploy.broker_process import BrokerProcess

SEGMENT_BYTES = 4 << 20


@dataclass(frozen=True, slots=True)
class Stalls:
    p50_ms: float
    p99_ms: float
    max_ms: float
    probes: int
    load_mb_s: float
    segments: int


@contextmanager
def broker(tree: Path | None) -> Iterator[tuple[str, Path]]:
    """A broker process running the code of `tree` (this tree when None): (bootstrap, data dir)."""
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        # -P: the baseline's modules come from PYTHONPATH, not from the current directory.
        python_args = ("-P",) if tree is not None else ()
        env = {"PYTHONPATH": str(tree)} if tree is not None else {}
        process = BrokerProcess(data, python_args=python_args, env=env, log_level="warning").start()
        try:
            yield process.bootstrap, data
        finally:
            process.stop()


def create_topics(bootstrap: str, fsync_each: bool) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    load = {"segment.bytes": str(SEGMENT_BYTES)}
    if fsync_each:
        load["flush.messages"] = "1"
    futures = admin.create_topics([NewTopic("probe", 1, 1), NewTopic("load", 1, 1, config=load)])
    for future in futures.values():
        future.result(timeout=30)


def load(bootstrap: str, stop: threading.Event, sent: list[int]) -> None:
    """1 KiB records to `load` as fast as the broker takes them, until `stop`."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 2, "batch.size": 64 << 10,
                         "queue.buffering.max.kbytes": 65536})
    payload = b"l" * 1024
    while not stop.is_set():
        try:
            producer.produce("load", payload, partition=0)
            sent[0] += len(payload)
        except BufferError:
            producer.poll(0.005)
    producer.flush(60)


def probe(bootstrap: str, rate: int, seconds: float) -> list[float]:
    """Milliseconds from produce() to delivery of each probe record, sent at `rate`/s."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 0})
    latencies: list[float] = []

    def delivered(err: object, _msg: object, sent: float) -> None:
        if err is None:
            latencies.append((time.perf_counter() - sent) * 1000)

    start = time.perf_counter()
    for i in range(int(rate * seconds)):
        target = start + i / rate
        while (now := time.perf_counter()) < target:
            producer.poll(min(target - now, 0.001))
        sent = time.perf_counter()
        producer.produce("probe", b"p" * 100, partition=0, on_delivery=functools.partial(delivered, sent=sent))
        producer.poll(0)
    producer.flush(60)
    return sorted(latencies)


def measure(tree: Path | None, *, fsync_each: bool, rate: int, seconds: float) -> Stalls:
    with broker(tree) as (bootstrap, data):
        create_topics(bootstrap, fsync_each)
        stop = threading.Event()
        sent = [0]
        loader = threading.Thread(target=load, args=(bootstrap, stop, sent), daemon=True)
        loader.start()
        time.sleep(1.0)  # the load reaches its pace before the probe starts
        before = sent[0]
        latencies = probe(bootstrap, rate, seconds)
        load_mb_s = (sent[0] - before) / seconds / 1e6
        stop.set()
        loader.join()
        segments = len(list((data / "load-0").glob("*.log")))
    if not latencies:
        raise RuntimeError("no probe record was delivered")
    n = len(latencies)
    return Stalls(latencies[n // 2], latencies[min(n - 1, int(n * 0.99))], latencies[-1], n, load_mb_s, segments)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.loopstall")
    parser.add_argument("--before", type=Path, help="a baseline source tree, measured in the same run")
    parser.add_argument("--rate", type=int, default=500, help="probe records per second")
    parser.add_argument("--seconds", type=float, default=10.0, help="probe duration per scenario")
    args = parser.parse_args()
    trees: list[tuple[str, Path | None]] = [("this tree", None)]
    if args.before is not None:
        trees.insert(0, (f"before ({args.before})", args.before.resolve()))
    print(f"machine: {os.cpu_count()} cores; probe {args.rate} rec/s for {args.seconds:.0f} s per scenario",
          flush=True)
    rows = []
    for fsync_each in (False, True):
        for name, tree in trees:
            result = measure(tree, fsync_each=fsync_each, rate=args.rate, seconds=args.seconds)
            scenario = "rolls every 4 MB" + (" + flush.messages=1" if fsync_each else "")
            rows.append((scenario, name, result))
            print(f"{scenario}, {name}: p50 {result.p50_ms:.2f} ms, p99 {result.p99_ms:.2f} ms, "
                  f"max {result.max_ms:.2f} ms; load {result.load_mb_s:.1f} MB/s, {result.segments} segments",
                  flush=True)
    print("\n| load | broker | probe p50 | probe p99 | probe max | load MB/s | segments |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for scenario, name, r in rows:
        print(f"| {scenario} | {name} | {r.p50_ms:.2f} ms | {r.p99_ms:.2f} ms | {r.max_ms:.2f} ms | "
              f"{r.load_mb_s:.1f} | {r.segments} |")


if __name__ == "__main__":
    main()
