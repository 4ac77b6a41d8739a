"""The pure parts of the chaos runner and workload: workload shares, decoding damaged batches,
reading the mirror's position records, the verdict, the table."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio

from broker.protocol.records import Record, build_batch
from deploy.chaos.checker import check
from deploy.chaos.faults import Step
from deploy.chaos.matrix import failure_kept, failure_text, run_matrix
from deploy.chaos.runner import Scenario, ScenarioResult, decode_position, format_table
from deploy.chaos.workload import Workload, decode_records
from tests.unit.deploy.chaos.test_checker import RUN, at_target, records


def test_workload_spreads_records_over_partitions() -> None:
    w = Workload("t", 3, 10, 100.0, "r")
    assert [w.count_for(p) for p in range(3)] == [4, 3, 3]


def test_a_batch_failing_its_crc_reads_as_corrupted_placeholders() -> None:
    good = build_batch([Record(b"k", b"v%d" % i) for i in range(3)])
    damaged = bytearray(build_batch([Record(b"k", b"w%d" % i) for i in range(2)]))
    damaged[-1] ^= 0xFF
    # Offsets: the second batch as if it followed the first.
    damaged[0:8] = (3).to_bytes(8, "big")
    out = decode_records(good + bytes(damaged), 1)
    assert [r.offset for r in out] == [1, 2, 3, 4]
    assert [r.value for r in out] == [b"v1", b"v2", None, None]


def test_position_records_are_read_as_kafka_connect_stores_them() -> None:
    key = b'["MirrorSourceConnector",{"cluster":"east","partition":2,"topic":"orders"}]'
    assert decode_position(key, b'{"offset":41}') == (2, 41)
    assert decode_position(key, None) is None
    assert decode_position(key.replace(b"orders", b"other"), b'{"offset":1}') is None
    assert decode_position(b"not json", b"{}") is None


def test_verdicts_and_the_table() -> None:
    scenario = Scenario("demo", ("mirror-kill",), steps=1, records=20, partitions=1)
    source = {0: records(0, range(20))}
    replayed = {0: at_target(source[0][:15] + source[0][10:])}
    result = ScenarioResult(scenario, 1, [Step(0, "mirror-kill", 0.0, 1.0)], work_dir=Path("/nowhere"))
    result.mirror_crashes = 1
    result.catch_up_s = 1.25
    result.report = check(source, replayed, run=RUN, replay_starts={0: {10}})
    assert result.passed, result.describe()
    result.report = check(source, replayed, run=RUN, replay_starts={0: {11}})
    assert any("outside a replay" in f for f in result.failures())
    result.mirror_crashes = 0
    assert any("without a mirror crash" in f for f in result.failures())
    lost = ScenarioResult(scenario, 2, [], report=check(source, {0: at_target(source[0][:5])}, run=RUN))
    assert any("tail" in f for f in lost.failures()) and any("catch up" in f for f in lost.failures())
    table = format_table([result, lost])
    lines = table.splitlines()
    assert lines[0].split()[:4] == ["scenario", "seed", "faults", "records"]
    assert lines[2].split()[-1] == "FAIL" and lines[3].split()[4] == "15"  # lost + tail


def test_a_failure_names_each_leaf_of_an_exception_group() -> None:
    group = ExceptionGroup("two", [ValueError("bad"), ExceptionGroup("inner", [OSError("gone")])])
    assert failure_text(group) == "ValueError: bad; OSError: gone"
    assert failure_text(RuntimeError("alone")) == "RuntimeError: alone"


def test_a_scenario_failure_is_kept_in_the_result_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    @dataclass
    class Result:
        error: str | None = None

    result = Result()
    with failure_kept(result, "s1", logging.getLogger("chaos-test")):
        raise ValueError("broke")
    assert result.error == "ValueError: broke"
    assert "scenario s1 failed" in caplog.text
    with failure_kept(result, "s2", logging.getLogger("chaos-test")):
        pass
    assert result.error == "ValueError: broke"  # a passing body leaves it as it was


def test_a_matrix_runs_each_scenario_in_its_own_directory_and_keeps_only_failures(tmp_path: Path) -> None:
    @dataclass(frozen=True)
    class Named:
        name: str

    @dataclass
    class Outcome:
        passed: bool
        work_dir: Path | None

    seeds: list[int] = []

    async def run_scenario(scenario: Named, /, *, seed: int, work_dir: Path) -> Outcome:
        seeds.append(seed)
        return Outcome(scenario.name != "fails", work_dir)

    for name in ("m-00-passes", "m-01-fails", "k/00-passes"):  # what each scenario would write
        (tmp_path / name).mkdir(parents=True)

    heard: list[str] = []
    results = trio.run(lambda: run_matrix([Named("passes"), Named("fails")], run_scenario, seed=7, work_dir=tmp_path,
                                          prefix="m-", on_result=lambda r: heard.append(str(r.work_dir))))
    assert [r.work_dir for r in results] == [tmp_path / "m-00-passes", tmp_path / "m-01-fails"]
    assert heard == [str(tmp_path / "m-00-passes"), str(tmp_path / "m-01-fails")]
    assert seeds == [7, 8]  # scenario i uses seed + i
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k", "m-01-fails"]  # a passing one's is removed
    kept = trio.run(lambda: run_matrix([Named("passes")], run_scenario, seed=7, work_dir=tmp_path / "k", keep=True))
    assert kept[0].work_dir == tmp_path / "k" / "00-passes" and kept[0].work_dir.is_dir()
