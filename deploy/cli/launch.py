"""`causeway up`, `causeway status`, `causeway down`: a whole topology on this machine."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import trio

from broker.address import parse_host_port
from deploy.child_process import ChildProcess
from deploy.cli.command import add_quiet, run, stdout_reader_gone, until_signalled
from deploy.launcher.control import StateFileError, find_running, read_state, status, stop_report
from deploy.launcher.launch import STATE_FILE, LaunchState, StateDirError, prepare_state_dir, run_plan
from deploy.launcher.metrics import DEFAULT_LISTENER, MetricsListenerError
from deploy.launcher.plan import LaunchPlan
from deploy.process_identity import STATE_DIR_ENV
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
        if len(cluster.brokers) > 1:
            print(f"    brokers {', '.join(map(str, cluster.brokers))}")
        if cluster.zookeeper_tls_connect:
            print(f"    ZooKeeper over TLS, znodes with ACLs (zookeeper.connect): {cluster.zookeeper_tls_connect}; "
                  f"plain, read-only for others: {cluster.zookeeper_connect}")
        elif cluster.zookeeper_connect:
            print(f"    ZooKeeper (zookeeper.connect): {cluster.zookeeper_connect}")
        for dc, address in cluster.wan.items():
            print(f"    from datacenter {dc}, through the WAN link: {address}")
        if cluster.secrets is not None:
            plan = cluster.secrets.plan
            between = f", between brokers {plan.between_brokers}" if cluster.plan.coordination == "zookeeper" else ""
            wan = f"WAN {plan.wan}" if cluster.wan else "no WAN listener"
            print(f"    security: LOCAL {plan.local}, {wan}{between}; "
                  f"client configs (0600): {cluster.secrets.directory}/<user>[.wan].properties")
    for name, mirror in state.mirrors.items():
        remote = "<topic>" if mirror.plan.keeps_names else f"{mirror.plan.source}.<topic>"
        kind = ", read-only mirror topics" if mirror.plan.mode == "link" else ""
        print(f"  mirror {name} ({mirror.plan.mode}): {mirror.plan.source} -> {mirror.plan.target} "
              f"(as {remote}{kind}), reading {mirror.source_bootstrap}")
    if state.prometheus is not None:
        print(f"  Prometheus at {state.prometheus.url} (scraping {len(state.clusters)} cluster(s) and "
              f"{len(state.mirrors)} mirror(s), Causeway's alerts loaded: {state.prometheus.url}/alerts)")
    print(f"  launcher metrics (every process up, restarts): http://{state.metrics}/metrics")
    print(f"State and logs: {state.state_dir}", flush=True)


async def _foreground(plan: LaunchPlan, state_dir: Path, detached: bool, toxiproxy: str | None,
                      metrics_listener: str) -> None:
    async with until_signalled() as stop:
        state: LaunchState = await stop.nursery.start(partial(run_plan, plan, state_dir, toxiproxy=toxiproxy,
                                                                    metrics_listener=metrics_listener))
        _print_endpoints(state)
        print(f"{READY_MARK} {state_dir}", flush=True)
        if detached:
            # The parent has what it waited for; from now on, output goes to the log only.
            log = os.open(state_dir / "logs" / "launcher.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            os.dup2(log, 1)
            os.dup2(log, 2)
            # The launcher's log keeps every line, --quiet or not: --quiet (deploy/cli/__init__.py
            # main) left only warnings on the way to `up -d`'s terminal.
            logging.getLogger().setLevel(logging.INFO)
        else:
            print("Ctrl-C stops everything.", flush=True)


def _up(args: argparse.Namespace) -> int:
    try:
        plan = _load_plan(Path(args.file))
    except TopologyError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return 1
    if args.prometheus:
        plan = replace(plan, monitoring="prometheus")
    state_dir = _state_dir(args, plan.name)
    refusal = _refusal_to_start(plan.name, state_dir)
    if refusal:
        print(refusal, file=sys.stderr)
        return 1
    try:
        prepare_state_dir(state_dir)
    except StateDirError as exc:
        print(f"causeway: {exc}; nothing was started", file=sys.stderr)
        return 1
    if args.detach:
        return _detach(args, state_dir)
    return run("causeway up", lambda: trio.run(_foreground, plan, state_dir, args.child, args.toxiproxy,
                                                   args.metrics_listener),
               errors=[(StartFailed, 1, lambda exc: f"causeway: could not start {exc}\n"
                                                    "causeway: everything started before it was stopped"),
                       (StateDirError, 1, lambda exc: f"causeway: {exc}\n"
                                                      "causeway: everything started before it was stopped"),
                       (MetricsListenerError, 1, lambda exc: f"causeway: {exc}; nothing was started")])


def _refusal_to_start(name: str, state_dir: Path) -> str | None:
    """Why `up` must not start here: anything from this state dir still runs (a second set
    would share the data dirs), or a damaged state file hides what does."""
    try:
        state = read_state(state_dir)
        damaged = None
    except StateFileError as exc:
        state, damaged = None, exc
    found = find_running(state_dir, state)
    down = f"`causeway down --state-dir {state_dir}`"
    if found.launcher is not None:
        return f"causeway: topology {name} is already running (launcher pid {found.launcher.pid}); {down} first"
    if found.children:
        return (f"causeway: processes of an earlier `causeway up` from {state_dir} still run without their "
                f"launcher: {', '.join(found.describe())}; {down} stops them")
    if damaged is not None:
        return (f"causeway: the state file {damaged.path} {damaged.reason}; nothing from {state_dir} is running: "
                f"{down} sets it aside, or remove it")
    return None


def _detach(args: argparse.Namespace, state_dir: Path) -> int:
    """Start the launcher in its own session and return once it reports everything healthy."""
    argv = [sys.executable, "-m", "deploy.cli", "up", str(args.file), "--state-dir", str(state_dir), "--child"]
    if args.toxiproxy:
        argv += ["--toxiproxy", args.toxiproxy]
    if args.prometheus:
        argv += ["--prometheus"]
    if args.quiet:
        argv += ["--quiet"]  # its lines until ready are echoed here
    if args.metrics_listener != DEFAULT_LISTENER:
        argv += ["--metrics-listener", args.metrics_listener]
    # A session of its own, so it outlives this process; until it is ready its output is echoed
    # here, and after that it writes to its own log. Marked as its children are: how `status` and
    # `down` know it is this state dir's launcher.
    child = ChildProcess.start("causeway up", argv, log_path=None, stderr="stdout", own_group=True,
                               env={STATE_DIR_ENV: str(state_dir.resolve())})
    assert child.stdout is not None
    for line in child.stdout:
        if line.startswith(READY_MARK):
            print(f"Running in the background (launcher pid {child.pid}); `causeway down --state-dir {state_dir}` "
                  "stops it.")
            return 0
        print(line, end="")
    return child.wait() or 1


def _status(args: argparse.Namespace) -> int:
    """Exit 0: everything healthy; 1: nothing runs; 2: something runs but is unhealthy, runs
    without its launcher, or the state file is damaged while processes run."""
    state_dir = _state_dir(args)
    if args.interval is not None and not args.watch:
        print("causeway status: --interval is for --watch", file=sys.stderr)
        return 2
    if args.watch:
        if args.json:
            print("causeway status: --json prints one document; --watch is the live view", file=sys.stderr)
            return 2
        interval = 1.0 if args.interval is None else args.interval
        if not 0 < interval <= 3600:
            print(f"causeway status: --interval must be more than 0 and at most 3600 seconds, got {interval:g}",
                  file=sys.stderr)
            return 2
        from deploy.cli.status_watch import watch  # rich is imported for the live view only

        return watch(state_dir, interval)
    report = status(state_dir)
    code = 0 if report["running"] and report["healthy"] else 2 if report["running"] or report["orphans"] else 1
    try:
        if args.json:
            print(json.dumps(report, indent=2))
        else:
            _print_status(report, state_dir)
        sys.stdout.flush()  # here, where a reader gone (`| head`) is caught, not at exit
    except BrokenPipeError:
        stdout_reader_gone()
    return code


def _print_status(report: dict[str, Any], state_dir: Path) -> None:
    down = f"`causeway down --state-dir {state_dir}`"
    if "state_error" in report:
        print(f"causeway: the state file {report['state_file']} {report['state_error']}")
        if report["orphans"]:
            print(f"processes started from {state_dir} still run: {', '.join(report['orphans'])}; {down} stops "
                  "them and sets the damaged file aside")
        else:
            print(f"nothing from {state_dir} is running; {down} sets the damaged file aside (or remove it)")
        return
    if not report["running"]:
        if report["orphans"]:
            launcher = f" (pid {report['pid']})" if report.get("pid") else ""
            print(f"the launcher{launcher} of {state_dir} is gone, but processes it started still run: "
                  f"{', '.join(report['orphans'])}; {down} stops them")
        elif report.get("stale"):
            print(f"nothing is running from {state_dir} (its launcher, pid {report['pid']}, ended without "
                  "clearing its state file)")
        else:
            print(f"nothing is running from {state_dir}")
        for stranger in report.get("strangers", []):
            print(f"  the state file names {stranger}, but that pid now belongs to another process "
                  "(its start time or command line differ, or it lacks this state dir's mark): not ours, left alone")
        return
    metrics = f", metrics http://{report['metrics']}/metrics" if report.get("metrics") else ""
    print(f"topology {report['name']} (launcher pid {report['pid']}{metrics}), WAN API http://{report['wan']['api']}"
          + ("" if report["wan"]["healthy"] else " NOT HEALTHY"))
    rows: list[tuple[Any, ...]] = [("CLUSTER", "DATACENTER", "HEALTHY", "BROKERS", "CONTROLLER", "PARTITIONS",
                                    "UNDER-REPLICATED", "OFFLINE", "BOOTSTRAP")]
    for name, c in report["clusters"].items():
        serving = sum(b["state"] == "serving" for b in c["brokers"])
        rows.append((name, c["datacenter"], "yes" if c["healthy"] else "NO", f"{serving}/{len(c['brokers'])}",
                     _or_dash(c.get("controller") if c.get("controller", -1) >= 0 else None),
                     _or_dash(c.get("partitions")), _or_dash(c.get("under_replicated_count")),
                     _or_dash(c.get("offline_count")), c["bootstrap"]))
    _print_table(rows)
    for name, c in report["clusters"].items():
        _print_cluster_details(name, c)
    for problem in report["wan"]["problems"]:
        print(f"  WAN: {problem}")
    if report["mirrors"]:
        print()
        _print_mirrors(report["mirrors"])
    prometheus = report.get("prometheus")
    if prometheus:
        print()
        print(f"prometheus {prometheus['url']} (pid {prometheus['pid']}, restarts {prometheus['restarts']})"
              + "".join(f"; NOT HEALTHY: {reason}" for reason in prometheus["unhealthy_because"]))


def _print_mirrors(mirrors: dict[str, dict[str, Any]]) -> None:
    """The mirrors' table, then what is wrong with each: a lag that cannot be known (the source
    does not answer) shows as `>=N`, never as a figure."""
    rows: list[tuple[Any, ...]] = [("MIRROR", "MODE", "SOURCE", "TARGET", "STATE", "HEALTHY", "LAG", "RECORDS",
                                    "LATENCY-MS", "PID", "RESTARTS")]
    lines: list[str] = []
    for name, m in mirrors.items():
        state = m.get("state") or "starting" if m["alive"] else "DOWN"
        if m.get("source_reachable") is False:
            state = "SOURCE UNREACHABLE"
        lag = _or_dash(m.get("lag")) if m.get("lag_at_least") is None else f">={m['lag_at_least']}"
        rows.append((name, m.get("mode", "mm2"), m["source"], m["target"], state, "yes" if m["healthy"] else "NO",
                     lag, _or_dash(m.get("records")), _or_dash(m.get("max_latency_ms")), m["pid"], m["restarts"]))
        if m.get("promoted"):
            left = "nothing is mirrored any more" if m.get("state") == "promoted" else "the others are still mirrored"
            lines.append(f"  mirror {name}: promoted at {m['target']}: {', '.join(m['promoted'])} (normal writable "
                         f"topics there now); {left}")
        lines += [f"  mirror {name}: topic {topic} {_topic_state(state)}"
                  for topic, state in m.get("topic_states", {}).items()
                  if state["state"] not in ("ACTIVE", "STOPPED")]  # STOPPED: the promoted line above
        lines += [f"  mirror {name}: {reason}" for reason in m["unhealthy_because"]]
        lines += [f"  mirror {name}: {p['topic']}-{p['partition']}: {p['error']}"
                  for p in m.get("partitions", []) if p["error"]]
    _print_table(rows)
    for line in lines:
        print(line)


def _topic_state(state: dict[str, Any]) -> str:
    """A mirror topic's state as one phrase: `PAUSED (lag 30)`, `FAILED: why`."""
    lag = f" (lag {state['lag']})" if state.get("lag") is not None and state["state"] != "STOPPED" else ""
    return f"{state['state']}{lag}" + (f": {state['reason']}" if state.get("reason") else "")


def _print_cluster_details(name: str, c: dict[str, Any]) -> None:
    """Under the table: each broker, the cluster's ZooKeeper, and what is wrong with it."""
    print(f"  cluster {name}:")
    for b in c["brokers"]:
        controller = " (controller)" if b["id"] == c.get("controller") and "zookeeper" in c else ""
        print(f"    broker {b['id']}{controller}: {b['state']}, pid {b['pid']}, restarts {b['restarts']}")
    if "zookeeper" in c:
        zk = c["zookeeper"]
        modes = ", ".join(f"{address} {mode or 'NOT SERVING'}" for address, mode in zk["nodes"].items())
        print(f"    ZooKeeper {zk['connect']} (pid {zk['pid']}, restarts {zk['restarts']}): {modes}")
    for kind, key in (("under-replicated", "under_replicated"), ("offline", "offline")):
        listed = c.get(key, [])
        more = c.get(f"{key}_count", 0) - len(listed)
        for partition in listed:
            print(f"    {kind}: {partition}")
        if more > 0:
            print(f"    ... and {more} more {kind} partitions")
    for reason in c.get("unhealthy_because", []):
        if not reason.endswith("partition(s)"):  # those are listed above
            print(f"    NOT HEALTHY: {reason}")


def _or_dash(value: object) -> object:
    return "-" if value is None else value


def _print_table(rows: list[tuple[Any, ...]]) -> None:
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


def _down(args: argparse.Namespace) -> int:
    """Exit 0 once nothing of this state dir runs; 1 when its state file was damaged."""
    state_dir = _state_dir(args)
    report = stop_report(state_dir)
    if report.state_error is not None:
        print(f"causeway: the state file {report.state_error.path} {report.state_error.reason}; "
              f"looked for processes of {state_dir} by their environment instead", file=sys.stderr)
    for line in report.refused:
        print(f"left alone: {line}")
    if not report.stopped:
        print(f"nothing was running from {state_dir}")
    for name in report.stopped:
        print(f"stopped {name}")
    if report.cleanup_error is not None:
        print(f"causeway: {report.cleanup_error}", file=sys.stderr)
        return 1
    if report.set_aside is not None:
        print(f"the damaged state file was moved to {report.set_aside}")
        return 1
    return 0


def _listener(text: str) -> str:
    """--metrics-listener's value, checked before anything starts (a bad one exits 2)."""
    try:
        parse_host_port(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    up = subparsers.add_parser("up", help="start every cluster, WAN link and mirror of a topology file")
    up.add_argument("file", type=Path, help="topology YAML file")
    up.add_argument("-d", "--detach", action="store_true", help="return once everything is healthy")
    up.add_argument("--state-dir", type=Path, help="pids, ports and logs (default .causeway/<topology name>)")
    up.add_argument("--toxiproxy", metavar="HOST:PORT",
                    help="use this running Toxiproxy API for the WAN links instead of starting the emulator")
    up.add_argument("--prometheus", action="store_true",
                    help="also start Prometheus (Debian's package) scraping every broker and mirror, with Causeway's "
                         "alerting rules, as `monitoring: prometheus` in the topology does; its URL is printed")
    up.add_argument("--metrics-listener", metavar="HOST:PORT", default=DEFAULT_LISTENER, type=_listener,
                    help="where the launcher serves its own Prometheus metrics (every process it supervises: up, "
                         "restarts); default a free port on 127.0.0.1, shown by `status`")
    add_quiet(up)
    up.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    up.set_defaults(func=_up)

    st = subparsers.add_parser("status", help="endpoints and health of a running topology")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.add_argument("--watch", action="store_true",
                    help="a live view, redrawn every interval until Ctrl-C: clusters, brokers, under-replicated "
                         "partitions, mirror lag and records/s, WAN link use against the declared bandwidth, "
                         "recent events (a pipe gets one plain snapshot per interval)")
    st.add_argument("--interval", type=float, metavar="SECONDS", default=None,
                    help="seconds between redraws with --watch (default 1)")
    st.add_argument("--state-dir", type=Path, default=None)
    st.set_defaults(func=_status)

    down = subparsers.add_parser("down", help="stop everything `causeway up` started")
    down.add_argument("--state-dir", type=Path, default=None)
    down.set_defaults(func=_down)
