"""A drill's limits (--max-rpo, --max-rto) and its chart, from reports built here: the limits name
what was exceeded (nothing at the limit itself), and the chart draws each sampled series with the
rates between samples and the lag as sampled."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from deploy.cli.drill import limits_exceeded
from deploy.drill.chart import render_svg
from deploy.drill.report import DrillReport, Sample, Step, Timeline
from deploy.drill.verify import Lost, Outcome

SVG = "{http://www.w3.org/2000/svg}"


def report(rpo: int, rto_produce_s: float, rto_consume_s: float) -> DrillReport:
    lost = [Lost("orders", 0, rpo, [(10, 10 + rpo - 1)])] if rpo else []
    result = DrillReport("failover", "kill", "primary-to-dr", ["orders"], 100.0, timeline=Timeline(),
                         outcome=Outcome(acknowledged=50, reached=50 - rpo, lost=lost))
    result.rto_produce_s, result.rto_consume_s = rto_produce_s, rto_consume_s
    return result


def test_limits_name_what_was_exceeded_and_nothing_at_the_limit() -> None:
    assert limits_exceeded(report(3, 1.0, 4.0), max_rpo=3, max_rto=4.0) == []
    assert limits_exceeded(report(3, 1.0, 4.0), max_rpo=None, max_rto=None) == []
    assert limits_exceeded(report(4, 1.0, 4.5), max_rpo=3, max_rto=4.0) == [
        "RPO 4 record(s) > --max-rpo 3", "RTO 4.50 s > --max-rto 4 s"]
    # The later of first produce and first consume is the RTO.
    assert limits_exceeded(report(0, 6.0, 2.0), max_rpo=0, max_rto=5.0) == ["RTO 6.00 s > --max-rto 5 s"]


def test_the_chart_draws_rates_between_samples_and_the_lag_as_sampled() -> None:
    drill = report(0, 1.0, 2.0)
    for name, start, took in (("workload at the primary", 0.0, 2.0), ("disaster: kill", 2.0, 0.1),
                              ("promote --failover", 2.1, 0.5)):
        drill.timeline.steps.append(Step(name, start, took))
    samples = [Sample(0.5, 0, 0, 0, 0), Sample(1.0, 50, 0, 40, 12), Sample(1.5, 100, 0, 90, 20),
               Sample(2.5, 100, 30, 90, None)]
    root = ET.fromstring(render_svg(drill, samples))
    lines = {e.get("data-series"): e.get("points", "").split() for e in root.iter(f"{SVG}polyline")}
    assert set(lines) == {"acked_primary", "acked_dr", "read", "lag"}
    # Three intervals between four samples; the lag only where it was measured.
    assert [len(lines[k]) for k in ("acked_primary", "acked_dr", "read", "lag")] == [3, 3, 3, 3]
    # acked_primary: 100/s, 100/s, then 0/s: the last point sits on the panel's floor.
    ys = [float(p.split(",")[1]) for p in lines["acked_primary"]]
    assert ys[0] == ys[1] and ys[2] > ys[0]
    assert len(list(root.iter(f"{SVG}line"))) >= 3 * 2  # each step marked in both panels
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert "promote --failover" in texts and any("disaster: kill" in (t or "") for t in texts)

