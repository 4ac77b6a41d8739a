"""`causeway up -d`, `status`, `down` as a user runs them, on the two-dc example."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from deploy.launcher.control import alive
from tests.support.consume import read_topic
from tests.support.produce import produce_spread
from tests.unit.topology.files import GOOD  # two standalone clusters, a WAN link, a mirror

REPO = Path(__file__).resolve().parents[2]


def causeway(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "deploy.cli", *args], capture_output=True, text=True,
                          timeout=180, cwd=REPO)


def test_up_detached_status_and_down(tmp_path: Path) -> None:
    state = tmp_path / "state"
    up = causeway("up", "examples/two-dc.yaml", "-d", "--state-dir", str(state))
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert "cluster east (datacenter east): bootstrap 127.0.0.1:" in up.stdout
        assert "from datacenter west, through the WAN link: 127.0.0.1:" in up.stdout
        assert "cluster east up at 127.0.0.1:" in up.stdout  # its progress, echoed until ready

        again = causeway("up", "examples/two-dc.yaml", "-d", "--state-dir", str(state))
        assert again.returncode == 1 and "already running" in again.stderr  # no twins

        report = causeway("status", "--json", "--state-dir", str(state))
        assert report.returncode == 0, report.stderr
        doc = json.loads(report.stdout)
        assert set(doc["clusters"]) == {"east", "west"}
        for cluster in doc["clusters"].values():
            assert cluster["healthy"] and cluster["bootstrap"] and cluster["brokers"][0]["pid"]
        assert doc["wan"]["api"] and set(doc["mirrors"]) == {"east-to-west"}
        mirror = doc["mirrors"]["east-to-west"]
        assert mirror["alive"] and (mirror["source"], mirror["target"]) == ("east", "west")
        pids = [doc["pid"], doc["wan"]["pid"], mirror["pid"]] + [
            c["brokers"][0]["pid"] for c in doc["clusters"].values()]

        # Records produced in east arrive in west as east.orders, across the emulated link.
        sent = produce_spread(doc["clusters"]["east"]["bootstrap"], "orders", 60)
        assert read_topic(doc["clusters"]["west"]["bootstrap"], "east.orders", 60) == sent
        table = causeway("status", "--state-dir", str(state))
        assert "east" in table.stdout and "yes" in table.stdout and "east-to-west" in table.stdout
    finally:
        down = causeway("down", "--state-dir", str(state))
    assert down.returncode == 0, down.stderr
    assert "stopped launcher" in down.stdout
    assert not any(alive(pid) for pid in pids)
    assert causeway("status", "--state-dir", str(state)).returncode == 1  # nothing running


def test_up_quiet_prints_the_endpoints_and_no_progress(tmp_path: Path) -> None:
    """`up -d --quiet`: the launcher's progress lines (a cluster up, a mirror up) are not echoed;
    the endpoints and the line saying it runs in the background are."""
    topology = tmp_path / "quiet.yaml"
    topology.write_text(GOOD)
    state = tmp_path / "state"
    up = causeway("up", str(topology), "-d", "--quiet", "--state-dir", str(state))
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert "cluster east (datacenter east): bootstrap 127.0.0.1:" in up.stdout
        assert "mirror e2w (mm2): east -> west" in up.stdout
        assert "Running in the background (launcher pid " in up.stdout
        assert " up at " not in up.stdout and " INFO " not in up.stdout, up.stdout
        assert up.stderr == ""
    finally:
        down = causeway("down", "--state-dir", str(state))
    assert down.returncode == 0, down.stderr


def test_a_broken_topology_is_refused_before_anything_starts(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text((REPO / "examples" / "two-dc.yaml").read_text().replace("source: east", "source: eats"))
    up = causeway("up", str(bad), "--state-dir", str(tmp_path / "s"))
    assert up.returncode == 1
    assert "mirrors.east-to-west.source: unknown cluster 'eats' (did you mean 'east'?)" in up.stderr
    assert not (tmp_path / "s").exists()
