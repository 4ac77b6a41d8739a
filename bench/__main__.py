"""Run the broker benchmarks and print a Markdown table for BENCHMARKS.md.

    python -m bench            # full run (a few minutes)
    python -m bench --quick    # smaller counts, for a smoke check
    python -m bench --profile  # also profile the broker under the 100-byte producer load

Each figure is printed beside this machine's own ceilings, measured in the same run.
"""

from __future__ import annotations

import argparse
import pstats
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench import ceiling, clients, groups, raw
from deploy.broker_process import BrokerProcess


@contextmanager
def broker(*, profile_to: Path | None = None, overrides: tuple[str, ...] = ()) -> Iterator[str]:
    """A fresh broker process (optionally under cProfile); yields its bootstrap address."""
    with tempfile.TemporaryDirectory() as tmp:
        python_args = ("-m", "cProfile", "-o", str(profile_to)) if profile_to else ()
        process = BrokerProcess(Path(tmp) / "data", python_args=python_args, log_level="warning",
                                overrides=overrides).start()
        try:
            yield process.bootstrap
        finally:
            process.stop()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--quick", action="store_true", help="smaller counts")
    parser.add_argument("--profile", action="store_true", help="profile the broker under producer load")
    args = parser.parse_args()
    scale = 10 if args.quick else 1

    print(f"machine: {ceiling.machine_summary()}", flush=True)
    tcp = ceiling.loopback_tcp_mb_s((2 << 30) // scale)
    disk = ceiling.file_append_mb_s((1 << 30) // scale)
    print(f"ceiling: loopback TCP {tcp:,.0f} MB/s, file append {disk:,.0f} MB/s", flush=True)

    rows: list[tuple[str, clients.Throughput]] = []

    def measured(row: str, label: str, figure: clients.Throughput) -> None:
        rows.append((row, figure))
        print(f"{label}: {figure.rates}", flush=True)

    with broker() as bootstrap:
        for size, count in ((100, 2_000_000 // scale), (1024, 500_000 // scale)):
            topic = f"bench-{size}"
            clients.create_topic(bootstrap, topic)
            measured(f"produce {size} B, acks=1", f"produce {size} B", clients.produce(bootstrap, topic, count, size))
            measured(f"consume {size} B", f"consume {size} B", clients.consume(bootstrap, topic, count, size))
        for size in (100, 1024):
            topic = f"bench-raw-{size}"
            clients.create_topic(bootstrap, topic)
            count = (5_000_000 if size == 100 else 1_000_000) // scale
            measured(f"broker ingest {size} B (pre-built batches of 1000)", f"broker ingest {size} B",
                     raw.produce(bootstrap, topic, count, size))
            measured(f"broker fetch {size} B (raw FetchRequests)", f"broker fetch {size} B",
                     raw.fetch(bootstrap, topic, count, size))
        clients.create_topic(bootstrap, "bench-latency")
        p50, p99 = clients.produce_latency(bootstrap, "bench-latency", rate=1000, seconds=10 / scale)
        print(f"produce latency at 1000 rec/s, acks=all: p50 {p50:.2f} ms, p99 {p99:.2f} ms", flush=True)

    print("\n| workload | records/s | MB/s | share of loopback TCP |\n| --- | ---: | ---: | ---: |")
    for name, t in rows:
        print(f"| {name} | {t.records_per_s:,.0f} | {t.mb_per_s:,.1f} | {t.mb_per_s / tcp:.1%} |")
    print(f"| produce latency, 1000 rec/s, acks=all | p50 {p50:.2f} ms | p99 {p99:.2f} ms | |")

    # Kafka's 3 s initial rebalance delay would dominate the first figure; it is a setting, not work.
    with broker(overrides=("group.initial.rebalance.delay.ms=0",)) as bootstrap:
        clients.create_topic(bootstrap, "bench-groups", partitions=groups.PARTITIONS)
        first, after = groups.rebalance(bootstrap, "bench-groups")
        rate = groups.commits(bootstrap, "bench-groups", 2000 // scale)
    print(f"\ngroup of {groups.MEMBERS} over {groups.PARTITIONS} partitions: all assigned in {first:.2f} s; "
          f"after one member leaves, reassigned in {after:.2f} s", flush=True)
    print(f"synchronous commits of {groups.PARTITIONS} offsets: {rate:,.0f} commits/s "
          f"({rate * groups.PARTITIONS:,.0f} offsets/s)", flush=True)

    if args.profile:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "broker.prof"
            with broker(profile_to=out) as bootstrap:
                clients.create_topic(bootstrap, "bench-profile")
                # Raw batches, so the broker (not the client) is what runs flat out.
                raw.produce(bootstrap, "bench-profile", 2_000_000 // scale, 100)
                raw.fetch(bootstrap, "bench-profile", 2_000_000 // scale, 100)
            print("\nbroker profile (top 25 by own time):")
            pstats.Stats(str(out)).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
