"""MirrorMaker 2 against `causeway mirror`: the same topic, from the same Causeway source broker to
the same Causeway target, one after the other, on loopback.

    .venv/bin/python -m bench.peers.mirror_race [--records 200000] [--size 100] [--partitions 4]

Each mirror is started cold (MM2: a JVM and a Connect herder; `causeway mirror`: a Python process)
and timed from its start to the first record at the target and to the last one; its resident
memory is read from /proc at the end. MM2 copies to `east.<topic>`, `causeway mirror` to
`south.<topic>` (two source aliases, so neither resumes from the other's positions). One line of
figures per mirror, then their ratio.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.peers.events import ToolProcess, start_tool
from deploy.broker_process import BrokerProcess, rss_bytes, stop_process

REPO = Path(__file__).resolve().parents[2]
MM2_JVM_FLAGS = ("-Xms128m", "-Xmx1g", "-XX:+UseG1GC", "-Xshare:auto", "-Xlog:disable",
                 "-Xlog:all=warning,cds*=off:stderr", "-Djava.awt.headless=true")
COPY_TIMEOUT_S = 600.0
POLL_S = 0.05  # with a client per poll (~10 ms), the timings' resolution is under 0.1 s


def fill(broker: BrokerProcess, topic: str, records: int, size: int, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(timeout=60)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                         "compression.type": "none", "enable.idempotence": True})
    payload = bytes(size)
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value=payload, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(120) != 0:
        raise RuntimeError("records not acknowledged by the source")


def copied(target: BrokerProcess, topic: str, partitions: int) -> int:
    """Records at the target so far, through a new client each time: one client kept across the
    remote topic's creation went on answering "unknown partition" for it in one run."""
    consumer = Consumer({"bootstrap.servers": target.bootstrap, "group.id": "mirror-race"})
    try:
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1] for p in range(partitions))
    except KafkaException:  # not created yet
        return 0
    finally:
        consumer.close()


def race(name: str, start: Callable[[], int], target: BrokerProcess, remote: str, records: int,
         partitions: int) -> dict[str, object]:
    began = time.monotonic()
    pid = start()
    first = None
    deadline = began + COPY_TIMEOUT_S
    while True:
        count = copied(target, remote, partitions)
        now = time.monotonic()
        if count and first is None:
            first = now - began
        if count >= records:
            break
        if now > deadline:
            raise RuntimeError(f"{name}: {count} of {records} records copied in {COPY_TIMEOUT_S} s")
        time.sleep(POLL_S)  # polling another process's progress; a benchmark, not a test
    done = time.monotonic() - began
    rss = rss_bytes(pid)
    assert first is not None
    return {"mirror": name, "first_record_s": round(first, 2), "all_records_s": round(done, 2),
            "copy_s": round(done - first, 2), "records_per_s": round(records / max(done - first, 1e-9)),
            "rss_mb": round(rss / 1e6)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.peers.mirror_race", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args(argv)
    topic = "race"
    with tempfile.TemporaryDirectory(prefix="mirror-race-") as tmp:
        base = Path(tmp)
        source = BrokerProcess(base / "source", overrides=("group.initial.rebalance.delay.ms=0",)).start()
        target = BrokerProcess(base / "target", overrides=("group.initial.rebalance.delay.ms=0",)).start()
        mm2: ToolProcess | None = None
        mirror: subprocess.Popen[str] | None = None
        try:
            fill(source, topic, args.records, args.size, args.partitions)
            properties = base / "mm2.properties"
            properties.write_text("".join(f"{k} = {v}\n" for k, v in {
                "clusters": "east, west", "east.bootstrap.servers": source.bootstrap,
                "west.bootstrap.servers": target.bootstrap, "east->west.enabled": "true",
                "west->east.enabled": "false", "east->west.topics": topic, "replication.factor": "1",
                "config.storage.replication.factor": "1", "offset.storage.replication.factor": "1",
                "status.storage.replication.factor": "1", "offset-syncs.topic.replication.factor": "1",
                "heartbeats.topic.replication.factor": "1", "checkpoints.topic.replication.factor": "1",
                "tasks.max": str(args.partitions)}.items()))

            def start_mm2() -> int:
                nonlocal mm2
                mm2 = start_tool("connect-mirror-maker", str(properties), stderr_path=base / "mm2.log",
                                 jvm_flags=MM2_JVM_FLAGS)
                return mm2.proc.pid

            def start_mirror() -> int:
                nonlocal mirror
                config = base / "mirror.yaml"
                config.write_text(json.dumps({"source": {"alias": "south", "bootstrap": source.bootstrap},
                                              "target": {"alias": "west", "bootstrap": target.bootstrap},
                                              "topics": {"include": [topic]},
                                              "tasks.max": args.partitions}))
                with (base / "mirror.log").open("ab") as log:
                    mirror = subprocess.Popen([sys.executable, "-m", "deploy.cli", "mirror", "--config", str(config)],
                                              cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                              stderr=log, text=True)
                return mirror.pid

            results = [race("MirrorMaker 2 (4.3.1)", start_mm2, target, f"east.{topic}", args.records,
                            args.partitions)]
            assert mm2 is not None
            mm2.stop()
            results.append(race("causeway mirror", start_mirror, target, f"south.{topic}", args.records,
                                args.partitions))
        finally:
            if mm2 is not None:
                mm2.stop()
            if mirror is not None:
                stop_process(mirror, 60)
            source.stop()
            target.stop()
    megabytes = args.records * args.size / 1e6
    print(f"{args.records} records of {args.size} B ({megabytes:.0f} MB), {args.partitions} partitions, "
          "Causeway to Causeway on loopback")
    for result in results:
        print(json.dumps(result))
    mm2_result, causeway_result = results
    for key in ("first_record_s", "all_records_s", "copy_s"):
        ratio = float(str(mm2_result[key])) / max(float(str(causeway_result[key])), 1e-9)
        print(f"{key}: MM2 / causeway mirror = {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
