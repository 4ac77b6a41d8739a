"""Link-mode mirrors in a topology: what `causeway topology check` refuses (by line and key),
what the launcher writes into the mirror's config, and what `status` reads back."""

from __future__ import annotations

import json
from pathlib import Path

from deploy.launcher.from_topology import plan_from_file
from deploy.launcher.state_file import parse_state
from tests.unit.topology.files import GOOD, problems, write
from topology import load_topology
from topology.graph import arrivals, explain

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "dr-link.yaml"

# GOOD with its mirror in link mode.
LINK = GOOD.replace("e2w: {source: east, target: west}", "e2w: {source: east, target: west, mode: link}")


def test_a_link_mirror_keeps_names_without_saying_so(tmp_path: Path) -> None:
    topology = load_topology(write(tmp_path, LINK))
    mirror = topology.mirrors["e2w"]
    assert (mirror.mode, mirror.keeps_names, mirror.effective_naming) == ("link", True, "identity")
    assert set(arrivals(topology)["west"]) == {"orders"}
    assert "orders <- east:orders via e2w" in explain(topology) and "read-only mirror topic" in explain(topology)


def test_explicit_identity_naming_is_fine_with_link_mode(tmp_path: Path) -> None:
    topology = load_topology(write(tmp_path, LINK.replace("mode: link}", "mode: link, naming: identity}")))
    assert topology.mirrors["e2w"].remote_name("orders") == "orders"


def test_explicit_default_naming_with_link_mode_is_refused_by_line_and_key(tmp_path: Path) -> None:
    found = problems(tmp_path, LINK.replace("mode: link}", "mode: link, naming: default}"))
    assert len(found) == 1, found
    assert found[0].startswith("12:49: mirrors.e2w.naming: a link-mode mirror keeps topic names"), found


def test_default_naming_on_its_own_line_is_named_at_that_line(tmp_path: Path) -> None:
    text = LINK.replace("  e2w: {source: east, target: west, mode: link}\n",
                        "  e2w:\n    source: east\n    target: west\n    mode: link\n    naming: default\n")
    found = problems(tmp_path, text)
    assert [f.split(": ", 2)[:2] for f in found] == [["16:5", "mirrors.e2w.naming"]], found


def test_a_target_topic_under_a_mirrored_name_is_refused(tmp_path: Path) -> None:
    declared = LINK.replace("west: {datacenter: west}", "west: {datacenter: west, topics: {orders: 1}}")
    found = problems(tmp_path, declared)
    assert len(found) == 1, found
    assert found[0].startswith("7:37: clusters.west.topics.orders: link-mode mirror 'e2w' copies topic 'orders'"), found
    # Excluded from the mirror, the same topic is the target's own business.
    load_topology(write(tmp_path, declared.replace("mode: link}", "mode: link, topics: {exclude: [orders]}}")))


def test_a_loop_of_link_mirrors_is_refused(tmp_path: Path) -> None:
    text = LINK + "  w2e: {source: west, target: east, mode: link}\n"
    found = problems(tmp_path, text)
    assert any(f.startswith("13:37: mirrors.w2e.mode: mirror loop that keeps topic names") for f in found), found


def test_an_mm2_mirror_still_defaults_to_mm2_naming(tmp_path: Path) -> None:
    topology = load_topology(write(tmp_path, LINK.replace(", mode: link}", "}")))
    assert topology.mirrors["e2w"].remote_name("orders") == "east.orders"


def test_the_dr_link_example_is_a_link_mirror_between_two_local_clusters() -> None:
    topology = load_topology(EXAMPLE)
    assert [c.role for c in topology.clusters.values()] == ["local", "local"]
    assert len(topology.datacenters) == 2
    assert [m.mode for m in topology.mirrors.values()] == ["link"]


def test_the_launcher_writes_the_mode_into_the_mirror_config(tmp_path: Path) -> None:
    plan = plan_from_file(write(tmp_path, LINK))
    (mirror,) = plan.mirrors
    assert mirror.mode == "link" and mirror.keeps_names
    assert mirror.settings["mode"] == "link"
    assert "naming" not in mirror.settings  # the mirror refuses naming: default with link mode
    (mm2,) = plan_from_file(write(tmp_path, LINK.replace(", mode: link}", "}"))).mirrors
    assert (mm2.mode, mm2.settings["mode"], mm2.settings["naming"]) == ("mm2", "mm2", "default")


def test_a_state_file_without_mirror_modes_reads_as_mm2(tmp_path: Path) -> None:
    state = {"name": "t", "wan": {"api": "127.0.0.1:1"}, "clusters": {},
             "mirrors": {"old": {"source": "a", "target": "b", "status_file": "s.json"},
                         "new": {"source": "a", "target": "b", "status_file": "s.json", "mode": "link"}}}
    parsed = parse_state(tmp_path / "state.json", json.dumps(state).encode())
    assert {n: m.mode for n, m in parsed.mirrors.items()} == {"old": "mm2", "new": "link"}
