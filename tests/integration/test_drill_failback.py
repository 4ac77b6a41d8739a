"""`causeway drill failback` on examples/dr-link.yaml brought up with `causeway up -d` (the
topology of test_drill_launcher.py, whose helpers these tests share): a failover (the WAN link
cut, or the primary killed and restarted by the launcher) then truncate-and-restore, or a planned
switch-over then reverse-and-start; the reverse mirror copying back, a planned switch back. What the
report says is checked against what the clusters hold, read here on their own: the quarantine
directories the brokers wrote, the topics' owners, both sites' batches."""

from __future__ import annotations

from pathlib import Path

from broker.protocol.records import split_batches
from tests.integration.test_drill_launcher import drill, started
from tests.integration.test_failback_launcher import owners
from tests.integration.test_link_mode_launcher import MIRROR, TOPICS, status


def quarantined(state: Path) -> dict[tuple[str, int], list[int]]:
    """Every record offset in the quarantine directories under the topology's data dir."""
    found: dict[tuple[str, int], list[int]] = {}
    for log in sorted(state.glob("**/*.quarantine/*/*.log")):
        topic, _, partition = log.parent.parent.name.removesuffix(".quarantine").rpartition("-")
        data = log.read_bytes()
        offsets = [o for _, h in split_batches(data) for o in range(h.base_offset, h.last_offset + 1)]
        found.setdefault((topic, int(partition)), []).extend(offsets)
    return found


def test_failback_after_a_failover_with_the_link_cut(tmp_path: Path) -> None:
    with started(tmp_path) as state:
        code, report, output = drill(state, "failback", "--disaster", "partition")
        assert code == 0, output
        rpo, back = report["rpo"], report["failback"]
        assert back["command"] == "truncate-and-restore", output
        assert rpo["acknowledged"] > 0 and rpo["duplicates"] == 0, output
        # The quarantine holds exactly the acknowledged records the failover lost, at their offsets.
        assert back["quarantine"]["matches_rpo"] is True, output
        assert back["quarantine"]["acknowledged"] == rpo["records"], output
        lost = {(p["topic"], p["partition"]): [o for a, b in p["offsets"] for o in range(a, b + 1)]
                for p in rpo["partitions"]}
        on_disk = quarantined(state)
        assert sum(map(len, on_disk.values())) == back["quarantine"]["records"] >= rpo["records"], output
        for tp, offsets in lost.items():
            assert set(offsets) <= set(on_disk[tp]), (tp, output)
        for cut in back["quarantine"]["partitions"]:
            assert sorted(on_disk[(cut["topic"], cut["partition"])]) == list(
                range(cut["first_offset"], cut["last_offset"] + 1)), output
        # The group moved twice skipped nothing; on the way back (planned) it re-read nothing either
        # (the failover's re-reads are the commits at east the cut link kept from west).
        assert report["group"]["skipped"] == 0, output
        assert back["group"] == {"reread": 0, "skipped": 0}, output
        assert back["rto"]["first_produce_s"] is not None and back["rto"]["first_consume_s"] is not None
        # Both sites' logs alike batch for batch, below the DR site's end.
        assert back["logs"]["identical"] and back["logs"]["partitions"] == sum(TOPICS.values()), output
        assert back["logs"]["batches"] > 0, output
        # East is the primary again: its topics promoted, no mirror's any more.
        clusters = status(state)["clusters"]
        assert owners(clusters["east"]["bootstrap"]) == {t: "" for t in TOPICS}, output
        assert owners(clusters["west"]["bootstrap"]) == {t: "" for t in TOPICS}, output
        names = [s["name"] for s in report["timeline"]]
        assert names.index("truncate-and-restore") < names.index("promote at the old primary"), names
        assert f"{MIRROR}-reverse" in output


def test_failback_after_a_planned_switch_over_cuts_nothing(tmp_path: Path) -> None:
    with started(tmp_path) as state:
        code, report, output = drill(state, "failback", "--disaster", "planned", "--max-rpo", "0")
        assert code == 0, output
        back = report["failback"]
        assert back["command"] == "reverse-and-start", output
        assert report["rpo"]["records"] == 0 and report["rpo"]["acknowledged"] > 0, output
        assert back["quarantine"] == {"records": 0, "acknowledged": 0, "matches_rpo": None, "partitions": []}, output
        assert quarantined(state) == {}, output
        # Planned both ways: the group moved twice re-reads and skips nothing.
        assert (report["group"]["reread"], report["group"]["skipped"]) == (0, 0), output
        assert back["group"] == {"reread": 0, "skipped": 0}, output
        assert back["logs"]["identical"] and back["logs"]["batches"] > 0, output
        clusters = status(state)["clusters"]
        assert owners(clusters["east"]["bootstrap"]) == {t: "" for t in TOPICS}, output


def test_failback_after_the_primary_was_killed_waits_for_the_launcher_to_restart_it(tmp_path: Path) -> None:
    with started(tmp_path) as state:
        killed = status(state)["clusters"]["east"]["brokers"][0]["pid"]
        code, report, output = drill(state, "failback", "--disaster", "kill")
        assert code == 0, output
        back = report["failback"]
        assert back["quarantine"]["matches_rpo"] is True, output
        # Written at east and never acknowledged (the kill came first) is quarantined beside the RPO.
        assert back["quarantine"]["records"] >= back["quarantine"]["acknowledged"] == report["rpo"]["records"], output
        assert sum(map(len, quarantined(state).values())) == back["quarantine"]["records"], output
        assert back["group"] == {"reread": 0, "skipped": 0} and back["logs"]["identical"], output
        assert status(state)["clusters"]["east"]["brokers"][0]["pid"] != killed
