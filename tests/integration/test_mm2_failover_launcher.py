"""An mm2-mode failover as a user runs it: `causeway up` on examples/dr-link.yaml with its mirror
in mm2 mode, the primary's broker frozen (SIGSTOP), then `causeway mirror promote --failover`.

The DR site holds the remote topics `east.orders` (3 partitions) and `east.payments` (2); the
failover creates `orders` and `payments` there with those partition counts (the source does not
answer: the remote topics the mirror kept in line with it stand in), so producers moving to west
find them shaped as at east instead of auto-created with one partition. Run again, it reports
them promoted already and exits 0.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from confluent_kafka.admin import AdminClient

from tests.support.polling import wait_until

REPO = Path(__file__).resolve().parents[2]
MIRROR = "east-to-west"
DEADLINE_S = 90.0


def causeway(*args: str, timeout_s: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "deploy.cli", *args], capture_output=True, text=True,
                          timeout=timeout_s, cwd=REPO)


def partition_counts(bootstrap: str) -> dict[str, int]:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    return {name: len(t.partitions) for name, t in metadata.topics.items() if t.error is None}


def mm2_example(tmp_path: Path) -> Path:
    """examples/dr-link.yaml with its mirror in mm2 mode (topology dr-mm2), written in `tmp_path`."""
    topology = tmp_path / "dr-mm2.yaml"
    text = (REPO / "examples" / "dr-link.yaml").read_text()
    assert "    mode: link " in text and "name: dr-link\n" in text
    topology.write_text(text.replace("    mode: link ", "    mode: mm2 #").replace("name: dr-link\n", "name: dr-mm2\n"))
    return topology


def test_an_mm2_failover_from_a_frozen_primary_creates_the_topics_shaped_as_there(tmp_path: Path) -> None:
    topology = mm2_example(tmp_path)
    state = tmp_path / "state"
    up = causeway("up", str(topology), "-d", "--state-dir", str(state))
    frozen: list[int] = []
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        doc = json.loads((state / "state.json").read_text())
        west = doc["clusters"]["west"]["bootstrap"]

        def remote_topics_there() -> bool:
            counts = partition_counts(west)
            return counts.get("east.orders") == 3 and counts.get("east.payments") == 2

        wait_until(remote_topics_there, what="the mirror's remote topics at west", timeout_s=DEADLINE_S,
                   interval_s=0.5)
        assert "orders" not in partition_counts(west)
        for broker in doc["clusters"]["east"]["brokers"]:
            os.kill(broker["pid"], signal.SIGSTOP)
            frozen.append(broker["pid"])

        failed_over = causeway("mirror", "promote", str(topology), "--mirror", MIRROR, "--state-dir", str(state),
                               "--failover")
        assert failed_over.returncode == 0, failed_over.stdout + failed_over.stderr
        assert "the source does not answer" in failed_over.stdout, failed_over.stdout
        assert "created orders: 3 partition(s), as at the source" in failed_over.stdout, failed_over.stdout
        counts = partition_counts(west)
        assert counts["orders"] == 3 and counts["payments"] == 2, counts

        again = causeway("mirror", "promote", str(topology), "--mirror", MIRROR, "--state-dir", str(state),
                         "--failover")
        assert again.returncode == 0, again.stdout + again.stderr
        assert "orders, payments promoted already" in again.stdout, again.stdout
        planned = causeway("mirror", "promote", str(topology), "--mirror", MIRROR, "--state-dir", str(state))
        assert planned.returncode == 1 and "--failover" in planned.stderr, planned.stdout + planned.stderr
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
        down = causeway("down", "--state-dir", str(state))
    assert down.returncode == 0, down.stdout + down.stderr
