"""A `causeway mirror` process for the crash tests: started from its YAML config, fed by a
producer that writes steadily meanwhile, and watched through its status file."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

__all__ = ["produce_steadily", "read_status", "start_mirror", "status_positions"]

REPO = Path(__file__).resolve().parents[2]


def start_mirror(config: Path, log: Path, status: Path) -> subprocess.Popen[str]:
    """A mirror process once it says it is ready; its stderr appended to `log`."""
    with log.open("a") as err:
        proc = subprocess.Popen([sys.executable, "-m", "deploy.cli", "mirror", "--config", str(config),
                                 "--status-file", str(status)], cwd=REPO, stdout=subprocess.PIPE, stderr=err, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith("causeway mirror ready:")
    return proc


def produce_steadily(bootstrap: str, done: threading.Event, records: int, *, seq_headers: bool = False) -> None:
    """`records` records to "orders" (3 partitions, round robin) in small batches spread over
    time, each with a "seq" header when `seq_headers`; `done` is set once all are acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 2})
    for i in range(records):
        headers = [("seq", str(i).encode())] if seq_headers else None
        producer.produce("orders", key=b"k%d" % i, value=b"v%d" % i, partition=i % 3, headers=headers)
        if i % 100 == 99:
            producer.flush(30)  # small batches, spread over time
    assert producer.flush(30) == 0
    done.set()


def read_status(status: Path) -> dict[str, Any] | None:
    """The mirror's status file, None while it is missing or half-written."""
    try:
        report: dict[str, Any] = json.loads(status.read_text())
    except (OSError, ValueError):
        return None
    return report


def status_positions(report: dict[str, Any]) -> dict[tuple[str, int], int]:
    """Each partition's position in a status report, by (topic, partition)."""
    return {(q["topic"], q["partition"]): q["position"] for q in report["partitions"]}
