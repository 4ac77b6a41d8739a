from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from deploy.cli import topology as topology_cli
from tests.unit.topology.files import GOOD, assert_refused_at, write
from topology import TopologyError, load_topology
from topology.graph import arrivals, explain, to_dot, to_mermaid
from topology.units import parse_bandwidth, parse_duration_ms

EXAMPLES = sorted((Path(__file__).resolve().parents[3] / "examples").glob("*.yaml"))


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_example_is_valid(example: Path) -> None:
    topology = load_topology(example)
    assert topology.clusters and topology.datacenters


def test_the_examples_are_the_three_promised() -> None:
    assert {p.name for p in EXAMPLES} >= {"two-dc.yaml", "aggregate.yaml", "active-active.yaml"}


# (what is broken, the file, the expected "line:col: path: " prefix, a fragment of the message)
BROKEN = [
    ("syntax", GOOD.replace("  east: {}", "  east: {"), "5:1", "YAML syntax error"),
    ("duplicate key", GOOD.replace("  west: {}\n", "  west: {}\n  east: {}\n", 1), "5:3: datacenters.east:",
     "duplicate key (first at line 3)"),
    ("unknown top key", GOOD + "mirorrs: {}\n", "13:1: mirorrs:", "unknown key 'mirorrs'"),
    ("unknown cluster key", GOOD.replace("{datacenter: west}", "{datacenter: west, broker: 2}"),
     "7:28: clusters.west.broker:", "unknown key 'broker'"),
    ("dangling datacenter", GOOD.replace("{datacenter: west}", "{datacenter: wset}"),
     "7:10: clusters.west.datacenter:", "unknown datacenter 'wset' (did you mean 'west'?)"),
    ("dangling mirror source", GOOD.replace("source: east", "source: eats"),
     "12:9: mirrors.e2w.source:", "unknown cluster 'eats' (did you mean 'east'?)"),
    ("wrong type", GOOD.replace("topics: {orders: 3}", "topics: {orders: {partitions: many}}"),
     "6:46: clusters.east.topics.orders.partitions:", "valid integer"),
    ("bad duration unit", GOOD.replace("latency: 40ms", "latency: 40 parsecs"),
     "10:5: links[0].latency:", "not a duration"),
    ("bad bandwidth", GOOD.replace("latency: 40ms", "latency: 40ms\n    bandwidth: fast"),
     "11:5: links[0].bandwidth:", "not a bandwidth"),
    ("loss over 100%", GOOD.replace("latency: 40ms", "latency: 40ms\n    loss: 150%"),
     "11:5: links[0].loss:", "from 0% up to (not including) 100%"),
    ("loss without %", GOOD.replace("latency: 40ms", "latency: 40ms\n    loss: 0.1"),
     "11:5: links[0].loss:", "write it with %"),
    ("negative reorder", GOOD.replace("latency: 40ms", "latency: 40ms\n    reorder: -5%"),
     "11:5: links[0].reorder:", "from 0% up to"),
    ("negative bandwidth", GOOD.replace("latency: 40ms", "latency: 40ms\n    bandwidth: -10Mbit"),
     "11:5: links[0].bandwidth:", "a bandwidth cannot be negative"),
    ("link to nowhere", GOOD.replace("between: [east, west]", "between: [east, north]"),
     "9:21: links[0].between[1]:", "unknown datacenter 'north'"),
    ("mirror without a link", GOOD.replace("links:\n  - between: [east, west]\n    latency: 40ms\n", "links: []\n"),
     "10:23: mirrors.e2w.target:", "no WAN link between datacenters 'east' and 'west'"),
    ("mirror onto itself", GOOD.replace("target: west", "target: east"),
     "12:23: mirrors.e2w.target:", "two different clusters"),
    ("port clash", GOOD.replace("{datacenter: west}", "{datacenter: west, port: 9092}").replace(
        "{datacenter: east, topics", "{datacenter: east, port: 9092, topics"),
     "7:28: clusters.west.port:", "port 9092 is also used by cluster 'east'"),
    ("replication above brokers", GOOD.replace("topics: {orders: 3}", "topics: {orders: {replication_factor: 3}}"),
     "6:46: clusters.east.topics.orders.replication_factor:", "more than the cluster's 1 broker"),
    ("bad regex", GOOD.replace("e2w: {source: east, target: west}",
                               "e2w: {source: east, target: west, topics: {include: ['(']}}"),
     "12:46: mirrors.e2w.topics.include:", "not a regular expression"),
    ("identity loop", GOOD.replace("e2w: {source: east, target: west}",
                                   "e2w: {source: east, target: west, naming: identity}\n"
                                   "  w2e: {source: west, target: east, naming: identity}"),
     "13:37: mirrors.w2e.naming:", "mirror loop with identity naming on every hop (east -> west -> east)"),
    ("not a mapping", "- just\n- a list\n", "1:1: (top level):", "a topology is a mapping"),
    ("empty", "", "1:1: (top level):", "the file is empty"),
]


@pytest.mark.parametrize(("what", "text", "where", "message"), BROKEN, ids=[b[0] for b in BROKEN])
def test_broken_files_are_named_by_line_and_key(tmp_path: Path, what: str, text: str, where: str,
                                                message: str) -> None:
    assert_refused_at(tmp_path, text, where, message)


def test_all_problems_are_reported_not_just_the_first(tmp_path: Path) -> None:
    text = GOOD.replace("{datacenter: west}", "{datacenter: wset}").replace("source: east", "source: eats")
    with pytest.raises(TopologyError) as exc:
        load_topology(write(tmp_path, text))
    assert len(exc.value.problems) == 2


@pytest.mark.parametrize(("text", "ms"), [("40ms", 40), ("1.5s", 1500), ("2m", 120_000), ("1h", 3_600_000), (25, 25)])
def test_durations(text: object, ms: int) -> None:
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize(("text", "rate"), [("100Mbit", 12_500_000), ("1Gbit", 125_000_000), ("10MB", 10_000_000),
                                            ("500KB/s", 500_000), ("8bit", 1)])
def test_bandwidths(text: str, rate: int) -> None:
    assert parse_bandwidth(text) == rate


@pytest.mark.parametrize(("line", "key", "fragment"), [
    ("loss: 150%", "links[0].loss", "100%"),
    ("bandwidth: -10Mbit", "links[0].bandwidth", "cannot be negative"),
])
def test_bad_link_values_are_refused_naming_file_line_and_key(tmp_path: Path, line: str, key: str,
                                                             fragment: str) -> None:
    path = write(tmp_path, GOOD.replace("latency: 40ms", f"latency: 40ms\n    {line}"))
    with pytest.raises(TopologyError) as exc:
        load_topology(path)
    [problem] = exc.value.problems
    assert str(problem).startswith(f"{path}:11:5: {key}: ") and fragment in str(problem)


def test_a_link_takes_loss_and_reorder_as_netem_percentages(tmp_path: Path) -> None:
    text = GOOD.replace("latency: 40ms", "latency: 40ms\n    loss: 0.1%\n    reorder: 25%\n    bandwidth: 10Mbit")
    topology = load_topology(write(tmp_path, text))
    [link] = topology.links
    assert (link.loss, link.reorder, link.bandwidth) == (0.1, 25.0, 1_250_000)
    assert "east -.-|WAN 40 ms, 10 Mbit/s, 0.1% loss| west" in to_mermaid(topology)


def test_default_naming_breaks_the_active_active_loop(tmp_path: Path) -> None:
    text = GOOD.replace("e2w: {source: east, target: west}",
                        "e2w: {source: east, target: west}\n  w2e: {source: west, target: east}")
    topology = load_topology(write(tmp_path, text))
    held = arrivals(topology)
    assert set(held["west"]) == {"east.orders"}
    assert set(held["east"]) == {"orders"}  # east.orders is never sent back as west.east.orders


def test_explain_and_pictures_for_the_aggregate_example() -> None:
    topology = load_topology(next(p for p in EXAMPLES if p.name == "aggregate.yaml"))
    text = explain(topology)
    assert "aggregate.local-sfo.clicks <- local-sfo:clicks via sfo-into-aggregate -> aggregate-to-analytics" in text
    assert "2 hops; sfo<->nyc (35 ms), nyc<->lon (38 ms)" in text
    assert "aggregate.local-nyc.orders" not in text  # excluded by the analytics mirror's pattern
    dot = to_dot(topology)
    assert dot.startswith('digraph "aggregate"') and "subgraph cluster_lon" in dot
    assert "c_aggregate -> c_analytics" in dot
    mermaid = to_mermaid(topology)
    assert mermaid.startswith("flowchart LR") and "c_aggregate[[aggregate]]" in mermaid


def _run_cli(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    topology_cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(list(argv))
    return int(args.func(args))


def test_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = write(tmp_path, GOOD)
    assert _run_cli("topology", "check", str(good)) == 0
    assert "valid: 2 datacenters, 2 clusters, 1 WAN links, 1 mirrors" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD.replace("source: east", "source: eats"))
    assert _run_cli("topology", "check", str(bad)) == 1
    assert "unknown cluster 'eats' (did you mean 'east'?)" in capsys.readouterr().err
    assert _run_cli("topology", "graph", str(good), "--format", "mermaid") == 0
    assert "flowchart LR" in capsys.readouterr().out
    assert _run_cli("topology", "explain", str(good)) == 0
    assert "east.orders <- east:orders via e2w" in capsys.readouterr().out
