"""What the three dashboards share: the Prometheus data source as a dashboard variable, panels
built from PromQL with their place on Grafana's 24-column grid worked out row by row, and the
dashboard's JSON as Grafana imports it (stable, so the checked-in files can be compared)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from grafanalib._gen import DashboardEncoder  # grafanalib's own encoder for its objects
from grafanalib.core import (
    Dashboard,
    GridPos,
    RowPanel,
    Stat,
    Target,
    Template,
    Templating,
    Time,
    TimeSeries,
)

__all__ = ["DATASOURCE", "SCHEMA_VERSION", "Row", "dashboard", "query_variable", "rate", "render", "stat", "timeseries"]

#: Every panel and variable reads the Prometheus chosen in the dashboard's `datasource` variable,
#: so one file serves any Grafana, whatever its data source is called.
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
#: The dashboard JSON's version: Grafana 9's (data sources named by {type, uid}, the timeseries and
#: stat panels as written here), so Grafana 9 and later load it without migrating anything.
SCHEMA_VERSION = 36
#: Grafana's grid is 24 columns wide.
GRID_WIDTH = 24
#: The window of every rate(): Grafana's own, at least four scrape intervals.
RATE_WINDOW = "$__rate_interval"


def rate(metric: str, matchers: str = "") -> str:
    """`rate(metric{matchers}[$__rate_interval])`, without braces when `matchers` is empty."""
    return f"rate({metric}{{{matchers}}}[{RATE_WINDOW}])" if matchers else f"rate({metric}[{RATE_WINDOW}])"


def timeseries(title: str, description: str, targets: list[tuple[str, str]], *, unit: str = "short",
               width: int = 12, height: int = 8) -> TimeSeries:
    """A graph of each (expression, legend) in `targets`; its place is set by `dashboard`."""
    return TimeSeries(title=title, description=description, dataSource=DATASOURCE, unit=unit,
                      targets=_targets(targets), gridPos=GridPos(h=height, w=width, x=0, y=0),
                      legendDisplayMode="table", legendCalcs=["lastNotNull", "max"])


def stat(title: str, description: str, expr: str, *, unit: str = "none", width: int = 6, height: int = 4,
         red_from: float = 1) -> Stat:
    """One number, the last value of `expr`: green below `red_from`, red from it."""
    thresholds = [{"color": "green", "value": None}, {"color": "red", "value": red_from}]
    return Stat(title=title, description=description, dataSource=DATASOURCE, format=unit, reduceCalc="lastNotNull",
                targets=_targets([(expr, title)]), thresholds=thresholds, graphMode="none",
                gridPos=GridPos(h=height, w=width, x=0, y=0))


def _targets(targets: list[tuple[str, str]]) -> list[Target]:
    return [Target(expr=expr, legendFormat=legend, refId=chr(ord("A") + i), datasource=DATASOURCE)
            for i, (expr, legend) in enumerate(targets)]


def query_variable(name: str, label: str, query: str) -> Template:
    """A variable listing the values of a label (`label_values(metric, label)`), several or all
    of them selectable; `.*` when all are."""
    return Template(name=name, label=label, query=query, dataSource=DATASOURCE, type="query",
                    includeAll=True, multi=True, allValue=".*", default="$__all")


@dataclass(frozen=True)
class Row:
    """A titled row of panels, laid out left to right and wrapped at the grid's width."""

    title: str
    panels: list[Any]


def dashboard(uid: str, title: str, description: str, variables: list[Template], rows: list[Row]) -> Dashboard:
    """The dashboard: the data source variable first, then `variables`; each row's panels placed
    under its title, left to right, a new line when the next does not fit."""
    placed: list[Any] = []
    y = 0
    for row in rows:
        placed.append(RowPanel(title=row.title, gridPos=GridPos(h=1, w=GRID_WIDTH, x=0, y=y)))
        y += 1
        x = line_height = 0
        for panel in row.panels:
            pos = panel.gridPos
            if x + pos.w > GRID_WIDTH:
                x, y, line_height = 0, y + line_height, 0
            panel.gridPos = GridPos(h=pos.h, w=pos.w, x=x, y=y)
            placed.append(panel)
            x += pos.w
            line_height = max(line_height, pos.h)
        y += line_height
    source = Template(name="datasource", label="Prometheus", query="prometheus", type="datasource")
    return Dashboard(title=title, uid=uid, description=description, tags=["causeway", "kafka"],
                     panels=placed, templating=Templating(list=[source, *variables]),
                     time=Time("now-1h", "now"), refresh="30s", schemaVersion=SCHEMA_VERSION).auto_panel_ids()


def render(board: Dashboard) -> str:
    """The dashboard's JSON as Grafana imports it, keys sorted so a change shows as a small diff."""
    return json.dumps(board.to_json_data(), cls=DashboardEncoder, indent=2, sort_keys=True) + "\n"
