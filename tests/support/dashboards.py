"""The checked-in Grafana dashboards (monitoring/grafana/*.json) as tests read them: every PromQL
expression they hold (panels' targets and variables' queries), and the metric names each names.

    for expr in expressions(load_dashboards()["causeway-broker.json"]): metric_names(expr)
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["DASHBOARDS", "expressions", "load_dashboards", "metric_names"]

DASHBOARDS = Path(__file__).resolve().parents[2] / "monitoring" / "grafana"

# What is not a metric name: strings, label matchers, range windows, and the label lists of
# by/without/on/ignoring/group_left/group_right are cut out first; then a name followed by "(" is
# a function or an aggregation, and PromQL's few keywords remain.
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACES = re.compile(r"\{[^}]*\}")
_WINDOWS = re.compile(r"\[[^\]]*\]")
_LABEL_LISTS = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_NAMES = re.compile(r"(?<![\w$.])([a-zA-Z_:][\w:]*)(\s*\()?")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left",
             "group_right", "inf", "nan"}
_LABEL_VALUES = re.compile(r"label_values\(\s*([a-zA-Z_:][\w:]*)\s*(?:\{[^}]*\})?\s*,")


def load_dashboards() -> dict[str, dict[str, Any]]:
    """Every checked-in dashboard, by file name."""
    return {path.name: json.loads(path.read_text()) for path in sorted(DASHBOARDS.glob("*.json"))}


def expressions(dashboard: dict[str, Any]) -> Iterator[str]:
    """Every PromQL expression of the dashboard: its panels' targets (rows' nested panels too) and
    its query variables' `label_values(metric, label)` (yielded as the metric alone)."""
    panels = list(dashboard.get("panels", []))
    while panels:
        panel = panels.pop()
        panels.extend(panel.get("panels", []))
        for target in panel.get("targets", []):
            yield target["expr"]
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            match = _LABEL_VALUES.match(variable["query"])
            assert match, f"a variable's query that is not label_values(metric, label): {variable['query']}"
            yield match.group(1)


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects."""
    text = _STRINGS.sub(" ", expr)
    text = _BRACES.sub(" ", text)
    text = _WINDOWS.sub(" ", text)
    text = _LABEL_LISTS.sub(" ", text)
    return {name for name, call in _NAMES.findall(text) if not call and name.lower() not in _KEYWORDS}
