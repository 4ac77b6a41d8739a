"""The figures of `causeway status --watch`: snapshots of `status`, rates between them, and
what changed from one to the next (the "recent events").

Pure functions of snapshots, so the live view is tested without a terminal or a topology: a
snapshot is the status document (`control.status(links=True)`) with the time it was taken;
rates and events are computed from two or more of them, never from anything else.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploy.launcher.control import status

__all__ = ["LAG_EVENT_RECORDS", "RATE_WINDOW_S", "LinkRate", "Rates", "Snapshot", "changes", "rates",
           "take_snapshot"]

#: Rates are averaged over the snapshots of about this many seconds: a mirror rewrites its
#: status file once a second, so a rate between two snapshots 0.2 s apart would swing between 0
#: and five times the truth.
RATE_WINDOW_S = 5.0
#: A mirror's lag crossing this many records (either way) is an event: smaller swings are the
#: normal rhythm of fetches under load, not news.
LAG_EVENT_RECORDS = 1000


@dataclass(frozen=True)
class Snapshot:
    """The status document and when it was taken (`at`: time.monotonic(), for rates; `wall`:
    time.time(), for the events' clock)."""

    report: dict[str, Any]
    at: float
    wall: float


def take_snapshot(state_dir: Path) -> Snapshot:
    """One status of the topology, with its WAN links. Bounded as `causeway status` is: every
    probe at once, each for at most control.PROBE_TIMEOUT_S, so a frozen broker or emulator
    costs a redraw that much, never the view."""
    report = status(state_dir, links=True)
    return Snapshot(report, time.monotonic(), time.time())


# -- rates -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LinkRate:
    """One direction of a shared WAN link: bytes/s over the window, against the declared rate."""

    link: str
    direction: str  # "east->west"
    bytes_per_s: float | None  # None: not known yet (one snapshot) or the counter went back
    bandwidth: int  # bytes/s declared; 0: unlimited

    @property
    def use(self) -> float | None:
        """The share of the declared bandwidth in use (0..1), None when unlimited or unknown."""
        if self.bandwidth <= 0 or self.bytes_per_s is None:
            return None
        return self.bytes_per_s / self.bandwidth


@dataclass(frozen=True)
class Rates:
    mirrors: dict[str, float | None] = field(default_factory=dict)  # records/s per mirror
    links: list[LinkRate] = field(default_factory=list)


def _count(value: object) -> int | None:
    """A counter as a peer reported it: a non-negative int, else unknown."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _links(snapshot: Snapshot) -> dict[str, Any]:
    links = snapshot.report.get("wan", {}).get("links")
    return links if isinstance(links, dict) else {}


def _sent(snapshot: Snapshot, link: str, direction: str) -> int | None:
    body = _links(snapshot).get(link)
    sent = body.get("sent") if isinstance(body, dict) else None
    return _count(sent.get(direction)) if isinstance(sent, dict) else None


def _window(history: Sequence[Snapshot]) -> Sequence[Snapshot]:
    newest = history[-1].at
    return [s for s in history if newest - s.at <= RATE_WINDOW_S]


def _mirror_rate(history: Sequence[Snapshot], name: str) -> float | None:
    """Records/s of one mirror, from the counts its own reports carry and when it wrote them
    (`updated_ms`): the oldest report in the window, of the same process, that is older than the
    newest one. A restarted mirror counts from 0 again: reports of its earlier process, or a
    count that went back, give no rate."""
    newest = history[-1].report.get("mirrors", {}).get(name, {})
    records, updated = _count(newest.get("records")), _count(newest.get("updated_ms"))
    if records is None or updated is None:
        return None
    for snapshot in history:
        older = snapshot.report.get("mirrors", {}).get(name, {})
        was, then = _count(older.get("records")), _count(older.get("updated_ms"))
        if older.get("pid") != newest.get("pid"):
            continue
        if was is not None and then is not None and then < updated:
            return (records - was) * 1000 / (updated - then) if records >= was else None
    return None


def rates(history: Sequence[Snapshot]) -> Rates:
    """Mirror records/s and link bytes/s over the last RATE_WINDOW_S of `history` (oldest
    first); unknown (None) until two snapshots show a change of time."""
    if not history:
        return Rates()
    window = _window(history)
    newest, oldest = window[-1], window[0]
    mirrors = {name: _mirror_rate(window, name) for name in newest.report.get("mirrors", {})}
    links: list[LinkRate] = []
    for name, body in sorted(_links(newest).items()):
        if not isinstance(body, dict) or not isinstance(body.get("sent"), dict):
            continue
        bandwidth = _count(body.get("bandwidth")) or 0
        for direction in sorted(body["sent"]):
            now, was = _sent(newest, name, direction), _sent(oldest, name, direction)
            elapsed = newest.at - oldest.at
            rate = ((now - was) / elapsed if now is not None and was is not None and now >= was and elapsed > 0
                    else None)
            links.append(LinkRate(name, str(direction), rate, bandwidth))
    return Rates(mirrors, links)


# -- events ------------------------------------------------------------------------------------


def changes(before: Snapshot, after: Snapshot) -> list[str]:
    """What changed from one snapshot to the next, one line each: the launcher, brokers (by
    cluster and id), under-replicated and offline partitions, ZooKeeper, the controller, the
    mirrors (running, health, lag crossing LAG_EVENT_RECORDS) and the WAN's problems."""
    old, new = before.report, after.report
    if old.get("running") and not new.get("running"):
        return ["the launcher is gone: nothing of this topology is watched any more"]
    if not old.get("running") and new.get("running"):
        return [f"topology {new.get('name')} is running (launcher pid {new.get('pid')})"]
    lines: list[str] = []
    for name, cluster in new.get("clusters", {}).items():
        lines += _cluster_changes(name, old.get("clusters", {}).get(name, {}), cluster)
    for name, mirror in new.get("mirrors", {}).items():
        lines += _mirror_changes(name, old.get("mirrors", {}).get(name, {}), mirror)
    was = set(old.get("wan", {}).get("problems", []))
    now = set(new.get("wan", {}).get("problems", []))
    lines += [f"WAN: {problem}" for problem in sorted(now - was)]
    lines += [f"WAN: no longer: {problem}" for problem in sorted(was - now)]
    return lines


def _cluster_changes(name: str, old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    was = {b["id"]: b for b in old.get("brokers", [])}
    for broker in new.get("brokers", []):
        before = was.get(broker["id"])
        if before is None or before["state"] == broker["state"]:
            if before is not None and broker["pid"] != before["pid"]:
                lines.append(f"cluster {name}: broker {broker['id']} restarted (pid {broker['pid']})")
            continue
        restarted = f", restarted as pid {broker['pid']}" if broker["pid"] != before["pid"] else ""
        lines.append(f"cluster {name}: broker {broker['id']} {broker['state']} (was {before['state']}{restarted})")
    if "controller" in old and "controller" in new and old["controller"] != new["controller"]:
        lines.append(f"cluster {name}: controller is broker {new['controller']} (was {old['controller']})")
    for kind, key in (("under-replicated", "under_replicated"), ("offline", "offline")):
        count, before_count = new.get(f"{key}_count"), old.get(f"{key}_count")
        if count is None or before_count is None or count == before_count:
            continue
        if count == 0:
            lines.append(f"cluster {name}: no {kind} partitions (were {before_count})")
            continue
        added = [p for p in new.get(key, []) if p not in set(old.get(key, []))]
        listed = f": {', '.join(added)}" if added else ""
        lines.append(f"cluster {name}: {count} {kind} partition(s) (were {before_count}){listed}")
    zk_old, zk_new = old.get("zookeeper"), new.get("zookeeper")
    if zk_old is not None and zk_new is not None and zk_old["healthy"] != zk_new["healthy"]:
        lines.append(f"cluster {name}: ZooKeeper {'serving again' if zk_new['healthy'] else 'NOT serving'}")
    return lines


def _mirror_changes(name: str, old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    if not old:
        return []
    lines: list[str] = []
    if old.get("alive") != new.get("alive"):
        lines.append(f"mirror {name}: {'running again' if new.get('alive') else 'DOWN'} (pid {new.get('pid')})")
    elif new.get("state") is not None and old.get("state") != new.get("state"):
        lines.append(f"mirror {name}: {new['state']} (was {old.get('state') or 'starting'})")
    if old.get("healthy") != new.get("healthy"):
        reasons = new.get("unhealthy_because") or []
        lines.append(f"mirror {name}: healthy again" if new.get("healthy")
                     else f"mirror {name}: NOT healthy: {reasons[0] if reasons else 'unknown'}")
    lag, was = _count(new.get("lag")), _count(old.get("lag"))
    if lag is not None and was is not None:
        if was <= LAG_EVENT_RECORDS < lag:
            lines.append(f"mirror {name}: lag grew to {lag} records (was {was})")
        elif lag <= LAG_EVENT_RECORDS < was:
            lines.append(f"mirror {name}: lag recovered to {lag} records (was {was})")
    return lines
