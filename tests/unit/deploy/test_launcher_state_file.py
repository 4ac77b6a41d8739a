"""Issue 11: the launcher's state file as a typed model: what the launcher writes reads back
the same; a damaged file is named by its field, as `causeway status` and `down` print it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from deploy.launcher.launch import LaunchState
from deploy.launcher.plan import LaunchPlan
from deploy.launcher.state_file import (
    BrokerRecord,
    ClusterRecord,
    LaunchStateFile,
    MirrorRecord,
    PrometheusRecord,
    StateFileError,
    WanRecord,
    parse_state,
)

PATH = Path("/state/state.json")


def test_round_trip() -> None:
    doc = LaunchStateFile(
        name="two-dc", pid=10, start_time=5, cmdline=["causeway", "up"],
        wan=WanRecord(api="127.0.0.1:8474", proxies=["east-to-west"], pid=11, start_time=6, cmdline=["w"]),
        clusters={"east": ClusterRecord(datacenter="east", bootstrap="127.0.0.1:9092", wan={"west": "127.0.0.1:1"},
                                        brokers=[BrokerRecord(pid=12, start_time=7, cmdline=["b"], restarts=2,
                                                              log="/l")])},
        mirrors={"m": MirrorRecord(source="east", target="west", status_file="/s.json", pid=13, restarts=1,
                                   metrics="127.0.0.1:9465")},
        prometheus=PrometheusRecord(url="http://127.0.0.1:9090", config="/p.yml", pid=14, start_time=8,
                                    cmdline=["p"]),
    )
    assert parse_state(PATH, doc.to_json().encode()) == doc


def test_a_prometheus_record_without_its_url_is_named() -> None:
    raw = json.dumps({"name": "t", "wan": {"api": "x"}, "prometheus": {"pid": 3}}).encode()
    with pytest.raises(StateFileError, match=r"prometheus\.url: missing"):
        parse_state(PATH, raw)


def test_the_launchers_own_snapshot_reads_back(tmp_path: Path) -> None:
    state = LaunchState(LaunchPlan("empty", clusters=()), tmp_path)
    state.wan_api = "127.0.0.1:8474"
    read = parse_state(PATH, state.snapshot().to_json().encode())
    assert read.name == "empty" and read.pid == os.getpid() and read.wan.pid is None
    assert read.cmdline and read.start_time is not None  # enough to prove the launcher is ours


def test_fields_of_a_newer_launcher_are_ignored() -> None:
    doc = {"name": "t", "wan": {"api": "a", "new": 1}, "new": [1], "format": 9}
    assert parse_state(PATH, json.dumps(doc).encode()).name == "t"


@pytest.mark.parametrize(("doc", "reason"), [
    ({"name": "t", "pid": True, "wan": {"api": "a"}}, "pid: expected a positive integer or null, found True"),
    ({"name": "t", "pid": -4, "wan": {"api": "a"}}, "pid: expected a positive integer or null, found -4"),
    ({"name": "t", "wan": {"api": "a", "pid": "9"}}, "wan.pid: expected a positive integer or null, found '9'"),
    ({"name": "t", "wan": {"api": "a", "cmdline": "causeway"}},
     "wan.cmdline: expected a list of strings, found 'causeway'"),
    ({"name": "t"}, "wan: missing"),
    ({"name": "t", "wan": []}, "wan: expected an object, found list"),
    ({"name": "t", "wan": {"api": "a"}, "mirrors": []}, "mirrors: expected an object, found list"),
    # A cluster called "pid" is a name, not the pid field.
    ({"name": "t", "wan": {"api": "a"}, "clusters": {"pid": {"datacenter": "d", "bootstrap": "b", "brokers": 3}}},
     "clusters.pid.brokers: expected list, found int"),
    ({"name": "t", "wan": {"api": "a"}, "clusters": {"c": {"datacenter": "d", "bootstrap": 1, "brokers": []}}},
     "clusters.c.bootstrap: expected str, found int"),
])
def test_damage_is_named_by_field(doc: object, reason: str) -> None:
    with pytest.raises(StateFileError) as caught:
        parse_state(PATH, json.dumps(doc).encode())
    assert caught.value.path == PATH
    assert caught.value.reason == f"is not a launcher state file: {reason}"
