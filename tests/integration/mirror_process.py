"""A `causeway mirror` process for the crash tests and the pipeline audit's: started from its YAML
config, fed by a producer that writes steadily meanwhile, and watched through its status file."""

from __future__ import annotations

import json
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from deploy.child_process import ChildProcess
from tests.support.polling import wait_for

__all__ = ["finish_steady_run", "produce_steadily", "read_status", "start_mirror", "status_positions"]

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 60.0  # from its start to its ready line


def start_mirror(config: Path, log: Path, status: Path) -> ChildProcess:
    """A mirror process once it says it is ready; its stderr appended to `log`, whose tail a
    failed start shows."""
    argv = [sys.executable, "-m", "deploy.cli", "mirror", "--config", str(config), "--status-file", str(status)]
    proc = ChildProcess.start("causeway mirror", argv, log_path=log, cwd=REPO)
    try:
        assert proc.read_ready_line(START_TIMEOUT_S).startswith("causeway mirror ready:"), proc.log_tail()
    except AssertionError:
        proc.kill()
        raise
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


async def finish_steady_run(mirror: ChildProcess, status: Path, done: threading.Event, records: int) -> None:
    """Once `produce_steadily` is done and the mirror's status shows every record of "orders"
    copied, stop the mirror cleanly (exit 0)."""
    await wait_for(done.is_set, what="the producer to finish", timeout_s=120)

    def caught_up() -> bool:
        report = read_status(status)
        return report is not None and status_positions(report) == {("orders", q): records // 3 for q in range(3)}

    await wait_for(caught_up, what="the mirror to catch up", timeout_s=120)
    mirror.send_signal(signal.SIGTERM)
    assert mirror.wait(60) == 0
