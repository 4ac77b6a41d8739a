"""bench.mirror's quick profile in both modes, small: each copy is made by a real `causeway mirror`
process into its own target broker from one preloaded source topic, then read back whole and
checked (link mode: the same offsets), with the mirror's and brokers' CPU and memory from /proc."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import mirror
from bench.mirror import Variant, loopback


def test_both_modes_copy_the_same_topic_completely(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mirror, "IDLE_S", 0.2)  # the target's idle CPU: a short look is enough here
    base, runs = loopback(100, 3_000, tmp_path, [Variant("mm2"), Variant("link")], 1, with_baseline=False)
    assert base is None
    assert [run.variant.mode for run in runs] == ["mm2", "link"]
    mm2, link = runs
    assert mm2.check == "4 partitions, 3,000 records: counts and records equal"
    assert link.check == "4 partitions, 3,000 records: counts and records equal, offsets equal"
    for run in runs:
        assert run.copy.records == 3_000
        assert run.mirror_peak_rss > 10_000_000  # a Python process with the client loaded
        assert run.mirror_start_cpu_s > 0 and run.target_cpu_s >= 0 and run.source_cpu_s >= 0
