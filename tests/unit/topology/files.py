"""Topology files for the topology tests: written to a temporary directory, and the problems
`load_topology` names in a broken one."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from topology import TopologyError, load_topology

__all__ = ["GOOD", "assert_refused_at", "problems", "write"]

# A valid topology: two datacenters, a cluster in each, a WAN link and a mirror between them.
GOOD = """\
name: t
datacenters:
  east: {}
  west: {}
clusters:
  east: {datacenter: east, topics: {orders: 3}}
  west: {datacenter: west}
links:
  - between: [east, west]
    latency: 40ms
mirrors:
  e2w: {source: east, target: west}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "topo.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def problems(tmp_path: Path, text: str) -> list[str]:
    """Each problem `load_topology` reports in `text`, without its file name ("line:col: key: ...")."""
    path = write(tmp_path, text)
    with pytest.raises(TopologyError) as exc:
        load_topology(path)
    return [str(p).removeprefix(f"{path}:") for p in exc.value.problems]


def assert_refused_at(tmp_path: Path, text: str, where: str, message: str) -> None:
    """`load_topology` refuses `text` with a problem named at `where` ("line:col: key") whose
    message has `message` in it (the broken-file tables' one check)."""
    rendered = problems(tmp_path, text)
    assert any(r.startswith(where) and message in r for r in rendered), rendered
