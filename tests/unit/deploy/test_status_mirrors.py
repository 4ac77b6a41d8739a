"""Issue 19, item 17: what `causeway status` makes of a mirror's own report: a lag it cannot know
is never a figure, an unreachable source says since when, a wholly promoted link mirror is
`promoted`, and a status file is read only from the state dir and never blocks."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from broker.clock import now_ms
from deploy.launcher import control
from deploy.launcher.state_file import MirrorRecord
from deploy.process_identity import identity_of
from mirror.status import ClusterRef, MirrorStatus, PartitionStatus


def _report(**fields: Any) -> MirrorStatus:
    base: dict[str, Any] = {
        "name": "m", "source": ClusterRef(alias="east", bootstrap="x"),
        "target": ClusterRef(alias="west", bootstrap="y"),
        "state": "running", "mode": "link", "updated_ms": now_ms(), "topics": {"orders": "orders"}, "lag": 3,
        "partitions": [PartitionStatus(topic="orders", partition=0, remote_topic="orders", position=7, source_end=10,
                                       lag=3)],
    }
    return MirrorStatus(**{**base, **fields})


def _status(tmp_path: Path, report: MirrorStatus | None, status_file: Path | None = None) -> dict[str, Any]:
    path = status_file or tmp_path / "mirrors" / "m.status.json"
    if report is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(report.to_json())
    # The mirror's process stands for one running since boot: every report is its own.
    process = identity_of(1)
    assert process is not None
    record = MirrorRecord(source="east", target="west", mode="link", status_file=str(path), pid=process.pid)
    return control.mirror_status(record, process, tmp_path)


def test_a_reachable_source_gives_the_lag(tmp_path: Path) -> None:
    out = _status(tmp_path, _report())
    assert out["healthy"] and out["source_reachable"] and out["lag"] == 3 and out["lag_at_least"] is None
    assert out["partitions"][0]["lag"] == 3


@pytest.mark.parametrize("reached", [True, False], ids=["reached before", "never reached"])
def test_an_unreachable_source_makes_the_lag_unknown_and_says_since_when(tmp_path: Path, reached: bool) -> None:
    since = now_ms() - 95_000 if reached else None
    out = _status(tmp_path, _report(problems={"source": "connection refused"}, source_reached_ms=since))
    assert not out["healthy"] and out["source_reachable"] is False
    assert out["lag"] is None and out["lag_at_least"] == 3 and out["source_unreachable_since_ms"] == since
    assert out["partitions"][0]["lag"] is None and out["partitions"][0]["lag_at_least"] == 3
    reason = out["unhealthy_because"][0]
    assert reason.startswith("cannot reach its source east since ") and "lag unknown, at least 3" in reason
    assert ("UTC (95 s)" in reason) if reached else ("never reached in this run" in reason)


def test_a_stale_report_gives_no_lag_either(tmp_path: Path) -> None:
    out = _status(tmp_path, _report(updated_ms=now_ms() - 60_000))
    assert out["lag"] is None and out["lag_at_least"] == 3 and any("not been updated" in r for r in
                                                                   out["unhealthy_because"])


def test_a_mirror_whose_topics_are_all_promoted_is_promoted(tmp_path: Path) -> None:
    out = _status(tmp_path, _report(topics={}, partitions=[], lag=0, promoted=["orders", "payments"]))
    assert out["state"] == "promoted" and out["promoted"] == ["orders", "payments"] and out["healthy"]
    partly = _status(tmp_path, _report(promoted=["payments"]))
    assert partly["state"] == "running" and partly["promoted"] == ["payments"]


def test_a_status_file_outside_the_state_dir_or_not_a_file_is_not_read(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    outside = _status(state_dir, _report(), status_file=tmp_path / "elsewhere.json")
    assert any("not read" in r and "leads out of the state dir" in r for r in outside["unhealthy_because"]), outside
    fifo = state_dir / "mirrors" / "m.status.json"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    out = _status(state_dir, None)  # a plain open() would wait here for a writer
    assert any("is a FIFO, not a regular file" in r for r in out["unhealthy_because"]), out
