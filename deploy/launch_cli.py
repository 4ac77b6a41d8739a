"""`causeway up`, `causeway status`, `causeway down`: a whole topology on this machine."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

import trio

from deploy.launcher.control import alive, read_state, status, stop
from deploy.launcher.launch import STATE_FILE, LaunchState, run_plan
from deploy.launcher.plan import LaunchPlan
from deploy.supervisor import StartFailed
from topology import TopologyError

__all__ = ["register"]

READY_MARK = "causeway up ready:"


def _load_plan(path: Path) -> LaunchPlan:
    from deploy.launcher.from_topology import plan_from_file

    return plan_from_file(path)


def _state_dir(args: argparse.Namespace, plan_name: str | None = None) -> Path:
    """--state-dir, else .causeway/<topology name>, else the one topology running from here."""
    if args.state_dir is not None:
        return Path(args.state_dir)
    if plan_name is not None:
        return Path(".causeway") / plan_name
    found = sorted(p.parent for p in Path(".causeway").glob(f"*/{STATE_FILE}"))
    if len(found) > 1:
        names = ", ".join(str(p) for p in found)
        raise SystemExit(f"causeway: several topologies run from here ({names}); choose one with --state-dir")
    return found[0] if found else Path(".causeway")


def _print_endpoints(state: LaunchState) -> None:
    print(f"Topology {state.plan.name}: WAN emulator (Toxiproxy API) at http://{state.wan_api}")
    for name, cluster in state.clusters.items():
        print(f"  cluster {name} (datacenter {cluster.plan.datacenter}): bootstrap {cluster.bootstrap}")
        for dc, address in cluster.wan.items():
            print(f"    from datacenter {dc}, through the WAN link: {address}")
    for name, mirror in state.mirrors.items():
        identity = mirror.plan.settings.get("naming") == "identity"
        remote = "<topic>" if identity else f"{mirror.plan.source}.<topic>"
        print(f"  mirror {name}: {mirror.plan.source} -> {mirror.plan.target} (as {remote}), "
              f"reading {mirror.source_bootstrap}")
    print(f"State and logs: {state.state_dir}", flush=True)


async def _foreground(plan: LaunchPlan, state_dir: Path, detached: bool, toxiproxy: str | None) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            state: LaunchState = await nursery.start(partial(run_plan, plan, state_dir, toxiproxy=toxiproxy))
            _print_endpoints(state)
            print(f"{READY_MARK} {state_dir}", flush=True)
            if detached:
                # The parent has what it waited for; from now on, output goes to the log only.
                log = os.open(state_dir / "logs" / "launcher.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
                os.dup2(log, 1)
                os.dup2(log, 2)
            else:
                print("Ctrl-C stops everything.", flush=True)
            async for _ in signals:
                nursery.cancel_scope.cancel()
                break


def _up(args: argparse.Namespace) -> int:
    try:
        plan = _load_plan(Path(args.file))
    except TopologyError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return 1
    state_dir = _state_dir(args, plan.name)
    running = read_state(state_dir)
    if running is not None and alive(running.get("pid")):
        print(f"causeway: topology {plan.name} is already running (launcher pid {running['pid']}); "
              f"`causeway down --state-dir {state_dir}` first", file=sys.stderr)
        return 1
    if args.detach:
        return _detach(args, state_dir)
    try:
        trio.run(_foreground, plan, state_dir, args.child, args.toxiproxy)
    except StartFailed as exc:
        print(f"causeway: could not start {exc}", file=sys.stderr)
        print("causeway: everything started before it was stopped", file=sys.stderr)
        return 1
    return 0


def _detach(args: argparse.Namespace, state_dir: Path) -> int:
    """Start the launcher in its own session and return once it reports everything healthy."""
    argv = [sys.executable, "-m", "deploy.cli", "up", str(args.file), "--state-dir", str(state_dir), "--child"]
    if args.toxiproxy:
        argv += ["--toxiproxy", args.toxiproxy]
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
    assert child.stdout is not None
    for line in child.stdout:
        if line.startswith(READY_MARK):
            print(f"Running in the background (launcher pid {child.pid}); `causeway down --state-dir {state_dir}` "
                  "stops it.")
            return 0
        print(line, end="")
    return child.wait() or 1


def _status(args: argparse.Namespace) -> int:
    state_dir = _state_dir(args)
    report = status(state_dir)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0 if report["running"] else 1
    if not report["running"]:
        print(f"nothing is running from {state_dir}")
        return 1
    print(f"topology {report['name']} (launcher pid {report['pid']}), WAN API http://{report['wan']['api']}")
    rows: list[tuple[Any, ...]] = [("CLUSTER", "DATACENTER", "BOOTSTRAP", "HEALTHY", "PIDS", "RESTARTS")]
    for name, c in report["clusters"].items():
        rows.append((name, c["datacenter"], c["bootstrap"], "yes" if c["healthy"] else "NO",
                     ",".join(str(b["pid"]) for b in c["brokers"]), sum(b["restarts"] for b in c["brokers"])))
    _print_table(rows)
    mirrors_ok = True
    if report["mirrors"]:
        print()
        rows = [("MIRROR", "SOURCE", "TARGET", "STATE", "LAG", "RECORDS", "LATENCY-MS", "PID", "RESTARTS")]
        problems: list[str] = []
        for name, m in report["mirrors"].items():
            state = m.get("state", "starting") if m["alive"] else "DOWN"
            mirrors_ok &= m["alive"] and state == "running"
            rows.append((name, m["source"], m["target"], state, m.get("lag", "-"), m.get("records", "-"),
                         m.get("max_latency_ms") if m.get("max_latency_ms") is not None else "-", m["pid"],
                         m["restarts"]))
            problems += [f"  mirror {name}: {what}: {text}" for what, text in m.get("problems", {}).items()]
            problems += [f"  mirror {name}: {p['topic']}-{p['partition']}: {p['error']}"
                         for p in m.get("partitions", []) if p["error"]]
        _print_table(rows)
        for line in problems:
            print(line)
    healthy = all(c["healthy"] for c in report["clusters"].values())
    return 0 if healthy and mirrors_ok else 2


def _print_table(rows: list[tuple[Any, ...]]) -> None:
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


def _down(args: argparse.Namespace) -> int:
    state_dir = _state_dir(args)
    stopped = stop(state_dir)
    if not stopped:
        print(f"nothing was running from {state_dir}")
    for name in stopped:
        print(f"stopped {name}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    up = subparsers.add_parser("up", help="start every cluster, WAN link and mirror of a topology file")
    up.add_argument("file", type=Path, help="topology YAML file")
    up.add_argument("-d", "--detach", action="store_true", help="return once everything is healthy")
    up.add_argument("--state-dir", type=Path, help="pids, ports and logs (default .causeway/<topology name>)")
    up.add_argument("--toxiproxy", metavar="HOST:PORT",
                    help="use this running Toxiproxy API for the WAN links instead of starting the emulator")
    up.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    up.set_defaults(func=_up)

    st = subparsers.add_parser("status", help="endpoints and health of a running topology")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.add_argument("--state-dir", type=Path, default=None)
    st.set_defaults(func=_status)

    down = subparsers.add_parser("down", help="stop everything `causeway up` started")
    down.add_argument("--state-dir", type=Path, default=None)
    down.set_defaults(func=_down)
