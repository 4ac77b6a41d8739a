"""bench.drill reads each `causeway drill --json` report into one row: the rate the workload
reached from the timeline's first step, and a row below 95% of the asked rate marked as a machine
that did not keep up; the mm2 topology is examples/dr.yaml with only its mode and name changed."""

from __future__ import annotations

from pathlib import Path

import yaml

from bench.drill import row_of, table, topology


def report(acknowledged_then: int, duration_s: float) -> dict[str, object]:
    return {"disaster": "kill",
            "timeline": [{"name": "workload at the primary", "start_s": 0.0, "duration_s": duration_s,
                          "detail": f"group causeway-drill-1; {acknowledged_then} acknowledged"}],
            "rpo": {"records": 11, "acknowledged": acknowledged_then + 10, "duplicates": 0},
            "rto": {"first_produce_s": 1.81, "first_consume_s": 4.79},
            "group": {"reread": 126, "skipped": 0}}


def test_a_report_becomes_a_row_and_a_slow_machine_is_marked() -> None:
    fast = row_of("link", 1000.0, report(9960, 10.0))
    assert (fast.reached, fast.rpo, fast.acknowledged, fast.reread, fast.keeps_up) == (996.0, 11, 9970, 126, True)
    slow = row_of("mm2", 10000.0, report(61000, 10.0))
    assert slow.reached == 6100.0 and not slow.keeps_up
    lines = table([fast, slow]).splitlines()
    assert lines[0].split()[:3] == ["mode", "disaster", "rate"]
    assert lines[1].split() == ["link", "kill", "1,000", "996", "11", "1.81", "4.79", "126", "0", "0"]
    assert lines[2].split()[3:5] == ["6,100", "*"]


def test_the_mm2_topology_differs_from_the_example_in_mode_and_name_only(tmp_path: Path) -> None:
    link = yaml.safe_load(topology("link", tmp_path).read_text())
    mm2 = yaml.safe_load(topology("mm2", tmp_path).read_text())
    assert mm2["name"] == "dr-mm2" and mm2["mirrors"]["primary-to-dr"]["mode"] == "mm2"
    mm2["name"], mm2["mirrors"]["primary-to-dr"]["mode"] = link["name"], link["mirrors"]["primary-to-dr"]["mode"]
    assert mm2 == link
