"""The Grafana dashboards: the checked-in JSON is exactly what deploy/dashboards generates (so the
two cannot drift), each file is a dashboard Grafana can import (uid, title, schema version, panels
on the grid, every query on the dashboard's Prometheus data source variable), and the PromQL
reader the integration test relies on finds metric names and nothing else."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from deploy.dashboards import BUILDERS, generate
from deploy.dashboards.__main__ import main
from deploy.dashboards.panels import DATASOURCE, GRID_WIDTH, SCHEMA_VERSION
from tests.support.dashboards import DASHBOARDS, expressions, load_dashboards, metric_names


def test_the_checked_in_json_is_what_the_code_generates() -> None:
    generated = generate()
    assert sorted(generated) == sorted(p.name for p in DASHBOARDS.glob("*.json"))
    for name, text in generated.items():
        assert (DASHBOARDS / name).read_text() == text, f"{name} is stale: run python -m deploy.dashboards"
    assert main(["--check"]) == 0


def test_check_reports_a_stale_file_and_writing_fixes_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--out", str(tmp_path), "--check"]) == 1  # nothing written yet
    assert main(["--out", str(tmp_path)]) == 0
    assert main(["--out", str(tmp_path), "--check"]) == 0
    (tmp_path / "causeway-mirror.json").write_text("{}\n")
    capsys.readouterr()
    assert main(["--out", str(tmp_path), "--check"]) == 1
    assert "causeway-mirror.json: differs" in capsys.readouterr().err


def _panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in board["panels"] if p["type"] != "row"]


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_each_dashboard_is_one_grafana_imports(name: str) -> None:
    board = load_dashboards()[name]
    assert board["uid"] == name.removesuffix(".json") and len(board["uid"]) <= 40  # Grafana's uid limit
    assert board["title"] and board["schemaVersion"] == SCHEMA_VERSION
    assert board["id"] is None  # Grafana gives an imported dashboard its own
    variables = board["templating"]["list"]
    assert variables[0]["name"] == "datasource" and variables[0]["type"] == "datasource"
    assert variables[0]["query"] == "prometheus"
    assert all(v["datasource"] == DATASOURCE for v in variables[1:])
    panels = _panels(board)
    assert panels and len({p["id"] for p in board["panels"]}) == len(board["panels"])
    assert {p["type"] for p in panels} <= {"timeseries", "stat"}
    taken: set[tuple[int, int]] = set()
    for panel in board["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= GRID_WIDTH and pos["h"] > 0 and pos["w"] > 0, panel["title"]
        cells = {(pos["x"] + dx, pos["y"] + dy) for dx in range(pos["w"]) for dy in range(pos["h"])}
        assert not cells & taken, f"{panel['title']} overlaps another panel"
        taken |= cells
    for panel in panels:
        assert panel["title"] and panel["description"], panel
        assert panel["datasource"] == DATASOURCE
        assert panel["targets"], panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(set(refs)) == len(refs)
        assert all(t["datasource"] == DATASOURCE and metric_names(t["expr"]) for t in panel["targets"])
    assert all(metric_names(e) for e in expressions(board))


def _as_prometheus_reads_it(expr: str) -> str:
    """The expression with Grafana's variables replaced as Grafana replaces them before sending it."""
    expr = expr.replace("$__rate_interval", "1m").replace("$__range", "1h")
    return re.sub(r"\$\w+", ".*", expr)


def test_every_expression_is_promql_that_prometheus_parses(tmp_path: Path) -> None:
    """Each panel's query, variables replaced, as a recording rule that Prometheus's own
    `promtool check rules` (Debian's prometheus package, as `make system-deps` installs) parses."""
    rules = [{"record": f"causeway:dashboard:{i}", "expr": _as_prometheus_reads_it(target["expr"])}
             for i, target in enumerate(t for board in load_dashboards().values()
                                        for p in _panels(board) for t in p["targets"])]
    path = tmp_path / "rules.yml"
    path.write_text(json.dumps({"groups": [{"name": "dashboards", "rules": rules}]}))  # JSON is YAML
    checked = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(rules)} rules found" in checked.stdout


@pytest.mark.parametrize(("expr", "names"), [
    ('sum by (topic) (rate(kafka_x_total{instance=~"$instance",topic=~"a|b"}[$__rate_interval]))', {"kafka_x_total"}),
    ("histogram_quantile(0.99, sum by (request, le) (rate(t_bucket[5m])))", {"t_bucket"}),
    ('changes(p{instance=~"$i"}[1h]) and on (instance) group by (instance) (m)', {"p", "m"}),
    ('max by (a) (x) * on (a) group_left (b) y offset 5m > 0', {"x", "y"}),
    ('count without (le, "q") (z{k="by (x)"}) unless bool w', {"z", "w"}),
])
def test_metric_names_are_the_selectors_only(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names
