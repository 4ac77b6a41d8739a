"""RTO of a link-mode failover as an operator runs it: `causeway status`, then `causeway mirror
promote --failover`, then the first produce and the first consume at the DR site.

    .venv/bin/python -m bench.failover_rto                       # examples/dr-link.yaml, 3 runs
    .venv/bin/python -m bench.failover_rto --runs 1 --planned    # a planned promote instead

Each run brings the topology up with `causeway up -d` in a fresh state dir, writes `--records`
records to every partition of `orders` at the primary (confluent-kafka, acks=all), has group
`rto` read half of them and commit, and waits until the DR site holds the copy and the group's
offsets. Then the disaster: the WAN link is cut through the emulator's Toxiproxy API and every
primary broker is SIGSTOPped (frozen: it accepts connections and never answers). From that
moment: `causeway status`, `causeway mirror promote --failover`, a producer at the DR site until
its first record is acknowledged (RTO to the first produce), and group `rto` consuming there until
its first record (RTO to the first consume; how many records it re-read is counted). With
`--planned` nothing is frozen: promote without --failover, after the producers stopped. Each run
ends with `causeway down`. Nothing here asserts a speed; it prints the figures. The link is cut
and the ends are read with the drill's own parts (deploy/drill/); `causeway drill failover` runs
the same failover under a steady load and counts every record (docs/operations/drills.md).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from deploy.drill.disaster import link_proxies, set_link
from deploy.drill.verify import log_ends
from deploy.launcher.control import read_state

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "dr-link.yaml"
TOPIC = "orders"
GROUP = "rto"


def causeway(*args: str, check: bool = True) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "deploy.cli", *args], capture_output=True, text=True,
                          timeout=300)
    if check and done.returncode != 0:
        raise RuntimeError(f"causeway {' '.join(args)} exited {done.returncode}: {done.stdout}{done.stderr}")
    return time.monotonic() - start, done


def produce(bootstrap: str, count: int, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for p in range(partitions):
        for i in range(count):
            producer.produce(TOPIC, value=b"%d-%d" % (p, i), partition=p)
    if producer.flush(60) != 0:
        raise RuntimeError("records not delivered")


def consume_and_commit(bootstrap: str, upto: int, partitions: int) -> None:
    """Group GROUP reads `upto` records of every partition and commits after them."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(partitions)])
    seen = dict.fromkeys(range(partitions), 0)
    deadline = time.monotonic() + 60
    while any(n < upto for n in seen.values()) and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            partition = message.partition() or 0
            seen[partition] = min(upto, seen[partition] + 1)
    consumer.commit(offsets=[TopicPartition(TOPIC, p, upto) for p in range(partitions)], asynchronous=False)
    consumer.close()


def committed(bootstrap: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP})
    try:
        got = consumer.committed([TopicPartition(TOPIC, p) for p in range(partitions)], timeout=10)
        return [tp.offset for tp in got]
    finally:
        consumer.close()


def high_watermarks(bootstrap: str, partitions: int) -> list[int]:
    ends = log_ends(bootstrap, [(TOPIC, p) for p in range(partitions)])
    return [ends[(TOPIC, p)] for p in range(partitions)]


def wait(check: Any, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.2)


def first_produce(bootstrap: str) -> None:
    """Until one record is acknowledged at `bootstrap` (each try bounded by librdkafka)."""
    outcomes: list[object] = []
    while not outcomes or outcomes[-1] is not None:
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 5000})
        producer.produce(TOPIC, value=b"dr", partition=0, on_delivery=lambda e, _m: outcomes.append(e))
        producer.flush(10)


def first_consume(bootstrap: str, expected_start: list[int]) -> tuple[float, int]:
    """Group GROUP at the DR site until its first record: when, and how many records of the
    primary it read again (below the offsets it had committed there)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([TOPIC])
    reread = 0
    first: float | None = None
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                if first is not None:
                    break
                continue
            first = first or time.monotonic()
            if (message.offset() or 0) < expected_start[message.partition() or 0]:
                reread += 1
    finally:
        consumer.close()
    if first is None:
        raise RuntimeError("the group read nothing at the DR site")
    return first, reread


def run_once(planned: bool, records: int) -> dict[str, float | int]:
    with tempfile.TemporaryDirectory(prefix="rto-") as tmp:
        state_dir = Path(tmp) / "state"
        causeway("up", "-d", "--state-dir", str(state_dir), str(EXAMPLE))
        stopped: list[int] = []
        try:
            state = json.loads((state_dir / "state.json").read_text())
            east, west = state["clusters"]["east"], state["clusters"]["west"]
            partitions = 3
            produce(east["bootstrap"], records, partitions)
            consume_and_commit(east["bootstrap"], records // 2, partitions)
            wait(lambda: high_watermarks(west["bootstrap"], partitions) == [records] * partitions, "the copy")
            wait(lambda: committed(west["bootstrap"], partitions) == [records // 2] * partitions, "group offsets")
            # The group reads on at the primary after the last periodic copy of its offsets.
            consume_and_commit(east["bootstrap"], records, partitions)
            start = [records] * partitions
            disaster = time.monotonic()
            if not planned:
                launched = read_state(state_dir)
                assert launched is not None
                set_link(launched.wan.api, link_proxies(launched, "east", "west"), enabled=False)
                for broker in east["brokers"]:
                    os.kill(broker["pid"], signal.SIGSTOP)
                    stopped.append(broker["pid"])
            status_s, _ = causeway("status", "--state-dir", str(state_dir), check=False)
            promote = ["mirror", "promote", str(EXAMPLE), "--state-dir", str(state_dir), "--mirror", "east-to-west"]
            promote_s, done = causeway(*promote, *([] if planned else ["--failover"]))
            first_produce(west["bootstrap"])
            produced = time.monotonic()
            consumed, reread = first_consume(west["bootstrap"], start)
            return {"status_s": status_s, "promote_s": promote_s, "rto_produce_s": produced - disaster,
                    "rto_consume_s": consumed - disaster, "reread": reread}
        finally:
            for pid in stopped:
                os.kill(pid, signal.SIGCONT)
            causeway("down", "--state-dir", str(state_dir), check=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--records", type=int, default=200, help="records per partition before the disaster")
    parser.add_argument("--planned", action="store_true", help="a planned promote (nothing frozen)")
    args = parser.parse_args(argv)
    results = [run_once(args.planned, args.records) for _ in range(args.runs)]
    for r in results:
        print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in r.items()}))
    for key in ("status_s", "promote_s", "rto_produce_s", "rto_consume_s"):
        print(f"{key}: median {statistics.median(float(r[key]) for r in results):.2f}")
    print(f"reread: {[r['reread'] for r in results]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
