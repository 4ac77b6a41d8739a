"""The hostile-bytes profile (`make chaos` runs the longer matrix): forged LinkAppend requests,
controller requests and znodes beside a real link-mode mirror and a real 3-broker ZooKeeper
cluster under librdkafka's idempotent acks=all load, every process real and started through the
launcher. Nothing acknowledged is lost at the source, every forged request a broker can check is
refused, and each partition of the mirror topic is either the source's exactly or reported
FAILED by the mirror (only where a forged batch really was taken).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy.chaos.hostile import FORGED_PARTITION, PROFILE, run_scenario
from deploy.chaos.replication import PARTITIONS

SEED = 1


@pytest.mark.slow
async def test_hostile_bytes_lose_nothing_and_a_forged_copy_is_reported_failed(tmp_path: Path) -> None:
    scenario = PROFILE[0]
    result = await run_scenario(scenario, seed=SEED, work_dir=tmp_path / scenario.name)
    detail = result.describe()
    assert result.error is None, detail
    assert set(result.tallies) == set(scenario.attackers), detail
    # Each attacker really attacked: its forged requests or znodes were sent.
    assert all(sum(t.sent.values()) >= scenario.attacks for t in result.tallies.values()), detail
    assert [a for t in result.tallies.values() for a in t.accepted] == [], detail
    assert result.plog.acked_count == result.plog.sent_count >= scenario.records, detail
    assert result.consumed >= result.plog.acked_count, detail
    assert result.lost == 0 and result.moved == [], detail
    assert result.restarts == {}, detail
    # The copy: the forged partition FAILED, every other one identical to the source's.
    assert result.forged == {FORGED_PARTITION}, detail
    assert result.failed.keys() == result.forged, detail
    assert result.copied == set(range(PARTITIONS)) - result.forged, detail
    assert result.passed, detail
