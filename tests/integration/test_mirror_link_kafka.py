"""A link-mode mirror whose target is Apache Kafka (which has no LinkAppend) stops at once with
an error that says why, in its exit code, on stderr and in its status file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.peers import KafkaBroker
from deploy.broker_process import BrokerProcess

REPO = Path(__file__).resolve().parents[2]


def test_a_kafka_target_is_refused_with_a_clear_error(east: BrokerProcess, tmp_path: Path, kafka_jars: None) -> None:
    with KafkaBroker(tmp_path / "kafka") as kafka:
        config = tmp_path / "mirror.yaml"
        config.write_text(json.dumps({
            "name": "east-to-kafka", "mode": "link",
            "source": {"alias": "east", "bootstrap": east.bootstrap},
            "target": {"alias": "kafka", "bootstrap": kafka.bootstrap}}))
        status = tmp_path / "status.json"
        done = subprocess.run([sys.executable, "-m", "deploy.cli", "mirror", "--config", str(config),
                               "--status-file", str(status)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("causeway mirror: mode: link needs a Causeway target"), done.stderr
    assert kafka.bootstrap in last and "LinkAppend" in last and "mode: mm2" in last
    report = json.loads(status.read_text())
    assert report["state"] == "failed" and report["mode"] == "link"
    assert "needs a Causeway target" in report["problems"]["mirror"]
