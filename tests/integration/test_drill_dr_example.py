"""examples/dr.yaml as its comments run it: `causeway up -d`, then `causeway drill failover
--disaster planned` (a planned switch-over) on 3-broker ZooKeeper clusters over the emulated
40 ms link: RPO 0, nothing duplicated, re-read or skipped, a chart of the drill whose lag
and throughput series come from the samples the JSON report holds, and its steps' progress lines
on stderr beside the JSON on stdout."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from tests.integration.test_link_mode_launcher import causeway

EXAMPLE = "examples/dr.yaml"
MIRROR = "primary-to-dr"
SVG = "{http://www.w3.org/2000/svg}"


def test_a_planned_failover_drill_on_the_dr_example_loses_nothing(tmp_path: Path) -> None:
    assert f"causeway drill failover {EXAMPLE} --mirror {MIRROR} --disaster planned" in Path(EXAMPLE).read_text()
    state = tmp_path / "state"
    chart = tmp_path / "drill.svg"
    up = causeway("up", EXAMPLE, "-d", "--state-dir", str(state))
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        done = causeway("drill", "failover", EXAMPLE, "--mirror", MIRROR, "--state-dir", str(state),
                        "--disaster", "planned", "--rate", "300", "--duration", "3", "--max-rpo", "0", "--json",
                        "--chart", str(chart), timeout_s=300)
        output = done.stdout + done.stderr
        assert done.returncode == 0, output
        report = json.loads(done.stdout)  # stdout is the JSON alone: progress goes to stderr
        # Off a terminal, each long step's progress as plain lines: done/total, rate, ETA.
        assert "  acknowledged at the primary: " in done.stderr and "/900 records (" in done.stderr, done.stderr
        assert "  promote: copy catching up: " in done.stderr and "records/s, ETA " in done.stderr, done.stderr
        assert (report["kind"], report["disaster"], report["mode"]) == ("failover", "planned", "link"), output
        rpo = report["rpo"]
        assert rpo["records"] == 0 and rpo["partitions"] == [], output
        assert rpo["acknowledged"] > 0 and rpo["reached_dr"] == rpo["acknowledged"] and rpo["duplicates"] == 0
        group = report["group"]
        assert (group["reread"], group["skipped"], group["reread_below_committed"]) == (0, 0, 0), output
        # The promotion copied the group's offsets after its last commit: the DR site held them at
        # the copy's ends, so they account for no re-read either.
        assert group["reread_expected"] == 0, output
        assert all(p["committed_offset"] == p["log_end_offset"] for p in group["committed_at_promotion"]), output
        assert report["limits_exceeded"] == []
        # A planned switch-over promotes without --failover: the promotion waits for the copy.
        assert [s["name"] for s in report["timeline"]][:4] == [
            "workload at the primary", "producers stopped", "group caught up at the primary", "promote"], output
        samples = report["samples"]
        assert samples and samples[-1]["acked_primary"] == rpo["acknowledged"], samples[-1:]
        root = ET.parse(chart).getroot()
        series = {e.get("data-series"): e.get("points", "").split() for e in root.iter(f"{SVG}polyline")}
        assert len(series["acked_primary"]) == len(samples) - 1, (len(series["acked_primary"]), len(samples))
        assert len(series["lag"]) == sum(1 for s in samples if s["lag"] is not None) > 0
    finally:
        down = causeway("down", "--state-dir", str(state))
    assert down.returncode == 0, down.stdout + down.stderr
