"""`causeway status --watch` without a terminal or a topology: rates and events computed from
snapshots (deploy/launcher/watch.py), and the view drawn as plain text (deploy/cli/status_watch.py)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from deploy.cli import main
from deploy.cli.status_watch import EVENTS_SHOWN, View, render_text
from deploy.launcher.watch import LAG_EVENT_RECORDS, Snapshot, changes, rates

MBIT = 125_000  # bytes/s


def report() -> dict[str, Any]:
    """A healthy two-cluster topology, as control.status(links=True) reports it."""
    def brokers(base: int) -> list[dict[str, Any]]:
        return [{"id": i, "pid": base + i, "restarts": 0, "state": "serving", "address": f"127.0.0.1:{base + i}",
                 "log": None} for i in (1, 2)]

    cluster = {"healthy": True, "unhealthy_because": [], "controller": 1, "partitions": 5,
               "under_replicated_count": 0, "offline_count": 0, "under_replicated": [], "offline": [],
               "zookeeper": {"connect": "127.0.0.1:2181/east", "pid": 90, "restarts": 0, "nodes": {},
                             "healthy": True}}
    return {
        "name": "two-dc", "running": True, "healthy": True, "pid": 10,
        "clusters": {"east": {**copy.deepcopy(cluster), "datacenter": "east", "bootstrap": "127.0.0.1:9001",
                              "brokers": brokers(100)},
                     "west": {**copy.deepcopy(cluster), "datacenter": "west", "bootstrap": "127.0.0.1:9101",
                              "brokers": brokers(200)}},
        "mirrors": {"east-to-west": {"source": "east", "target": "west", "mode": "mm2", "pid": 300, "restarts": 0,
                                     "alive": True, "state": "running", "healthy": True, "unhealthy_because": [],
                                     "lag": 0, "lag_at_least": None, "source_reachable": True, "records": 0,
                                     "updated_ms": 1_000_000, "max_latency_ms": 45}},
        "wan": {"api": "127.0.0.1:8474", "pid": 20, "restarts": 0, "healthy": True, "problems": [],
                "links": {"east~west": {"name": "east~west", "between": ["east", "west"], "bandwidth": 100 * MBIT,
                                        "latency": 40, "sent": {"east->west": 0, "west->east": 0}}}},
    }


def snap(doc: dict[str, Any], at: float) -> Snapshot:
    return Snapshot(doc, at, 1_800_000_000 + at)


def later(doc: dict[str, Any], **changes_: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    out.update(changes_)
    return out


# -- rates -------------------------------------------------------------------------------------


def test_link_use_is_bytes_sent_per_second_against_the_declared_bandwidth() -> None:
    first = report()
    second = copy.deepcopy(first)
    second["wan"]["links"]["east~west"]["sent"] = {"east->west": 50 * MBIT * 2, "west->east": 10_000}
    figures = rates([snap(first, 0.0), snap(second, 2.0)])
    east_west, west_east = figures.links
    assert (east_west.direction, east_west.bytes_per_s, east_west.use) == ("east->west", 50 * MBIT, 0.5)
    assert (west_east.direction, west_east.bytes_per_s) == ("west->east", 5_000)


def test_a_rate_needs_two_snapshots_and_a_counter_that_went_back_gives_none() -> None:
    first = report()
    assert rates([snap(first, 0.0)]).links[0].bytes_per_s is None
    assert rates([snap(first, 0.0)]).mirrors == {"east-to-west": None}
    second = copy.deepcopy(first)
    first["wan"]["links"]["east~west"]["sent"]["east->west"] = 1_000_000  # the emulator restarted since
    assert rates([snap(first, 0.0), snap(second, 1.0)]).links[0].bytes_per_s is None


def test_mirror_records_per_second_use_the_times_the_mirror_wrote_its_counts() -> None:
    history = []
    for i, (records, updated) in enumerate([(0, 1_000_000), (0, 1_000_000), (4_000, 1_002_000), (4_000, 1_002_000)]):
        doc = report()
        doc["mirrors"]["east-to-west"].update(records=records, updated_ms=updated)
        history.append(snap(doc, i * 0.2))
    # 4,000 records between reports written 2 s apart, whatever the snapshots' own spacing.
    assert rates(history).mirrors["east-to-west"] == 2_000
    restarted = report()
    restarted["mirrors"]["east-to-west"].update(records=10, updated_ms=1_003_000, pid=301, restarts=1)
    assert rates([*history, snap(restarted, 1.0)]).mirrors["east-to-west"] is None
    went_back = report()
    went_back["mirrors"]["east-to-west"].update(records=10, updated_ms=1_003_000)
    assert rates([*history[2:], snap(went_back, 1.0)]).mirrors["east-to-west"] is None


def test_rates_count_only_the_last_few_seconds() -> None:
    old, middle, new = report(), report(), report()
    middle["wan"]["links"]["east~west"]["sent"]["east->west"] = 1_000_000
    new["wan"]["links"]["east~west"]["sent"]["east->west"] = 1_000_000 + 4 * 1000
    # The first snapshot is 100 s old: outside the window, so the rate is the last 4 s's.
    assert rates([snap(old, 0.0), snap(middle, 96.0), snap(new, 100.0)]).links[0].bytes_per_s == 1000


def test_peer_values_that_are_not_counts_give_no_rate() -> None:
    first, second = report(), report()
    second["wan"]["links"]["east~west"]["sent"]["east->west"] = "lots"
    second["wan"]["links"]["east~west"]["bandwidth"] = -5
    link = rates([snap(first, 0.0), snap(second, 1.0)]).links[0]
    assert link.bytes_per_s is None and link.use is None


# -- events ------------------------------------------------------------------------------------


def test_a_broker_going_down_and_partitions_under_replicated_are_events() -> None:
    before = report()
    after = copy.deepcopy(before)
    east = after["clusters"]["east"]
    east["brokers"][1].update(state="down")
    east.update(under_replicated_count=2, under_replicated=["orders-0", "orders-1"], healthy=False)
    assert changes(snap(before, 0), snap(after, 1)) == [
        "cluster east: broker 2 down (was serving)",
        "cluster east: 2 under-replicated partition(s) (were 0): orders-0, orders-1",
    ]
    back = copy.deepcopy(before)
    back["clusters"]["east"]["brokers"][1].update(pid=999, restarts=1)
    assert changes(snap(after, 1), snap(back, 2)) == [
        "cluster east: broker 2 serving (was down, restarted as pid 999)",
        "cluster east: no under-replicated partitions (were 2)",
    ]


def test_a_mirror_lag_growing_past_the_threshold_and_recovering_are_events() -> None:
    calm = report()
    behind = copy.deepcopy(calm)
    behind["mirrors"]["east-to-west"]["lag"] = LAG_EVENT_RECORDS + 1
    assert changes(snap(calm, 0), snap(behind, 1)) == [
        f"mirror east-to-west: lag grew to {LAG_EVENT_RECORDS + 1} records (was 0)"]
    assert changes(snap(behind, 1), snap(calm, 2)) == [
        f"mirror east-to-west: lag recovered to 0 records (was {LAG_EVENT_RECORDS + 1})"]
    small = copy.deepcopy(calm)
    small["mirrors"]["east-to-west"]["lag"] = LAG_EVENT_RECORDS
    assert changes(snap(calm, 0), snap(small, 1)) == []  # the rhythm of fetches, not news


def test_a_mirror_down_unhealthy_and_the_wan_problems_are_events() -> None:
    before = report()
    after = copy.deepcopy(before)
    after["mirrors"]["east-to-west"].update(alive=False, healthy=False, unhealthy_because=["not running"])
    after["wan"]["problems"] = ["link proxy east-to-west-1 is disabled"]
    assert changes(snap(before, 0), snap(after, 1)) == [
        "mirror east-to-west: DOWN (pid 300)",
        "mirror east-to-west: NOT healthy: not running",
        "WAN: link proxy east-to-west-1 is disabled",
    ]
    assert changes(snap(after, 1), snap(before, 2))[-1] == "WAN: no longer: link proxy east-to-west-1 is disabled"


def test_nothing_changed_is_no_event_and_the_launcher_leaving_is_one() -> None:
    doc = report()
    assert changes(snap(doc, 0), snap(copy.deepcopy(doc), 1)) == []
    gone = {"running": False, "healthy": False, "orphans": [], "clusters": {}, "mirrors": {}, "wan": {}}
    assert changes(snap(doc, 0), snap(gone, 1)) == [
        "the launcher is gone: nothing of this topology is watched any more"]


# -- the view ----------------------------------------------------------------------------------


def view(history: list[Snapshot], events: list[tuple[float, str]] | None = None) -> View:
    return View(Path("/state"), history[-1], rates(history), events or [])


def test_the_view_shows_clusters_brokers_mirrors_links_and_events_as_plain_text() -> None:
    first = report()
    second = copy.deepcopy(first)
    second["wan"]["links"]["east~west"]["sent"]["east->west"] = 25 * MBIT
    second["mirrors"]["east-to-west"].update(records=3_000, updated_ms=1_001_000, lag=12)
    text = render_text(view([snap(first, 0.0), snap(second, 1.0)],
                            [(1_800_000_001.0, "cluster east: broker 2 down (was serving)")]))
    assert "\x1b" not in text  # no escape codes: a log gets plain text
    lines = text.splitlines()
    assert lines[0] == "topology two-dc (launcher pid 10) at 08:00:01 UTC: healthy (rates: the last 5 s)"
    assert _row(lines, "east", "east", "yes") == ["east", "east", "yes", "1", "5", "0", "0"]
    assert _row(lines, "west", "2", "serving") == ["west", "2", "serving", "202", "0", "127.0.0.1:202"]
    assert _row(lines, "east-to-west", "east") == ["east-to-west", "east", "west", "running", "yes", "12", "3,000",
                                                    "45", "0"]
    # 25 Mbit/s sent on a declared 100 Mbit/s: a quarter of the link, drawn as a bar.
    assert _row(lines, "east~west", "east->west") == ["east~west", "east->west", "25.0", "Mbit/s", "100.0", "Mbit/s",
                                                       "#####...............", "25%"]
    assert lines[-1] == "  08:00:01 cluster east: broker 2 down (was serving)"


def test_the_view_lists_problems_and_the_newest_events_only() -> None:
    doc = report()
    doc["healthy"] = False
    east = doc["clusters"]["east"]
    east.update(healthy=False, under_replicated_count=9, under_replicated=[f"orders-{i}" for i in range(9)])
    east["brokers"][0]["state"] = "not answering"
    doc["mirrors"]["east-to-west"].update(healthy=False, lag=None, lag_at_least=70, source_reachable=False,
                                          unhealthy_because=["cannot reach its source east"])
    doc["wan"]["links"] = None
    events = [(1_800_000_000.0 + i, f"event {i}") for i in range(EVENTS_SHOWN + 3)]
    text = render_text(view([snap(doc, 0.0)], events))
    assert "NOT HEALTHY" in text.splitlines()[0]
    assert "east under-replicated: orders-0, orders-1, orders-2, orders-3, orders-4 and 4 more" in text
    assert _row(text.splitlines(), "east", "1") == ["east", "1", "not", "answering", "101", "0", "127.0.0.1:101"]
    assert "SOURCE UNREACHABLE" in text and ">=70" in text and "east-to-west: cannot reach its source east" in text
    assert "link use: unknown" in text
    shown = [line for line in text.splitlines() if " event " in line]
    assert [line.split()[-1] for line in shown] == [str(i) for i in range(3, EVENTS_SHOWN + 3)]


def test_the_view_when_nothing_runs() -> None:
    gone = {"running": False, "healthy": False, "orphans": ["broker 1 (pid 5)"], "clusters": {}, "mirrors": {},
            "wan": {}}
    text = render_text(view([snap(gone, 0.0)]))
    assert "the launcher of /state is gone; processes it started still run: broker 1 (pid 5)" in text
    assert text.splitlines()[-1] == "  none yet"


def _row(lines: list[str], *starts: str) -> list[str]:
    """The first line whose first words are `starts`, split into words."""
    for line in lines:
        words = line.split()
        if words[:len(starts)] == list(starts):
            return words
    raise AssertionError(f"no line starts with {starts}:\n" + "\n".join(lines))


def test_watch_flags_that_cannot_go_together_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv, said in ((["--watch", "--json"], "--json prints one document; --watch is the live view"),
                       (["--interval", "2"], "--interval is for --watch"),
                       (["--watch", "--interval", "0"], "more than 0 and at most 3600 seconds, got 0"),
                       (["--watch", "--interval", "nan"], "got nan")):
        assert main(["status", *argv, "--state-dir", str(tmp_path)]) == 2
        assert said in capsys.readouterr().err
