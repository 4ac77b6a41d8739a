"""Broker ingest with batch validation beside the same figure from a tree without it.

    python -m bench.ingest --before 06bbc12     # the commit before batch validation
    python -m bench.ingest --before 06bbc12 --quick

Both brokers run from this venv in the same run, alternately (rounds), each fed pre-built
batches by bench/raw.py's `produce`: 100 B and 1 KiB records, uncompressed and compressed,
with records of one size (runs of equal records, as fixed-size payloads give) and of mixed
sizes (no two neighbours alike), and once more with Kafka's timestamp window set (1 h each way),
which reads every record's timestamp. The best round of each is printed beside this machine's
loopback TCP and file append ceilings, measured in the same run. The "before" tree is
`git archive` of the given commit, unpacked into a temporary directory.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
import timeit
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench import ceiling, raw
from bench.clients import Throughput, create_topic
from broker.clock import now_ms
from broker.protocol import validation
from broker.protocol.records import Compression, read_batch_header
from broker.storage.config import LogConfig
from broker.storage.log import Log
from deploy.broker_process import BrokerProcess

REPO = Path(__file__).resolve().parents[1]
WORKLOADS = [(size, codec, mixed) for size in (100, 1024)
             for codec in (Compression.NONE, Compression.LZ4, Compression.ZSTD, Compression.GZIP)
             for mixed in (False, True)]


# The third column: this tree with a timestamp window both ways (by default Kafka 4 bounds the
# future side only, by an hour).
WINDOW = ("log.message.timestamp.before.max.ms=3600000", "log.message.timestamp.after.max.ms=3600000")


@contextmanager
def broker(tree: Path | None, tmp: Path, name: str, overrides: tuple[str, ...] = ()) -> Iterator[str]:
    """A broker process started from `tree` (None: this working tree)."""
    if tree is None:
        process = BrokerProcess(tmp / name, log_level="warning", overrides=overrides)
    else:
        # -P keeps the working directory off sys.path, so PYTHONPATH's tree is the one imported.
        process = BrokerProcess(tmp / name, log_level="warning", python_args=("-P",),
                                env={"PYTHONPATH": str(tree)})
    process.start()
    try:
        yield process.bootstrap
    finally:
        process.stop()


def unpack(commit: str, into: Path) -> Path:
    into.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def label(size: int, codec: Compression, mixed: bool) -> str:
    return f"{size} B, {codec.name.lower()}, {'mixed sizes' if mixed else 'one size'}"


def run_all(bootstrap: str, scale: int, round_no: int) -> dict[tuple[int, Compression, bool], Throughput]:
    out = {}
    for size, codec, mixed in WORKLOADS:
        topic = f"ingest-{size}-{codec}-{int(mixed)}-{round_no}"
        create_topic(bootstrap, topic)
        count = (1_000_000 if size == 100 else 300_000) // scale
        out[(size, codec, mixed)] = raw.produce(bootstrap, topic, count, size, compression=codec, mixed=mixed)
    return out


def append_cost_us(batch: bytes, config: LogConfig, repeat: int = 5, number: int = 20) -> float:
    """Microseconds one Log.append_as_leader of `batch` takes in this process (best of
    `repeat`): the broker's CPU for a batch, validation included, without the network."""
    with tempfile.TemporaryDirectory() as tmp:
        log = Log.open(Path(tmp) / "t-0", config, recovery_point=0)
        try:
            best = float("inf")
            for _ in range(repeat):
                start = time.perf_counter()
                for _ in range(number):
                    log.append_as_leader(batch, leader_epoch=0, now_ms=now_ms())
                best = min(best, (time.perf_counter() - start) / number)
        finally:
            log.close()
    return best * 1e6


def validation_cost_us(batch: bytes, *, before_max_ms: int, after_max_ms: int | None,
                       repeat: int = 15, number: int = 20) -> float:
    """Microseconds the validation of `batch` takes (best of `repeat`): check_produced with the
    given window, or check_batch alone when `after_max_ms` is None."""
    header = read_batch_header(batch)

    def once() -> None:
        if after_max_ms is None:
            validation.check_batch(batch, 0, header)
        else:
            validation.check_produced(batch, 0, header, transactional=False, now_ms=now_ms(),
                                      before_max_ms=before_max_ms, after_max_ms=after_max_ms)

    return min(timeit.repeat(once, number=number, repeat=repeat)) / number * 1e6


def cpu_table() -> None:
    """What validating one 1000-record batch costs, beside what appending it costs."""
    hour, never = 3_600_000, validation.LONG_MAX
    print("\n| one 1000-record batch, in process | append (validation included), µs | check_batch, µs "
          "| validation with Kafka 4's defaults, µs | with a 1 h window both ways, µs |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for size, codec, mixed in WORKLOADS:
        batch = raw.build(size, compression=codec, mixed=mixed)
        append = append_cost_us(batch, LogConfig())
        structural = validation_cost_us(batch, before_max_ms=never, after_max_ms=None)
        defaults = validation_cost_us(batch, before_max_ms=never, after_max_ms=hour)
        both = validation_cost_us(batch, before_max_ms=hour, after_max_ms=hour)
        print(f"| {label(size, codec, mixed)} | {append:,.0f} | {structural:,.0f} | {defaults:,.0f} | {both:,.0f} |",
              flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ingest")
    parser.add_argument("--before", help="git commit of the tree to compare against over TCP")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--cpu-only", action="store_true", help="only the in-process per-batch table")
    args = parser.parse_args()
    scale = 10 if args.quick else 1
    if args.cpu_only or not args.before:
        cpu_table()
        return
    print(f"machine: {ceiling.machine_summary()}", flush=True)
    tcp = ceiling.loopback_tcp_mb_s((2 << 30) // scale)
    disk = ceiling.file_append_mb_s((1 << 30) // scale)
    print(f"ceiling: loopback TCP {tcp:,.0f} MB/s, file append {disk:,.0f} MB/s", flush=True)
    best: dict[str, dict[tuple[int, Compression, bool], Throughput]] = {"before": {}, "after": {}, "window": {}}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        before_tree = unpack(args.before, tmp / "before-tree")
        for round_no in range(args.rounds):
            for which, tree, overrides in (("before", before_tree, ()), ("after", None, ()),
                                           ("window", None, WINDOW)):
                with broker(tree, tmp, f"{which}-{round_no}", overrides) as bootstrap:
                    for key, t in run_all(bootstrap, scale, round_no).items():
                        if key not in best[which] or t.records_per_s > best[which][key].records_per_s:
                            best[which][key] = t
                        print(f"round {round_no} {which}: {label(*key)}: {t.records_per_s:,.0f} rec/s, "
                              f"{t.mb_per_s:,.1f} MB/s", flush=True)
    print(f"\n| broker ingest ({args.before} → this tree) | before, rec/s | after, rec/s | after, MB/s | change "
          "| after, 1 h window both ways, rec/s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for key in WORKLOADS:
        b, a, w = best["before"][key], best["after"][key], best["window"][key]
        print(f"| {label(*key)} | {b.records_per_s:,.0f} | {a.records_per_s:,.0f} | {a.mb_per_s:,.1f} | "
              f"{a.records_per_s / b.records_per_s - 1:+.0%} | {w.records_per_s:,.0f} |")
    cpu_table()


if __name__ == "__main__":
    main()
