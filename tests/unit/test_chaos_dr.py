"""The DR matrix's verdict on a drill's JSON report (deploy/chaos/dr.py): what it fails."""

from __future__ import annotations

from typing import Any

from deploy.chaos.dr import (
    ELSEWHERE,
    KAFKA_COLUMN,
    KAFKA_PROFILE,
    KAFKA_TEST,
    MATRIX,
    NO_FAILBACK,
    SOURCES,
    DrResult,
    DrScenario,
    format_table,
    problems_of,
)


def failback(**changes: Any) -> dict[str, Any]:
    report: dict[str, Any] = {
        "rpo": {"records": 3, "acknowledged": 900, "duplicates": 0},
        "group": {"reread": 5, "skipped": 0, "reread_expected": 5, "reread_below_committed": 0},
        "failback": {"command": "truncate-and-restore",
                     "quarantine": {"records": 4, "acknowledged": 3, "matches_rpo": True},
                     "group": {"reread": 0, "skipped": 0}, "logs": {"identical": True, "batches": 40},
                     "third_move": {"group": {"reread": 0, "skipped": 0}, "logs": {"identical": True, "batches": 60}}},
    }
    report.update(changes)
    return report


def test_a_failback_whose_records_are_all_accounted_for_passes() -> None:
    assert problems_of(DrScenario("partition", "link"), failback()) == []


def test_duplicates_skips_a_quarantine_off_the_rpo_and_differing_logs_fail() -> None:
    scenario = DrScenario("partition", "link")
    assert problems_of(scenario, failback(rpo={"records": 3, "acknowledged": 900, "duplicates": 2}))
    assert problems_of(scenario, failback(group={"reread": 0, "skipped": 1}))
    off = failback()
    off["failback"]["quarantine"] = {"records": 4, "acknowledged": 2, "matches_rpo": False}
    assert len(problems_of(scenario, off)) == 2
    differ = failback()
    differ["failback"]["logs"] = {"identical": False, "differing": ["orders-0"]}
    assert problems_of(scenario, differ) == ["logs differ: ['orders-0']"]


def test_the_third_move_must_be_there_and_reread_skip_and_differ_in_nothing() -> None:
    scenario = DrScenario("partition", "link")
    missing = failback()
    del missing["failback"]["third_move"]
    assert problems_of(scenario, missing) == ["no third move in the report"]
    again = failback()
    again["failback"]["third_move"]["group"] = {"reread": 2, "skipped": 0}
    assert problems_of(scenario, again) == ["the group at the DR site again: {'reread': 2, 'skipped': 0}"]
    again = failback()
    again["failback"]["third_move"]["logs"] = {"identical": False, "differing": ["orders-1"]}
    assert problems_of(scenario, again) == ["logs differ after the third move: ['orders-1']"]


def test_rereads_the_offsets_at_the_promotion_do_not_account_for_fail() -> None:
    scenario = DrScenario("kill", "link")
    below = {"reread": 5, "skipped": 0, "reread_expected": 5, "reread_below_committed": 2}
    assert problems_of(scenario, failback(group=below)) == [
        "the group re-read 2 record(s) below the offsets the DR site held for it at the promotion"]
    more = {"reread": 7, "skipped": 0, "reread_expected": 5, "reread_below_committed": 0}
    assert problems_of(scenario, failback(group=more)) == [
        "the group re-read 7 record(s) where its offsets at the DR site at the promotion account for 5"]


def test_a_planned_switch_over_may_lose_nothing_and_mm2_needs_no_failback() -> None:
    planned = {"rpo": {"records": 1, "acknowledged": 900, "duplicates": 0}, "group": {"reread": 0, "skipped": 0}}
    assert problems_of(DrScenario("planned", "mm2"), planned) == ["a planned switch-over lost 1 record(s)"]
    assert problems_of(DrScenario("kill", "mm2"), planned) == []


def test_the_matrix_runs_every_disaster_and_mode_of_each_available_source() -> None:
    assert {(s.disaster, s.mode, s.source) for s in MATRIX} == {
        (d, m, "causeway") for d in ("planned", "kill", "partition") for m in ("link", "mm2")}
    # Not faked here: the Kafka column runs where the Kafka hook is, every disaster and mode.
    assert SOURCES["kafka"] is False and KAFKA_TEST in ELSEWHERE["kafka"]
    assert {(s.disaster, s.mode, s.source) for s in KAFKA_COLUMN} == {
        (d, m, "kafka") for d in ("planned", "kill", "partition") for m in ("link", "mm2")}
    assert KAFKA_PROFILE in KAFKA_COLUMN


def test_a_link_drill_from_a_kafka_primary_needs_no_failback_and_says_why() -> None:
    scenario = DrScenario("kill", "link", "kafka")
    report = failback(failback=None)
    assert not scenario.failback and problems_of(scenario, report) == []
    assert problems_of(DrScenario("kill", "link"), report) == ["no failback in the report"]
    line = DrResult(scenario, None, report=report).describe()
    assert line.startswith("dr-kill-link-kafka: ok RPO 3 of 900") and line.endswith(NO_FAILBACK["kafka"])
    # The rest of its verdict is the Causeway column's.
    lost = {"records": 2, "acknowledged": 900, "duplicates": 0}
    assert problems_of(DrScenario("planned", "link", "kafka"), failback(failback=None, rpo=lost)) == [
        "a planned switch-over lost 2 record(s)", "the group re-read 5 record(s) after a planned link switch-over"]
    assert NO_FAILBACK["kafka"] in format_table([])
