"""A failback drill's report part, from reports built here: --max-rto bounds the RTO back home
(and to the DR site again) too, and the table and the JSON say what the quarantine held against
the RPO, whether the logs differ, and what the third move cost."""

from __future__ import annotations

import json

from deploy.cli.drill import limits_exceeded
from deploy.drill.report import Cut, DrillReport, FailbackOutcome, ThirdMove, Timeline
from deploy.drill.verify import Lost, Outcome


def report(back: FailbackOutcome) -> DrillReport:
    result = DrillReport("failback", "partition", "east-to-west", ["orders"], 100.0, timeline=Timeline(),
                         outcome=Outcome(acknowledged=50, reached=47, lost=[Lost("orders", 0, 3, [(10, 12)])]))
    result.rto_produce_s, result.rto_consume_s = 1.0, 2.0
    result.failback = back
    return result


def test_max_rto_bounds_the_way_back_too() -> None:
    back = FailbackOutcome("truncate-and-restore", "east-to-west-reverse", rto_produce_s=0.5, rto_consume_s=6.5)
    assert limits_exceeded(report(back), max_rpo=None, max_rto=5.0) == ["RTO back home 6.50 s > --max-rto 5 s"]
    assert limits_exceeded(report(back), max_rpo=None, max_rto=6.5) == []


def test_the_table_and_json_say_what_the_quarantine_held_against_the_rpo() -> None:
    cut = Cut("orders", 0, 4, 10, 13, "/data/east/orders-0.quarantine/T", acknowledged=3)
    back = FailbackOutcome("truncate-and-restore", "east-to-west-reverse", cuts=[cut], rpo_matches_quarantine=True,
                           rto_produce_s=0.4, rto_consume_s=0.6, partitions_compared=1, batches_compared=9)
    table = report(back).table()
    assert "quarantine 4 record(s) cut at the old primary, 3 of them acknowledged = the RPO" in table
    assert "orders-0: 4 at offsets 10-13 in /data/east/orders-0.quarantine/T" in table
    assert "1 partition(s), 9 batch(es) at both sites: identical" in table
    data = json.loads(json.dumps(report(back).to_json()))["failback"]
    assert data["quarantine"]["records"] == 4 and data["quarantine"]["matches_rpo"] is True
    assert data["logs"] == {"partitions": 1, "batches": 9, "identical": True, "differing": []}
    back.rpo_matches_quarantine, back.differing = False, ["orders-0: 2 batch(es) at the old primary, 3 at the DR site"]
    table = report(back).table()
    assert "3 of them acknowledged != the RPO (3)" in table and "DIFFERENT: orders-0" in table


def test_the_third_move_is_reported_and_bounded_by_max_rto() -> None:
    third = ThirdMove("east-to-west", rto_produce_s=0.3, rto_consume_s=7.25, reread=1, skipped=2,
                      batches_compared=12, differing=["orders-1: 3 batch(es) at a, 4 at b"])
    back = FailbackOutcome("truncate-and-restore", "east-to-west-reverse", rto_produce_s=0.5, rto_consume_s=1.0,
                           third=third)
    assert limits_exceeded(report(back), max_rpo=None, max_rto=5.0) == [
        "RTO to the DR site again 7.25 s > --max-rto 5 s"]
    table = report(back).table()
    assert "AGAIN      reverse-and-start at the DR site, mirror east-to-west, planned switch-over" in table
    assert "RTO again  first produce at the DR site 0.30s, first consume 7.25s (from the producers stopping at " \
           "home)" in table
    assert "group again re-read 1, skipped 2" in table and "logs again 12 batch(es) at both sites: DIFFERENT" in table
    data = json.loads(json.dumps(report(back).to_json()))["failback"]["third_move"]
    assert data["group"] == {"reread": 1, "skipped": 2} and data["rto"]["first_consume_s"] == 7.25
    assert data["logs"]["identical"] is False and data["logs"]["batches"] == 12
    back.third = None
    assert "AGAIN" not in report(back).table() and report(back).to_json()["failback"]["third_move"] is None
