"""`causeway pipeline audit` on the topology `make up` starts (examples/two-dc.yaml, brought up
by `causeway up -d` with real ZooKeepers, brokers, WAN link emulator and mirror): the mirror is
found as `causeway status` finds it, and a copy the mirror finished is reported clean."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from pyspark.sql import SparkSession

from deploy.cli import main
from tests.integration.test_mirror import wait_for_end_offsets
from tests.pipeline.clients import produce

pytestmark = pytest.mark.compat

REPO = Path(__file__).resolve().parents[2]
TOPOLOGY = REPO / "examples" / "two-dc.yaml"


def causeway(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "deploy.cli", *args], capture_output=True, text=True,
                          timeout=180, cwd=REPO)


def test_the_audit_runs_on_the_topology_make_up_starts(spark: SparkSession, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    up = causeway("up", str(TOPOLOGY), "-d", "--state-dir", str(state))
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        status = causeway("status", "--json", "--state-dir", str(state))
        assert status.returncode == 0, status.stderr
        clusters = json.loads(status.stdout)["clusters"]
        east, west = clusters["east"]["bootstrap"], clusters["west"]["bootstrap"]
        produce(east, "orders", [{"partition": i % 3, "key": b"k%d" % i, "value": b"order %d" % i,
                                  "headers": [("n", b"%d" % i)]} for i in range(90)])
        trio.run(wait_for_end_offsets, west, "east.orders", {0: 30, 1: 30, 2: 30})

        report_file = tmp_path / "audit.json"
        code = main(["pipeline", "audit", str(TOPOLOGY), "--mirror", "east-to-west", "--state-dir", str(state),
                     "--json", str(report_file)])
        out = capsys.readouterr().out
        assert code == 0, out
        assert out.splitlines()[0] == f"audit of mirror east-to-west (mm2): {east} -> {west}"
        assert out.splitlines()[-1] == "clean: every record copied once, in order, unchanged"
        report = json.loads(report_file.read_text())
        orders = [(p["partition"], p["target_topic"], p["copied"], p["clean"]) for p in report["partitions"]
                  if p["topic"] == "orders"]
        assert orders == [(p, "east.orders", 30, True) for p in range(3)]
    finally:
        down = causeway("down", "--state-dir", str(state))
    assert down.returncode == 0, down.stdout + down.stderr
