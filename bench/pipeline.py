"""Records/s of a batch read through the Spark data source, beside librdkafka and Spark's own Kafka
source (`format("kafka")`, jars from `make peers`) reading the same topic in the same run, with
Spark's start-up reported apart.

    python -m bench.pipeline [--records 1000000] [--partitions 2] [--value-bytes 100] [--audit-runs 2]

Steps, one broker process for all of them: produce the topic with confluent-kafka; read it all
with a confluent-kafka consumer (assign, from the start to each partition's end); start a local
SparkSession (timed on its own); read the whole topic with `spark.read.format("causeway")` into
Spark's `noop` sink twice (the first run also pays for starting the Python workers), then with
`spark.read.format("kafka")` (spark-sql-kafka-0-10 on `spark.jars`, same session) twice. Before
the session stops, `pipeline.audit.audit` compares the topic with a copy produced the same way to
a second broker (equal offsets: a link-mode mirror's copy), `--audit-runs` times (0 skips it).

Beside those figures, this machine's own ceilings from the same run: `bench.ceiling`'s loopback
TCP and file append (as every bench prints them), and the one-thread ceiling of the read itself,
measured before Spark starts: the topic fetched with `broker.client` alone and decoded to Arrow
with `ColumnBuilder` alone, window by window (`--window` records), so the whole topic's bytes are
never held at once. The load average is printed at the start and the end.

The records carry fixed CreateTimes from 2023 (the audit compares timestamps, and the copy must
carry the same), so the topic is created with `retention.ms=-1`: under the broker's default 7 days
its first retention check (log.retention.check.interval.ms, 5 minutes) would delete every
segment, which is what emptied the 10-million-record run before its ceiling step.
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import trio
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CKTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench import ceiling
from bench.peers import PeerMissing, peer
from broker.client import Client, open_client
from deploy.broker_process import BrokerProcess
from pipeline.columns import ColumnBuilder
from pipeline.fetching import Chunk, fetch_range_chunks
from pipeline.options import parse_read_options
from pipeline.planning import OffsetRange, plan_read

TOPIC = "bench-pipeline"
# Kafka's "keep forever": the records' CreateTimes are years old (see the module's docstring).
TOPIC_CONFIG = {"retention.ms": "-1"}
WINDOW = 500_000  # records fetched, then decoded, at a time by the ceiling step (about 60 MB of 100 B records)


def produce(bootstrap: str, records: int, partitions: int, value_bytes: int) -> None:
    """The same records in the same partitions in the same order on every call: a second broker
    given the same call holds a copy with equal offsets, what a link-mode mirror leaves."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, partitions, 1, config=TOPIC_CONFIG)])[TOPIC].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                         "queue.buffering.max.messages": 1_000_000})
    value = b"x" * value_bytes
    base_ms = 1_700_000_000_000  # fixed CreateTime per record: the audit compares timestamps too
    for i in range(records):
        while True:
            try:
                producer.produce(TOPIC, value=value, key=b"%d" % i, partition=i % partitions,
                                 timestamp=base_ms + i)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(120) == 0


def librdkafka_read(bootstrap: str, records: int, partitions: int) -> float:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-pipeline", "enable.auto.commit": False,
                         "enable.partition.eof": True, "fetch.max.bytes": 52428800})
    start = time.perf_counter()
    consumer.assign([CKTopicPartition(TOPIC, p, 0) for p in range(partitions)])
    seen = 0
    eof: set[int] = set()
    while len(eof) < partitions:
        for msg in consumer.consume(10000, 1.0):
            error = msg.error()
            if error is not None:
                partition = msg.partition()
                if error.code() == KafkaError._PARTITION_EOF and partition is not None:
                    eof.add(partition)
                continue
            seen += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    assert seen == records, (seen, records)
    return elapsed


def windows(rng: OffsetRange, size: int) -> list[OffsetRange]:
    """`rng` cut into consecutive ranges of at most `size` offsets."""
    return [OffsetRange(rng.topic, rng.partition, lo, min(lo + size, rng.end))
            for lo in range(rng.start, rng.end, size)]


def decode_only(bootstrap: str, records: int, window: int = WINDOW) -> tuple[float, float]:
    """Seconds to fetch the whole topic with broker.client alone, and to decode it to Arrow alone,
    on one thread: each partition window by window, a window's chunks fetched (timed), then
    decoded (timed) and dropped, so at most one window's bytes are held whatever the topic's size.
    A window's last fetch answer may run past its end; the next window fetches those batches again
    and the decoder keeps only its own offsets, as Spark's tasks over split ranges do.

    Raises RuntimeError when the topic no longer holds every record from offset 0 (a ceiling over
    fewer records than the other figures would be no ceiling)."""
    opts = parse_read_options({"kafka.bootstrap.servers": bootstrap, "subscribe": TOPIC})
    plan = plan_read(opts)
    if sum(r.size for r in plan.ranges) != records or any(r.start != 0 for r in plan.ranges):
        held = ", ".join(f"{r.topic}-{r.partition} [{r.start}, {r.end})" for r in plan.ranges)
        raise RuntimeError(f"decode_only: the topic should hold offsets [0, end) of {records} records in all, "
                         f"it holds {held}: were segments deleted (retention)?")
    fetched = decoded = 0.0
    rows = 0

    async def fetch(rng: OffsetRange, client: Client) -> list[Chunk]:
        send, receive = trio.open_memory_channel[Chunk](math.inf)
        async with send:
            await fetch_range_chunks(client, rng, opts, send)
        async with receive:
            return [chunk async for chunk in receive]

    async def run() -> None:
        nonlocal fetched, decoded, rows
        async with open_client(bootstrap) as client:
            for rng in plan.ranges:
                builder = ColumnBuilder(rng.topic, rng.partition, include_headers=False)
                for part in windows(rng, window):
                    start = time.perf_counter()
                    chunks = await fetch(part, client)
                    fetched += time.perf_counter() - start
                    start = time.perf_counter()
                    for chunk in chunks:
                        builder.add(chunk.records, chunk.start, chunk.end)
                        if len(builder) >= 65536:
                            rows += builder.take().num_rows
                    del chunks
                    decoded += time.perf_counter() - start
                start = time.perf_counter()
                rows += builder.take().num_rows
                decoded += time.perf_counter() - start

    trio.run(run)
    assert rows == records, (rows, records)
    return fetched, decoded


def audit_bench(spark: Any, bootstrap: str, tmp: str, n: int, args: argparse.Namespace) -> None:
    """Audit the topic against a copy on a second broker, produced the same way so its offsets
    equal the source's (a link-mode mirror's copy); records/s counts source records audited."""
    from pipeline.audit import MirrorSpec, audit

    target = BrokerProcess(Path(tmp) / "target", log_level="warning").start()
    try:
        start = time.perf_counter()
        produce(target.bootstrap, n, args.partitions, args.value_bytes)
        print(f"copy produced to a second broker in {time.perf_counter() - start:.1f}s")
        spec = MirrorSpec(bootstrap, target.bootstrap, mode="link", name="bench")
        for run in range(1, args.audit_runs + 1):
            start = time.perf_counter()
            phases: list[tuple[float, str]] = []
            def say(line: str, phases: list[tuple[float, str]] = phases, start: float = start) -> None:
                phases.append((time.perf_counter() - start, line))

            report = audit(spark, spec, say=say)
            took = time.perf_counter() - start
            assert all(p.clean for p in report.partitions), report
            assert sum(p.source_records for p in report.partitions) == n
            for at, line in phases:
                print(f"    {at:7.1f}s  {line}")
            print(f"Spark audit, run {run}:         {n / took:12,.0f} source records/s audited "
                  f"({took:.2f}s, {args.master}, link mode, clean)")
    finally:
        target.stop()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.pipeline")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--audit-runs", type=int, default=2, help="audit runs (0 skips the audit)")
    parser.add_argument("--window", type=int, default=WINDOW,
                        help="records per partition fetched, then decoded, at a time by the one-thread ceiling")
    args = parser.parse_args()
    n = args.records
    print(f"machine: {ceiling.machine_summary()}; load average {load()}", flush=True)
    tcp = ceiling.loopback_tcp_mb_s()
    disk = ceiling.file_append_mb_s()
    print(f"ceiling: loopback TCP {tcp:,.0f} MB/s, file append {disk:,.0f} MB/s", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data", log_level="warning").start()
        try:
            bootstrap = broker.bootstrap
            start = time.perf_counter()
            produce(bootstrap, n, args.partitions, args.value_bytes)
            print(f"produced {n} records of {args.value_bytes} B in {args.partitions} partitions "
                  f"in {time.perf_counter() - start:.1f}s")
            rd = librdkafka_read(bootstrap, n, args.partitions)
            print(f"librdkafka consumer:        {n / rd:12,.0f} records/s ({rd:.2f}s)", flush=True)
            fetched, decoded = decode_only(bootstrap, n, args.window)
            print(f"ceiling, one thread, before Spark starts ({args.window:,} records a window):", flush=True)
            print(f"  broker.client fetch alone:{n / fetched:12,.0f} records/s ({fetched:.2f}s)", flush=True)
            print(f"  decode to Arrow alone:    {n / decoded:12,.0f} records/s ({decoded:.2f}s)", flush=True)

            start = time.perf_counter()
            from pipeline.spark import session

            try:  # Spark's own Kafka source, beside ours, when `make peers` fetched it
                kafka_jars = ",".join(str(jar) for jar in peer("spark-sql-kafka").jars())
            except PeerMissing as exc:
                kafka_jars = ""
                print(f"Spark's Kafka source skipped: {exc}")
            spark = session(args.master, app_name="bench-pipeline",
                            conf={"spark.jars": kafka_jars} if kafka_jars else None)
            print(f"Spark start-up:             {time.perf_counter() - start:.1f}s (not counted below)")
            sources = [("causeway", "Spark read, run {}:          ")]
            if kafka_jars:
                sources.append(("kafka", "Spark Kafka source, run {}: "))
            for source, label in sources:
                for run in (1, 2):
                    df = (spark.read.format(source).option("kafka.bootstrap.servers", bootstrap)
                          .option("subscribe", TOPIC).load())
                    start = time.perf_counter()
                    df.write.format("noop").mode("overwrite").save()
                    took = time.perf_counter() - start
                    print(f"{label.format(run)}{n / took:12,.0f} records/s ({took:.2f}s, {args.master})")
            if kafka_jars:
                count = spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option(
                    "subscribe", TOPIC).load().count()
                assert count == n, (count, n)
            count = spark.read.format("causeway").option("kafka.bootstrap.servers", bootstrap).option(
                "subscribe", TOPIC).load().count()
            assert count == n, (count, n)
            if args.audit_runs:
                audit_bench(spark, bootstrap, tmp, n, args)
            spark.stop()
        finally:
            broker.stop()
    print(f"load average at the end: {load()}")


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
