"""The short seeded chaos profile (what `make test` runs; `make chaos` runs the long matrix).

Each scenario starts real processes (the WAN emulator, a source and a target broker, the mirror
reading the source through the emulated link), produces numbered records idempotently while its
seeded faults run, waits for the mirror to catch up, and compares source and target partition by
partition: nothing lost, nothing reordered, nothing corrupted or foreign, and duplicates only as
replays from a checkpoint in the scenario that crashes an at-least-once mirror (none where the
mirror is exactly-once and the target is read back read_committed).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy.chaos.runner import PROFILE, run_scenario

pytestmark = pytest.mark.slow

SEED = 1


@pytest.mark.parametrize("index", range(len(PROFILE)), ids=[s.name for s in PROFILE])
async def test_profile_scenario(index: int, tmp_path: Path) -> None:
    scenario = PROFILE[index]
    result = await run_scenario(scenario, seed=SEED + index, work_dir=tmp_path / scenario.name)
    detail = result.describe()
    assert result.error is None, detail
    assert len(result.applied) == scenario.steps, detail  # every fault of the schedule ran and healed
    assert all(a.healed is not None for a in result.applied), detail
    report = result.report
    assert report is not None, detail
    assert report.source_records == scenario.records, detail  # every record acknowledged, and at the source
    for category in ("lost", "tail", "reordered", "corrupted", "unexpected", "source_anomalies"):
        assert report.total(category) == 0, f"{category}:\n{detail}"
    if scenario.crashes_mirror:
        assert result.mirror_crashes == scenario.steps, detail
        assert report.total("unexplained_duplicates") == 0, detail
    # Duplicates only as an at-least-once mirror's replays after a crash; an exactly-once mirror
    # is read back read_committed, where a crash may abort a transaction but never duplicate.
    if scenario.exactly_once or not scenario.crashes_mirror:
        assert report.total("duplicated") == 0, detail
    assert result.passed, detail
