"""A drill's throughput and lag over time, sampled while it runs and drawn as an SVG chart.

A `Sampler` thread asks the drill every SAMPLE_EVERY_S what its clients have done so far (records
acknowledged at each site, records the group read) and how far the DR site's logs are behind the
primary's acknowledged records; `render_svg` draws two panels over the drill's seconds: records/s
(the differences between samples) and lag in records, with the timeline's steps as vertical
marks. The SVG is written by hand, as pipeline/lag.py's chart is: no plotting library for a few
lines and labels.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from html import escape

from deploy.drill.report import DrillReport, Sample

__all__ = ["SAMPLE_EVERY_S", "Sampler", "render_svg"]

SAMPLE_EVERY_S = 0.5


class Sampler:
    """Calls `probe(at_s)` every SAMPLE_EVERY_S in a thread of its own until `stop`; a probe that
    raises is skipped (a cluster that does not answer leaves a gap, not a stopped chart)."""

    def __init__(self, started: float, probe: Callable[[float], Sample]) -> None:
        self.samples: list[Sample] = []
        self._started, self._probe = started, probe
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="drill-sampler", daemon=True)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stopping.wait(SAMPLE_EVERY_S):
            try:
                sample = self._probe(time.monotonic() - self._started)
            except Exception:  # noqa: BLE001 - a gap in the chart; the drill reports the failure itself
                continue
            self.samples.append(sample)

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(10.0)


# -- the chart -------------------------------------------------------------------------------------

_W, _L, _R, _T, _PANEL, _GAP = 900, 70, 190, 34, 200, 60
_H = _T + 2 * _PANEL + _GAP + 40
_RATES = (("acked_primary", "acknowledged at the primary", "#1f77b4"),
          ("acked_dr", "acknowledged at the DR site", "#2ca02c"),
          ("read", "read by the group", "#ff7f0e"))


def _rates(samples: list[Sample], field: str) -> list[tuple[float, float]]:
    """Records/s between consecutive samples, placed at the later one."""
    points = []
    for before, after in zip(samples, samples[1:], strict=False):
        span = after.at_s - before.at_s
        if span > 0:
            points.append((after.at_s, max(0.0, (getattr(after, field) - getattr(before, field)) / span)))
    return points


def render_svg(report: DrillReport, samples: list[Sample]) -> str:
    """Records/s (acknowledged at each site, read by the group) and the DR site's lag in records,
    over the drill's seconds, with its steps marked; an SVG document."""
    end = max([s.at_s for s in samples] + [step.start_s + (step.duration_s or 0) for step in report.timeline.steps]
              + [1.0])
    pw = _W - _L - _R
    rates = {field: _rates(samples, field) for field, _, _ in _RATES}
    lag = [(s.at_s, float(s.lag)) for s in samples if s.lag is not None]
    title = (f"drill {report.kind}" + (f" (disaster: {report.disaster})" if report.disaster else "")
             + f", mirror {report.mirror} ({report.mode}), {report.rate:g} records/s")
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" font-family="sans-serif" '
           'font-size="12">',
           f'<rect width="{_W}" height="{_H}" fill="white"/>',
           f'<text x="{_L}" y="20" font-size="14">{escape(title)}</text>']

    def x(seconds: float) -> float:
        return _L + seconds / end * pw

    def panel(top: float, name: str, unit: str, series: list[tuple[str, str, str, list[tuple[float, float]]]]) -> None:
        high = max((v for *_, points in series for _, v in points), default=0.0) or 1.0

        def y(v: float) -> float:
            return top + _PANEL - v / high * _PANEL

        out.append(f'<text x="{_L}" y="{top - 6}">{escape(name)} ({escape(unit)})</text>')
        out.append(f'<line x1="{_L}" y1="{top + _PANEL}" x2="{_L + pw}" y2="{top + _PANEL}" stroke="black"/>')
        out.append(f'<line x1="{_L}" y1="{top}" x2="{_L}" y2="{top + _PANEL}" stroke="black"/>')
        for i in range(5):
            v = high * i / 4
            out.append(f'<text x="{_L - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.0f}</text>')
            out.append(f'<line x1="{_L}" y1="{y(v):.1f}" x2="{_L + pw}" y2="{y(v):.1f}" stroke="#ddd"/>')
        for step in report.timeline.steps:
            out.append(f'<line class="step" x1="{x(step.start_s):.1f}" y1="{top}" x2="{x(step.start_s):.1f}" '
                       f'y2="{top + _PANEL}" stroke="#999" stroke-dasharray="3,3"/>')
        for n, (key, label, colour, points) in enumerate(series):
            coords = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in points)
            out.append(f'<polyline class="series" data-series="{key}" fill="none" stroke="{colour}" '
                       f'stroke-width="1.5" points="{coords}"/>')
            out.append(f'<text x="{_L + pw + 12}" y="{top + 14 + 16 * n}" fill="{colour}">{escape(label)}</text>')

    panel(_T + 14, "throughput", "records/s", [(f, label, colour, rates[f]) for f, label, colour in _RATES])
    lag_top = _T + 14 + _PANEL + _GAP
    panel(lag_top, "lag: acknowledged at the primary, not yet at the DR site", "records",
          [("lag", "DR site behind", "#d62728", lag)])
    for i in range(5):
        seconds = end * i / 4
        out.append(f'<text x="{x(seconds):.1f}" y="{lag_top + _PANEL + 18}" text-anchor="middle">'
                   f'{seconds:.1f} s</text>')
    # The steps, named once, under the lag panel's axis (their marks run through both panels).
    for n, step in enumerate(report.timeline.steps):
        out.append(f'<text x="{x(step.start_s) + 3:.1f}" y="{_T + 14 + _PANEL + 16 + 12 * (n % 3)}" '
                   f'font-size="10" fill="#555">{escape(step.name)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
