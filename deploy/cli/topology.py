"""`causeway topology check|explain|graph FILE`."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from topology import Topology, TopologyError, load_topology
from topology.graph import explain, to_dot, to_mermaid

__all__ = ["register"]


def _load(args: argparse.Namespace) -> Topology | None:
    try:
        return load_topology(Path(args.file))
    except TopologyError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        print(f"{args.file}: {len(exc.problems)} problem(s)", file=sys.stderr)
        return None


def _check(args: argparse.Namespace) -> int:
    topology = _load(args)
    if topology is None:
        return 1
    t = topology
    print(f"{args.file}: valid: {len(t.datacenters)} datacenters, {len(t.clusters)} clusters, "
          f"{len(t.links)} WAN links, {len(t.mirrors)} mirrors")
    return 0


def _explain(args: argparse.Namespace) -> int:
    topology = _load(args)
    if topology is None:
        return 1
    print(explain(topology))
    return 0


def _graph(args: argparse.Namespace) -> int:
    topology = _load(args)
    if topology is None:
        return 1
    if args.format == "mermaid":
        text = to_mermaid(topology)
    else:
        text = to_dot(topology)
    if args.format == "svg":
        dot = shutil.which("dot")
        if dot is None:
            print("causeway: --format svg needs Graphviz's `dot` (apt-get install graphviz); "
                  "--format dot prints the source instead", file=sys.stderr)
            return 1
        text = subprocess.run([dot, "-Tsvg"], input=text, capture_output=True, text=True, check=True).stdout
    if args.output is not None:
        Path(args.output).write_text(text)
        print(f"wrote {args.output}")
    else:
        sys.stdout.write(text)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser("topology", help="check, explain or draw a topology file")
    commands = parser.add_subparsers(dest="topology_command", required=True)
    check = commands.add_parser("check", help="validate; exit 1 with every problem (file:line:col: key: ...)")
    check.add_argument("file", type=Path)
    check.set_defaults(func=_check)
    expl = commands.add_parser("explain", help="per cluster: which topics arrive from where, over which links")
    expl.add_argument("file", type=Path)
    expl.set_defaults(func=_explain)
    graph = commands.add_parser("graph", help="a picture: Graphviz dot, Mermaid, or SVG (needs Graphviz)")
    graph.add_argument("file", type=Path)
    graph.add_argument("--format", choices=["dot", "mermaid", "svg"], default="dot")
    graph.add_argument("--output", type=Path, help="write to this file instead of stdout")
    graph.set_defaults(func=_graph)
