"""The drill's counts (deploy/drill/verify.py) and its report (deploy/drill/report.py), from
hand-made ledgers: losses as offset ranges, duplicates, re-reads and skips."""

from __future__ import annotations

import json

from deploy.drill.report import DrillReport, Timeline
from deploy.drill.verify import offset_ranges, outcome

RUN = "drill-1"


def names(site: str, seqs: range) -> list[str]:
    return [f"{RUN}:{site}:{i}" for i in seqs]


def test_offset_ranges() -> None:
    assert offset_ranges([]) == []
    assert offset_ranges([7, 3, 4, 5, 9]) == [(3, 5), (7, 7), (9, 9)]


def test_losses_duplicates_rereads_and_skips() -> None:
    acked = {("orders", 0): dict(enumerate(names("primary", range(10))))}
    # The DR site got offsets 0-6, offset 6 written twice (at 6 and 7), and a record of another run.
    copy = {("orders", 0): {**dict(enumerate(names("primary", range(7)))), 7: f"{RUN}:primary:6", 8: "other:primary:1"}}
    dr_acked = set(names("dr", range(3)))
    read_primary = names("primary", range(5))
    read_dr = names("primary", range(4, 7)) + names("dr", range(2))  # 4 read again; dr:2 never read
    result = outcome(acked, copy, dr_acked, read_primary, read_dr, RUN)
    assert result.acknowledged == 10 and result.reached == 7
    assert result.rpo == 3
    lost = [(lost.topic, lost.partition, lost.count, lost.ranges) for lost in result.lost]
    assert lost == [("orders", 0, 3, [(7, 9)])]
    assert result.duplicates == 1
    assert result.reread == 1
    assert result.skipped == 1


def test_rereads_against_the_offsets_the_dr_site_held_at_the_promotion() -> None:
    acked = {("orders", 0): dict(enumerate(names("primary", range(10)))),
             ("orders", 1): dict(enumerate(names("primary", range(10, 14))))}
    copy = {("orders", 0): dict(enumerate(names("primary", range(8)))),
            ("orders", 1): dict(enumerate(names("primary", range(10, 14))))}
    # At the primary the group read orders-0 up to offset 5 and orders-1 up to its end; the DR
    # site held 3 for orders-0 (offsets 3-5 read past it) and nothing for orders-1.
    read_primary = names("primary", range(6)) + names("primary", range(10, 14))
    committed = {("orders", 0): 3, ("orders", 1): -1}
    # At the DR site it read orders-0 from 2 (one below its committed offset) and orders-1 from 0.
    read_dr_at = {("orders", 0): {o: f"{RUN}:primary:{o}" for o in range(2, 8)},
                  ("orders", 1): {o: f"{RUN}:primary:{10 + o}" for o in range(4)}}
    read_dr = [name for records in read_dr_at.values() for name in records.values()]
    result = outcome(acked, copy, set(), read_primary, read_dr, RUN, committed=committed,
                     log_end={("orders", 0): 8, ("orders", 1): 4}, read_dr_at=read_dr_at)
    assert result.reread == 4 + 4  # orders-0 2-5, orders-1 0-3
    assert result.reread_expected == 3 + 4  # orders-0 3-5; orders-1 from its start, none committed
    assert result.reread_below_committed == 1  # orders-0 offset 2
    assert result.skipped == 0
    report = DrillReport("failover", "kill", "east-to-west", ["orders"], 100.0, Timeline(started=0.0), run=RUN,
                         outcome=result)
    assert "committed at the DR site at the promotion, of the log end: orders-0 3/8, orders-1 none/4" in report.table()
    assert "re-reads they account for 7 (read at the primary past them); re-read below them 1" in report.table()
    group = json.loads(json.dumps(report.to_json()))["group"]
    assert group["committed_at_promotion"] == [
        {"topic": "orders", "partition": 0, "committed_offset": 3, "log_end_offset": 8},
        {"topic": "orders", "partition": 1, "committed_offset": -1, "log_end_offset": 4}]
    assert (group["reread"], group["reread_expected"], group["reread_below_committed"]) == (8, 7, 1)


def test_nothing_lost_nothing_reread() -> None:
    acked = {("orders", 0): dict(enumerate(names("primary", range(4))))}
    result = outcome(acked, {("orders", 0): dict(acked[("orders", 0)])}, set(), names("primary", range(4)), [], RUN)
    assert (result.rpo, result.duplicates, result.reread, result.skipped) == (0, 0, 0, 0)
    assert result.lost == []


def test_report_table_and_json() -> None:
    timeline = Timeline(started=0.0)
    step = timeline.begin("promote --failover")
    timeline.end(step, "2 topic(s) promoted")
    acked = {("payments", 1): dict(enumerate(names("primary", range(3))))}
    report = DrillReport("failover", "partition", "east-to-west", ["payments"], 100.0, timeline, run=RUN,
                         outcome=outcome(acked, {}, set(), [], [], RUN), rto_produce_s=1.5)
    report.limits_exceeded.append("RPO 3 record(s) > --max-rpo 0")
    table = report.table()
    assert "payments-1: 3 at offsets 0-2" in table
    assert "first consume not reached" in table
    assert "EXCEEDED   RPO 3" in table
    doc = json.loads(json.dumps(report.to_json()))
    assert doc["rpo"]["records"] == 3
    assert doc["rpo"]["partitions"] == [{"topic": "payments", "partition": 1, "records": 3, "offsets": [[0, 2]]}]
    assert doc["rto"] == {"first_produce_s": 1.5, "first_consume_s": None}
    assert doc["timeline"][0]["name"] == "promote --failover"
