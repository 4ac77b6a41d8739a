"""Mirror throughput: Causeway's mirror against the loop a user would otherwise write.

    python -m bench.mirror            # full run (a few minutes)
    python -m bench.mirror --quick    # smaller counts, for a smoke check

1. Unthrottled: N records preloaded in a source broker are copied to a target broker, by
   (a) a confluent-kafka consume-then-produce loop (librdkafka both ways, batching on), and
   (b) `causeway mirror` as its own process. Both are timed from start to the last record
   acknowledged at the target, beside this machine's loopback TCP ceiling.
2. Over an emulated WAN link (100 Mbit/s, 40 ms each way, through the WAN emulator): how much
   of the link's bandwidth the mirror fills while it catches up, on one connection (tasks.max=1),
   since Toxiproxy's bandwidth toxic limits each connection separately.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench import ceiling, clients
from bench.clients import Throughput as Copy
from deploy.broker_process import BrokerProcess
from deploy.launcher.launch import free_port, link_toxics
from deploy.launcher.plan import LinkPlan
from deploy.wan.client import WanClient
from deploy.wan.process import WanProcess

PARTITIONS = 4
ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def brokers(tmp: Path, source_overrides: tuple[str, ...] = ()) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    tmp.mkdir(parents=True, exist_ok=True)
    source = BrokerProcess(tmp / "source", log_level="warning", overrides=source_overrides).start()
    target = BrokerProcess(tmp / "target", log_level="warning").start()
    try:
        yield source, target
    finally:
        source.stop()
        target.stop()


def end_offsets(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-offsets"})
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if metadata is None or metadata.error is not None:
            return 0
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                   for p in metadata.partitions)
    finally:
        consumer.close()


def baseline(source: str, target: str, topic: str, count: int, size: int) -> Copy:
    """What a user writes without a mirror: consume with librdkafka, produce each record on."""
    admin = AdminClient({"bootstrap.servers": target})
    admin.create_topics([NewTopic(f"copy.{topic}", PARTITIONS, 1)])[f"copy.{topic}"].result(30)
    consumer = Consumer({"bootstrap.servers": source, "group.id": "bench-copy", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "fetch.max.bytes": 52_428_800,
                         "max.partition.fetch.bytes": 10_485_760})
    producer = Producer({"bootstrap.servers": target, "acks": "all", "linger.ms": 5, "batch.size": 1_000_000,
                         "enable.idempotence": True, "queue.buffering.max.messages": 1_000_000,
                         "queue.buffering.max.kbytes": 1_048_576})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    seen = 0
    start = time.perf_counter()
    deadline = start + 600
    while seen < count and time.perf_counter() < deadline:
        for msg in consumer.consume(num_messages=10_000, timeout=1.0):
            if msg.error() is not None:
                continue
            clients.produce_when_queued(producer, f"copy.{topic}", msg.value(), msg.key(), partition=msg.partition(),
                                        timestamp=msg.timestamp()[1], headers=msg.headers())
            seen += 1
        producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("baseline: records left undelivered")
    elapsed = time.perf_counter() - start
    consumer.close()
    return Copy(seen, size, elapsed)


def run_mirror(source: str, target: str, topic: str, count: int, size: int, tmp: Path, *,
               settings: dict[str, object] | None = None) -> Copy:
    """`causeway mirror` as a process, from its ready line (Python's start-up, about a second here,
    left out; connecting and creating topics counted) until every record is at the target."""
    config = tmp / f"mirror-{topic}.yaml"
    config.write_text(json.dumps({
        "source": {"alias": "src", "bootstrap": source}, "target": {"alias": "dst", "bootstrap": target},
        "topics": {"include": [re.escape(topic)]}, "refresh.topics.interval.seconds": 0.5, **(settings or {})}))
    proc = subprocess.Popen([sys.executable, "-m", "deploy.cli", "mirror", "--config", str(config),
                             "--log-level", "warning"], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        if not proc.stdout.readline().startswith("causeway mirror ready:"):
            raise RuntimeError(f"the mirror did not start (exit {proc.wait()})")
        start = time.perf_counter()
        deadline = start + 600
        while end_offsets(target, f"src.{topic}") < count:
            if time.perf_counter() > deadline or proc.poll() is not None:
                raise RuntimeError(f"mirror did not copy {count} records (exit {proc.poll()})")
            time.sleep(0.02)  # polling another process's progress; the resolution is 20 ms
        elapsed = time.perf_counter() - start
    finally:
        proc.terminate()
        proc.wait(30)
    return Copy(count, size, elapsed)


def link_ceiling_mb_s(api: str, toxics: list[dict[str, Any]], total_bytes: int = 30_000_000) -> float:
    """MB/s of raw bytes through one connection of a proxy with the link's toxics: what the
    emulated link itself delivers, the mirror's ceiling over it."""
    server = socket.create_server(("127.0.0.1", 0))
    proxy = free_port()
    WanClient(api).create_proxy("ceiling", f"127.0.0.1:{proxy}", f"127.0.0.1:{server.getsockname()[1]}").add_toxics(
        toxics)
    received = 0

    def sink() -> None:
        nonlocal received
        conn, _ = server.accept()
        with conn:
            while chunk := conn.recv(1 << 20):
                received += len(chunk)

    thread = threading.Thread(target=sink)
    thread.start()
    with socket.create_connection(("127.0.0.1", proxy)) as client:
        start = time.perf_counter()
        payload = b"x" * (1 << 20)
        for _ in range(total_bytes >> 20):
            client.sendall(payload)
        client.shutdown(socket.SHUT_WR)
        thread.join()
        elapsed = time.perf_counter() - start
    server.close()
    return received / elapsed / 1e6


def over_wan(count: int, size: int, tmp: Path, rate_mbit: int = 100, latency_ms: int = 40) -> tuple[Copy, float]:
    """Mirror through an emulated link; returns the copy and the link's own throughput in MB/s
    (one connection, raw bytes), measured in the same run."""
    local, wan, proxy = free_port(), free_port(), free_port()
    overrides = (f"listeners=LOCAL://127.0.0.1:{local},WAN://127.0.0.1:{wan}",
                 f"advertised.listeners=LOCAL://127.0.0.1:{local},WAN://127.0.0.1:{proxy}",
                 "listener.security.protocol.map=LOCAL:PLAINTEXT,WAN:PLAINTEXT", "inter.broker.listener.name=LOCAL")
    with WanProcess() as emulator, brokers(tmp / "wan", overrides) as (source, target):
        api = emulator.api
        local_bootstrap = source.listeners["LOCAL"]
        link_proxy = WanClient(api).create_proxy("link", f"127.0.0.1:{proxy}", f"127.0.0.1:{wan}")
        # The toxics `causeway up` gives a link of this latency and bandwidth.
        toxics = link_toxics(LinkPlan("a", "b", latency_ms, 0, rate_mbit * 1_000_000 // 8))
        link_proxy.add_toxics(toxics)
        link = link_ceiling_mb_s(api, toxics)
        clients.create_topic(local_bootstrap, "wan", PARTITIONS)
        clients.produce(local_bootstrap, "wan", count, size)
        # One fetch lane, so one TCP connection: Toxiproxy's bandwidth toxic limits each connection,
        # and several lanes would each get the whole rate.
        copy = run_mirror(f"127.0.0.1:{proxy}", target.bootstrap, "wan", count, size, tmp, settings={"tasks.max": 1})
    return copy, link


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.mirror")
    parser.add_argument("--quick", action="store_true", help="smaller counts")
    args = parser.parse_args()
    scale = 10 if args.quick else 1
    print(f"machine: {ceiling.machine_summary()}", flush=True)
    tcp = ceiling.loopback_tcp_mb_s((2 << 30) // scale)
    print(f"ceiling: loopback TCP {tcp:,.0f} MB/s", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for size, count in ((100, 1_000_000 // scale), (1024, 200_000 // scale)):
            with brokers(tmp / f"plain-{size}") as (source, target):
                topic = f"bench-{size}"
                clients.create_topic(source.bootstrap, topic, PARTITIONS)
                clients.produce(source.bootstrap, topic, count, size)
                base = baseline(source.bootstrap, target.bootstrap, topic, count, size)
                mirror = run_mirror(source.bootstrap, target.bootstrap, topic, count, size, tmp)
            for name, copy in ((f"confluent-kafka consume->produce loop, {size} B", base),
                               (f"causeway mirror, {size} B", mirror)):
                rows.append((name, copy))
                print(f"{name}: {copy.rates} ({copy.records:,} records in {copy.seconds:.1f} s)", flush=True)
        wan_count = 300_000 // scale
        wan, capacity = over_wan(wan_count, 1024, tmp)
        print(f"causeway mirror over 100 Mbit/s (12.5 MB/s), 40 ms one way: {wan.mb_per_s:,.1f} MB/s; the link "
              f"itself carries {capacity:.1f} MB/s on one connection ({100 * wan.mb_per_s / capacity:.0f}% of it; "
              f"{wan.records:,} records of 1 KiB in {wan.seconds:.1f} s)", flush=True)
    print("\n| copy | records/s | MB/s |\n|---|---:|---:|")
    for name, copy in rows:
        print(f"| {name} | {copy.records_per_s:,.0f} | {copy.mb_per_s:,.1f} |")
    print(f"| causeway mirror over a 100 Mbit/s, 40 ms link (the link: {capacity:.1f} MB/s), 1024 B | "
          f"{wan.records_per_s:,.0f} | {wan.mb_per_s:,.1f} |")


if __name__ == "__main__":
    main()
