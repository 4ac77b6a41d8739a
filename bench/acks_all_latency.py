"""One-record acks=all latency against the number of partitions on a 3-broker cluster.

    python -m bench.acks_all_latency                     # 10, 1,000 and 10,000 partitions
    python -m bench.acks_all_latency --sizes 10,1000     # fewer sizes
    python -m bench.acks_all_latency --samples 500
    python -m bench.acks_all_latency --load-rate 2000   # under load: 2,000 records/s over the filler

One ZooKeeper node and three ZooKeeper-mode broker processes on this machine (as
bench/replication.py), `max.broker.partitions` raised so that 10,000 RF 3 partitions fit. A
one-partition RF 3 topic (`min.insync.replicas=2`) is the one written; a second RF 3 topic, the
filler, is grown (CreatePartitions) so that the cluster holds 10, then 1,000, then 10,000
partitions in all. At each size, once every partition has its whole ISR, a librdkafka producer
(acks=all, linger.ms=0) sends one 100-byte record at a time and waits for its acknowledgement;
the p50 and p99 of those round trips are printed with the brokers' CPU use over the samples
(an idle cluster's followers should cost next to nothing however many partitions they follow).
With ``--load-rate N`` another producer (acks=1) writes N records/s spread over the filler's
partitions all the while (the other partitions' changes each fetch round must carry). Then a
consumer commits an offset at a time (synchronous OffsetCommit, which waits for the ISR
of its `__consumer_offsets` partition, RF 3, just as acks=all does): the same percentiles.

The machine's floor is printed beside it (bench/ceiling.py): the round trip of 100 bytes between
two Python threads over loopback, which no broker request can beat.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from bench import ceiling
from bench.replication import cluster, cpu_seconds, zookeeper
from deploy.broker_process import BrokerProcess

TOPIC = "latency"
FILLER = "filler"
MIN_ISR = {"min.insync.replicas": "2"}
# Replicas per broker at 10,000 partitions of RF 3 on 3 brokers, plus the internal topics'.
MAX_BROKER_PARTITIONS = 12000
PER_REQUEST = 4000


def wait_full_isr(admin: AdminClient, total: int, timeout_s: float) -> float:
    """Poll metadata until `total` partitions exist, each with a leader and 3 in-sync replicas;
    the seconds it took. Raises RuntimeError past `timeout_s`."""
    start = time.monotonic()
    while True:
        meta = admin.list_topics(timeout=30).topics
        parts = [p for name in (TOPIC, FILLER) if name in meta for p in meta[name].partitions.values()]
        ready = sum(1 for p in parts if p.leader >= 0 and len(p.isrs) == 3)
        if len(parts) == total and ready == total:
            return time.monotonic() - start
        if time.monotonic() - start > timeout_s:
            raise RuntimeError(f"{ready} of {total} partitions have their whole ISR after {timeout_s} s")
        time.sleep(1)


def grow(admin: AdminClient, size: int, timeout_s: float) -> float:
    """Bring the cluster to `size` partitions (the measured one and the filler's); seconds taken."""
    meta = admin.list_topics(timeout=30).topics
    if TOPIC not in meta:
        for future in admin.create_topics([NewTopic(TOPIC, 1, 3, config=MIN_ISR)]).values():
            future.result(60)
    start = time.monotonic()
    have = len(meta[FILLER].partitions) if FILLER in meta else 0
    while have < size - 1:
        # Steps within the broker's max.partitions.per.request (5000), each given time to settle.
        step = min(size - 1, have + PER_REQUEST)
        if have == 0:
            futures = admin.create_topics([NewTopic(FILLER, step, 3, config=MIN_ISR)], request_timeout=600)
        else:
            futures = admin.create_partitions([NewPartitions(FILLER, step)], request_timeout=600)
        for future in futures.values():
            future.result(600)
        wait_full_isr(admin, step + 1, timeout_s)
        have = step
    wait_full_isr(admin, size, timeout_s)
    return time.monotonic() - start


def samples(bootstrap: str, count: int) -> list[float]:
    """Seconds from produce() to the acknowledgement of each of `count` one-record requests."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                         "message.timeout.ms": 60000})
    payload = b"x" * 100
    for _ in range(20):  # warm up: metadata, connections
        producer.produce(TOPIC, payload, partition=0)
        producer.flush(60)
    times = []
    for _ in range(count):
        start = time.perf_counter()
        producer.produce(TOPIC, payload, partition=0)
        if producer.flush(60) != 0:
            raise RuntimeError("a record was not acknowledged within 60 s")
        times.append(time.perf_counter() - start)
    return times


@contextmanager
def load(bootstrap: str, rate: int, partitions: int) -> Iterator[None]:
    """A producer thread writing `rate` records/s of 100 B round-robin over the filler's
    `partitions` while the block runs (nothing when `rate` is 0)."""
    if rate <= 0 or partitions <= 0:
        yield
        return
    stop = threading.Event()

    def run() -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5})
        sent, start = 0, time.monotonic()
        while not stop.is_set():
            due = int((time.monotonic() - start) * rate)
            while sent < due:
                try:
                    producer.produce(FILLER, b"y" * 100, partition=sent % partitions)
                except BufferError:
                    break
                sent += 1
            producer.poll(0.005)
        producer.flush(30)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(60)


def commit_samples(bootstrap: str, count: int) -> list[float]:
    """Seconds each of `count` synchronous commits of one offset took."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-commits", "enable.auto.commit": False})
    try:
        times = []
        for i in range(count + 20):  # the first ones find the coordinator
            start = time.perf_counter()
            consumer.commit(offsets=[TopicPartition(TOPIC, 0, i)], asynchronous=False)
            if i >= 20:
                times.append(time.perf_counter() - start)
        return times
    finally:
        consumer.close()


def percentile(sorted_times: list[float], q: float) -> float:
    return sorted_times[min(len(sorted_times) - 1, int(len(sorted_times) * q))]


def broker_cpu(brokers: list[BrokerProcess]) -> float:
    return sum(cpu_seconds(b.proc.pid) for b in brokers if b.proc is not None)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.acks_all_latency")
    parser.add_argument("--sizes", default="10,1000,10000", help="partition counts, ascending")
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--isr-timeout-s", type=float, default=1200)
    parser.add_argument("--load-rate", type=int, default=0, help="records/s to the filler while sampling")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"machine: {ceiling.machine_summary()}; load: {args.load_rate} records/s", flush=True)
    rt50, rt99 = ceiling.loopback_round_trip_us()
    print(f"ceiling: loopback round trip of 100 B between two Python threads p50 {rt50:.0f} µs, p99 {rt99:.0f} µs",
          flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        overrides = (f"max.broker.partitions={MAX_BROKER_PARTITIONS}",)
        with zookeeper(tmp / "zk") as connect, cluster(tmp, connect, overrides=overrides) as brokers:
            bootstrap = ",".join(b.bootstrap for b in brokers)
            admin = AdminClient({"bootstrap.servers": bootstrap})
            for size in sizes:
                took = grow(admin, size, args.isr_timeout_s)
                print(f"{size} partitions: whole ISR everywhere after {took:.0f} s", flush=True)
                with load(bootstrap, args.load_rate, size - 1):
                    cpu_before, wall_before = broker_cpu(brokers), time.monotonic()
                    times = sorted(samples(bootstrap, args.samples))
                    cpu = (broker_cpu(brokers) - cpu_before) / (time.monotonic() - wall_before)
                    commits = sorted(commit_samples(bootstrap, args.samples))
                p50, p99 = percentile(times, 0.5) * 1e3, percentile(times, 0.99) * 1e3
                c50, c99 = percentile(commits, 0.5) * 1e3, percentile(commits, 0.99) * 1e3
                rows.append((size, p50, p99, cpu, c50, c99))
                print(f"{size} partitions: acks=all p50 {p50:.1f} ms, p99 {p99:.1f} ms over {len(times)} records; "
                      f"brokers' CPU {cpu:.2f} cores; OffsetCommit p50 {c50:.1f} ms, p99 {c99:.1f} ms", flush=True)
    print("\n| partitions (RF 3, 3 brokers) | acks=all p50 | p99 | brokers' CPU while sampling "
          "| OffsetCommit p50 | p99 |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for size, p50, p99, cpu, c50, c99 in rows:
        print(f"| {size:,} | {p50:.1f} ms | {p99:.1f} ms | {cpu:.2f} cores | {c50:.1f} ms | {c99:.1f} ms |")
    print(f"\nceiling: loopback round trip p50 {rt50:.0f} µs, p99 {rt99:.0f} µs")


if __name__ == "__main__":
    main()
