"""The standalone controller's metadata as topics pile up, up to max.broker.partitions: bytes the
broker writes, time of a Metadata request that auto-creates 100 topics, of a CreateTopics of 100
(with the metadata writes it cost), and of a restart that replays them all.

    python -m bench.metadata                                  # this tree, up to 10,000 partitions
    python -m bench.metadata --before /tmp/base --before-topics 2600
        (the baseline made with: git archive HEAD | tar -x -C /tmp/base; it rewrote the whole
         metadata file for every topic, so its run stops early)

Topics have one partition each; the broker's own __consumer_offsets holds 50 of the
max.broker.partitions. Bytes are the broker process's write_bytes (/proc/PID/io: everything it
sent towards the disk, partition files and checkpoints included), so the metadata's share is an
upper bound. Beside them, this machine's own ceilings, measured in the same run: 1 MiB appends
(MB/s) and 256-byte appends each followed by fdatasync (per second), by a trivial Python loop.
Last, in process, the time to place 100 new partitions' logs in log dirs beside 2,500 and 10,000
existing logs (``LogManager.place``, which counted every log for each new one).
Figures go to BENCHMARKS.md, "Standalone metadata".
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench import ceiling
from broker.protocol.errors import ErrorCode
from broker.protocol.messages import CreateTopicsRequest, MetadataRequest, MetadataResponse
from deploy.broker_process import BrokerProcess
from deploy.kafka_socket import call, connect

PER_REQUEST = 100
OFFSETS_PARTITIONS = 50
METADATA_VERSION = 9
CREATE_TOPICS_VERSION = 5
REPORT_AT = (100, 500, 1000, 2500, 5000, 7500)
CREATE_TOPICS_REQUESTS = 3  # CreateTopics of PER_REQUEST names in a row (one figure is one sample on a shared machine)


@dataclass(frozen=True, slots=True)
class Step:
    topics: int
    handed_mb: float  # bytes the broker handed to write(2) since it started (wchar), in MB
    written_mb: float  # broker's write_bytes since it started, in MB
    request_ms: float  # the Metadata request that created the last PER_REQUEST topics
    on_disk_kb: float  # the metadata files' size now


def io_counter(pid: int, name: str) -> int:
    """A counter of /proc/PID/io: wchar (bytes handed to write(2): files, log, sockets) or
    write_bytes (bytes sent towards the disk, file system metadata pages included)."""
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            if line.startswith(f"{name}:"):
                return int(line.split()[1])
    raise RuntimeError(f"no {name} in /proc/{pid}/io")


def metadata_bytes(data: Path) -> int:
    return sum(p.stat().st_size for p in data.glob("cluster-metadata.*") if p.is_file())


def fsync_appends_per_s(count: int = 500) -> float:
    """256-byte appends each followed by fdatasync, per second: the floor under any durable
    one-change-at-a-time metadata write on this disk."""
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        fd = os.open(os.path.join(tmp, "fsync.bin"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            start = time.perf_counter()
            for _ in range(count):
                os.write(fd, b"x" * 256)
                os.fdatasync(fd)
            return count / (time.perf_counter() - start)
        finally:
            os.close(fd)


_PLACEMENT = """
import sys, tempfile, time
from pathlib import Path
from broker.storage import LogConfig, LogManager
with tempfile.TemporaryDirectory() as tmp:
    dirs = [Path(tmp) / "a", Path(tmp) / "b"]
    manager = LogManager(dirs, LogConfig())
    for i in range(int(sys.argv[1])):
        manager.adopt("t", i, dirs[i % 2], object())  # only registered: place() counts them
    start = time.perf_counter()
    for _ in range(100):
        manager.place(1)
    print((time.perf_counter() - start) * 1000)
"""


def placement_ms(tree: Path | None, logs: int) -> float:
    """Milliseconds to place 100 new partitions' logs beside ``logs`` existing ones, with the
    LogManager of ``tree`` (this tree when None), in a fresh interpreter."""
    root = tree if tree is not None else Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-P", "-c", _PLACEMENT, str(logs)], check=True, capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(root)}).stdout
    return float(out)


@contextmanager
def broker(tree: Path | None, data: Path) -> Iterator[BrokerProcess]:
    python_args = ("-P",) if tree is not None else ()  # the baseline's modules from PYTHONPATH
    env = {"PYTHONPATH": str(tree)} if tree is not None else {}
    process = BrokerProcess(data, python_args=python_args, env=env, log_level="warning",
                            overrides=("num.partitions=1",)).start()
    try:
        yield process
    finally:
        process.stop()


def auto_create(bootstrap: str, names: list[str]) -> float:
    """Milliseconds of one Metadata request that auto-creates `names`; fails on any error."""
    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in names],
                              allow_auto_topic_creation=True)
    with connect(bootstrap) as sock:
        start = time.perf_counter()
        response: MetadataResponse = call(sock, request, METADATA_VERSION)
        elapsed = (time.perf_counter() - start) * 1000
    bad = [t for t in response.topics if t.error_code not in (ErrorCode.NONE, ErrorCode.LEADER_NOT_AVAILABLE)]
    if bad:
        raise RuntimeError(f"auto-creation failed: {bad[0].name}: {ErrorCode(bad[0].error_code).name}")
    return elapsed


def metadata_writes(data: Path) -> int:
    """Batches in cluster-metadata.log, each one write and one fdatasync (a line each)."""
    path = data / "cluster-metadata.log"
    return path.read_bytes().count(b"\n") if path.exists() else 0


def create_topics(bootstrap: str, names: list[str]) -> float:
    """Milliseconds of one CreateTopics request of `names` (1 partition each)."""
    request = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(name=n, num_partitions=1,
                                                                             replication_factor=1)
                                          for n in names], timeout_ms=600_000)
    with connect(bootstrap, timeout_s=600) as sock:
        start = time.perf_counter()
        response = call(sock, request, CREATE_TOPICS_VERSION)
        elapsed = (time.perf_counter() - start) * 1000
    bad = [t for t in response.topics if t.error_code != ErrorCode.NONE]
    if bad:
        raise RuntimeError(f"CreateTopics failed: {bad[0].name}: {ErrorCode(bad[0].error_code).name}")
    return elapsed


@dataclass(frozen=True, slots=True)
class CreateTopics:
    ms: float
    writes: int | None  # metadata batches it cost; None when a snapshot folded the log meanwhile


@dataclass(frozen=True, slots=True)
class Run:
    steps: list[Step]
    create_topics: list[CreateTopics]  # CreateTopics of PER_REQUEST names, from 2,500 topics or near the end
    create_topics_at: int
    restart_s: float
    topics: int


def measure(tree: Path | None, topics: int) -> Run:
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        data = Path(tmp) / "data"
        steps: list[Step] = []
        created, create_topics_runs = 0, list[CreateTopics]()
        # CreateTopics of PER_REQUEST names, from 2,500 topics (the figure) or last.
        requests = CREATE_TOPICS_REQUESTS * PER_REQUEST
        create_topics_at = 2500 if topics >= 2500 + requests + PER_REQUEST else max(0, topics - requests)
        with broker(tree, data) as process:
            assert process.proc is not None
            pid = process.proc.pid
            while created < topics:
                names = [f"t{created + i:05d}" for i in range(min(PER_REQUEST, topics - created))]
                if create_topics_at <= created < create_topics_at + requests:
                    lines, snapshot = metadata_writes(data), (data / "cluster-metadata.json").stat().st_mtime_ns
                    elapsed = create_topics(process.bootstrap, names)
                    folded = (data / "cluster-metadata.json").stat().st_mtime_ns != snapshot
                    create_topics_runs.append(CreateTopics(elapsed, None if folded else metadata_writes(data) - lines))
                    created += len(names)
                    continue
                elapsed = auto_create(process.bootstrap, names)
                created += len(names)
                if created in REPORT_AT or created + PER_REQUEST > topics:
                    step = Step(created, io_counter(pid, "wchar") / 1e6, io_counter(pid, "write_bytes") / 1e6,
                                elapsed, metadata_bytes(data) / 1e3)
                    steps.append(step)
                    print(f"  {step.topics:,} topics: {step.handed_mb:,.1f} MB handed to write(), "
                          f"{step.written_mb:,.1f} MB write_bytes, last request of "
                          f"{PER_REQUEST} {step.request_ms:,.0f} ms, metadata on disk {step.on_disk_kb:,.0f} kB",
                          flush=True)
            start = time.perf_counter()
            port = process.port
            process.stop()
            process.start(port=port)
            restart_s = time.perf_counter() - start
        return Run(steps, create_topics_runs, create_topics_at, restart_s, created)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.metadata")
    parser.add_argument("--topics", type=int, default=10_000 - OFFSETS_PARTITIONS,
                        help="topics of one partition to create (default: up to max.broker.partitions)")
    parser.add_argument("--before", type=Path, help="a baseline source tree, measured in the same run")
    parser.add_argument("--before-topics", type=int, default=2600, help="topics for the baseline")
    args = parser.parse_args()
    print(f"machine: {ceiling.machine_summary()}", flush=True)
    append = ceiling.file_append_mb_s(256 << 20)
    fsyncs = fsync_appends_per_s()
    print(f"ceiling: file append {append:,.0f} MB/s, 256-byte append + fdatasync {fsyncs:,.0f}/s", flush=True)
    trees: list[tuple[str, Path | None, int]] = [("this tree", None, args.topics)]
    if args.before is not None:
        trees.insert(0, (f"before ({args.before})", args.before.resolve(), args.before_topics))
    runs = []
    for name, tree, count in trees:
        print(f"{name}: {count:,} topics, {PER_REQUEST} auto-created per Metadata request", flush=True)
        run = measure(tree, count)
        runs.append((name, run))
        print(f"  CreateTopics of {PER_REQUEST} from {run.create_topics_at:,} topics: {describe(run.create_topics)}; "
              f"restart with {run.topics:,} topics: {run.restart_s:.1f} s", flush=True)
    print("\n| broker | topics | MB handed to write() | per topic | MB write_bytes | per topic "
          "| Metadata request of 100 new | metadata on disk |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, run in runs:
        for s in run.steps:
            print(f"| {name} | {s.topics:,} | {s.handed_mb:,.1f} | {s.handed_mb * 1e6 / s.topics:,.0f} B | "
                  f"{s.written_mb:,.1f} | {s.written_mb * 1e6 / s.topics:,.0f} B | {s.request_ms:,.0f} ms | "
                  f"{s.on_disk_kb:,.0f} kB |")
    print(f"\n| broker | CreateTopics of {PER_REQUEST}, {CREATE_TOPICS_REQUESTS} in a row (metadata writes) "
          "| from topics | restart with all topics |\n| --- | ---: | ---: | ---: |")
    for name, run in runs:
        print(f"| {name} | {describe(run.create_topics)} | {run.create_topics_at:,} | {run.restart_s:.1f} s |")
    print("\n| broker | 100 placements beside 2,500 logs | beside 10,000 logs |\n| --- | ---: | ---: |")
    for name, tree, _ in trees:
        print(f"| {name} | {placement_ms(tree, 2500):,.2f} ms | {placement_ms(tree, 10_000):,.2f} ms |")


def describe(requests: list[CreateTopics]) -> str:
    return ", ".join(f"{r.ms:,.0f} ms ({'snapshot' if r.writes is None else r.writes})" for r in requests)


if __name__ == "__main__":
    main()
