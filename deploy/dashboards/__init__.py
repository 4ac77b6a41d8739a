"""Grafana dashboards generated from code (grafanalib): one module per dashboard, each with a
`UID` and a `build()` returning it; `python -m deploy.dashboards` writes them as JSON into
monitoring/grafana/, where they are checked in."""

from __future__ import annotations

from collections.abc import Callable

from grafanalib.core import Dashboard

from deploy.dashboards import broker, mirror, topology
from deploy.dashboards.panels import render

__all__ = ["BUILDERS", "generate"]

#: Each dashboard's file name (its uid) and the function that builds it.
BUILDERS: dict[str, Callable[[], Dashboard]] = {
    f"{broker.UID}.json": broker.build,
    f"{mirror.UID}.json": mirror.build,
    f"{topology.UID}.json": topology.build,
}


def generate() -> dict[str, str]:
    """Every dashboard's JSON, by file name."""
    return {name: render(build()) for name, build in BUILDERS.items()}
