"""`causeway status --watch`: the live view of a running topology, redrawn every interval.

The drawing is a pure function of what deploy/launcher/watch.py computes from snapshots
(`render`), so it is tested on a string; the loop (`watch`) only takes a snapshot, notes what
changed, draws, and waits for the rest of the interval. On a terminal it redraws in place (rich's
`Live`, on the alternate screen, which Ctrl-C restores); when stdout is a pipe or a file it
prints one plain snapshot per interval, without escape codes, so it can be logged.
"""

from __future__ import annotations

import io
import signal
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from broker.tasks import leaves
from deploy.cli.command import stdout_reader_gone
from deploy.launcher.watch import RATE_WINDOW_S, Rates, Snapshot, changes, rates, take_snapshot

__all__ = ["EVENTS_SHOWN", "PLAIN_WIDTH", "View", "render", "render_text", "watch"]

#: The most recent events shown under the tables.
EVENTS_SHOWN = 12
#: Under-replicated and offline partitions listed by name per cluster (all are counted).
PARTITIONS_SHOWN = 5
#: The width of a plain snapshot (a pipe has none): wide enough for every table on one line.
PLAIN_WIDTH = 140


@dataclass(frozen=True)
class View:
    """What one redraw shows: the newest snapshot, the rates over the last few, and the events
    (wall time, line) seen so far, oldest first."""

    state_dir: Path
    snapshot: Snapshot
    rates: Rates
    events: Sequence[tuple[float, str]]


def _clock(wall: float) -> str:
    return datetime.fromtimestamp(wall, tz=UTC).strftime("%H:%M:%S")


def _or_dash(value: object) -> str:
    return "-" if value is None else str(value)


def _table(*columns: str) -> Table:
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for column in columns:
        table.add_column(column, no_wrap=True)
    return table


def _bits(bytes_per_s: float) -> str:
    """A rate as a link is declared: bits per second, in the largest unit under 1000."""
    bits = bytes_per_s * 8
    for unit, size in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bits >= size:
            return f"{bits / size:.1f} {unit}"
    return f"{bits:.0f} bit/s"


def _bar(share: float, width: int = 20) -> str:
    filled = round(min(max(share, 0.0), 1.0) * width)
    return "#" * filled + "." * (width - filled)


def _clusters(report: dict[str, Any]) -> list[RenderableType]:
    clusters = _table("CLUSTER", "DATACENTER", "HEALTHY", "CONTROLLER", "PARTITIONS", "UNDER-REPLICATED", "OFFLINE")
    brokers = _table("CLUSTER", "BROKER", "STATE", "PID", "RESTARTS", "ADDRESS")
    notes: list[str] = []
    for name, c in report["clusters"].items():
        controller = c.get("controller")
        clusters.add_row(name, c["datacenter"], "yes" if c["healthy"] else "NO",
                         _or_dash(controller if controller is not None and controller >= 0 else None),
                         _or_dash(c.get("partitions")), _or_dash(c.get("under_replicated_count")),
                         _or_dash(c.get("offline_count")))
        for b in c["brokers"]:
            brokers.add_row(name, str(b["id"]), b["state"], _or_dash(b["pid"]), str(b["restarts"]),
                            _or_dash(b.get("address")))
        for kind, key in (("under-replicated", "under_replicated"), ("offline", "offline")):
            listed = c.get(key, [])
            if listed:
                more = c.get(f"{key}_count", len(listed)) - min(len(listed), PARTITIONS_SHOWN)
                tail = f" and {more} more" if more > 0 else ""
                notes.append(f"{name} {kind}: {', '.join(listed[:PARTITIONS_SHOWN])}{tail}")
        if "zookeeper" in c and not c["zookeeper"]["healthy"]:
            notes.append(f"{name}: its ZooKeeper ({c['zookeeper']['connect']}) is NOT serving")
    return [clusters, brokers, *[Text(note) for note in notes]]


def _mirrors(report: dict[str, Any], mirror_rates: dict[str, float | None]) -> list[RenderableType]:
    if not report["mirrors"]:
        return []
    table = _table("MIRROR", "SOURCE", "TARGET", "STATE", "HEALTHY", "LAG", "RECORDS/S", "LATENCY-MS", "RESTARTS")
    notes: list[str] = []
    for name, m in report["mirrors"].items():
        state = (m.get("state") or "starting") if m["alive"] else "DOWN"
        if m.get("source_reachable") is False:
            state = "SOURCE UNREACHABLE"
        lag = _or_dash(m.get("lag")) if m.get("lag_at_least") is None else f">={m['lag_at_least']}"
        rate = mirror_rates.get(name)
        table.add_row(name, m["source"], m["target"], state, "yes" if m["healthy"] else "NO", lag,
                      "-" if rate is None else f"{rate:,.0f}", _or_dash(m.get("max_latency_ms")), str(m["restarts"]))
        notes += [f"{name}: {reason}" for reason in m["unhealthy_because"]]
    return [table, *[Text(note) for note in notes]]


def _links(report: dict[str, Any], view_rates: Rates) -> list[RenderableType]:
    wan = report["wan"]
    head = f"WAN API http://{wan['api']}" + ("" if wan["healthy"] else " NOT HEALTHY")
    out: list[RenderableType] = [Text(head)]
    out += [Text(f"WAN: {problem}") for problem in wan["problems"]]
    if not view_rates.links:
        if wan.get("links") is None:
            out.append(Text("link use: unknown (the WAN API has no shared links, or did not answer)"))
        return out
    table = _table("LINK", "DIRECTION", "SENT", "DECLARED", "USE")
    for link in view_rates.links:
        sent = "-" if link.bytes_per_s is None else _bits(link.bytes_per_s)
        declared = _bits(link.bandwidth) if link.bandwidth > 0 else "unlimited"
        use = "-" if link.use is None else f"{_bar(link.use)} {link.use:4.0%}"
        table.add_row(link.link, link.direction, sent, declared, use)
    return [*out, table]


def _not_running(view: View) -> list[RenderableType]:
    report = view.snapshot.report
    if "state_error" in report:
        return [Text(f"the state file {report['state_file']} {report['state_error']}")]
    orphans = report.get("orphans") or []
    if orphans:
        return [Text(f"the launcher of {view.state_dir} is gone; processes it started still run: "
                     f"{', '.join(orphans)}")]
    return [Text(f"nothing is running from {view.state_dir}")]


def render(view: View) -> RenderableType:
    """The whole view: a heading, clusters and brokers, mirrors, links, recent events."""
    report = view.snapshot.report
    when = f"{_clock(view.snapshot.wall)} UTC"
    parts: list[RenderableType]
    if report.get("running"):
        health = "healthy" if report["healthy"] else "NOT HEALTHY"
        parts = [Text(f"topology {report['name']} (launcher pid {report['pid']}) at {when}: {health} "
                      f"(rates: the last {RATE_WINDOW_S:.0f} s)",
                      style="bold" if report["healthy"] else "bold red"),
                 *_clusters(report), *_mirrors(report, view.rates.mirrors), *_links(report, view.rates)]
    else:
        parts = [Text(f"causeway status at {when}", style="bold"), *_not_running(view)]
    parts.append(Text("recent events:", style="bold"))
    shown = list(view.events)[-EVENTS_SHOWN:]
    parts += [Text(f"  {_clock(wall)} {line}") for wall, line in shown] or [Text("  none yet")]
    return Group(*parts)


def render_text(view: View, width: int = PLAIN_WIDTH) -> str:
    """The view as plain text (no escape codes): what a pipe gets, and what tests read."""
    out = io.StringIO()
    Console(file=out, width=width, color_system=None, force_terminal=False, highlight=False).print(render(view))
    return out.getvalue()


class _Watcher:
    """The loop's memory: snapshots of the rate window and the events seen so far."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.history: deque[Snapshot] = deque()
        self.events: deque[tuple[float, str]] = deque(maxlen=EVENTS_SHOWN)

    def next_view(self) -> View:
        snapshot = take_snapshot(self.state_dir)
        if self.history:
            self.events.extend((snapshot.wall, line) for line in changes(self.history[-1], snapshot))
        self.history.append(snapshot)
        # Keep the window, plus the one snapshot just before it (where the window starts).
        while len(self.history) > 2 and snapshot.at - self.history[1].at > RATE_WINDOW_S:
            self.history.popleft()
        return View(self.state_dir, snapshot, rates(self.history), tuple(self.events))


def _every(interval_s: float, draw: Callable[[View], None], watcher: _Watcher) -> None:
    while True:
        started = time.monotonic()
        draw(watcher.next_view())
        time.sleep(max(0.0, interval_s - (time.monotonic() - started)))


def watch(state_dir: Path, interval_s: float) -> int:
    """Redraw the view every `interval_s` until Ctrl-C (SIGINT), then exit 0 with the terminal
    as it was. Each redraw is bounded: a snapshot's probes run at once, each for at most
    control.PROBE_TIMEOUT_S, so a frozen broker slows a redraw, never stops the view."""
    watcher = _Watcher(state_dir)
    # Ctrl-C ends the view even where SIGINT was inherited ignored (a job a script put in the
    # background): it is how the view is meant to end.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        if sys.stdout.isatty():
            console = Console()
            with Live(console=console, screen=True, auto_refresh=False, redirect_stdout=False) as live:
                _every(interval_s, lambda view: live.update(render(view), refresh=True), watcher)
        else:
            def draw(view: View) -> None:
                sys.stdout.write(render_text(view) + "\n")
                sys.stdout.flush()

            _every(interval_s, draw, watcher)
    except BrokenPipeError:
        stdout_reader_gone()
    except BaseException as raised:  # noqa: BLE001 - Ctrl-C, perhaps inside a trio nursery's group
        if all(isinstance(leaf, KeyboardInterrupt) for leaf in leaves(raised)):
            return 0
        raise
    return 0
