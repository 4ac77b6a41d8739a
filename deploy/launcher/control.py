"""`causeway status` and `causeway down`: read the state dir, check health, stop everything.

Nothing here signals a pid because a file names it. A process counts as ours only when it
carries this state dir in its environment (every child of a launcher does, and a detached
launcher too; deploy/process_identity.py): that mark is readable by the process's owner alone,
where pid, start time and command line, which the state file records, can be copied from any
process by whoever writes the file. A foreground launcher has no mark; it is ours as the parent
of marked children. Found by the mark, processes whose launcher is gone (orphans) and processes
a damaged state file no longer lists are found too.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import trio

from broker.address import parse_host_port
from broker.clock import now_ms
from broker.config import ConfigError
from broker.protocol.api import ApiKey
from broker.protocol.headers import RequestHeader, encode_request_header
from broker.small_file import UnusableFile, read_small_file
from deploy.launcher.cluster_view import ClusterView, read_views
from deploy.launcher.launch import STATE_FILE, StateDirError, state_path
from deploy.launcher.security import read_client_security
from deploy.launcher.state_file import (
    MAX_STATE_BYTES,
    ClusterRecord,
    LaunchStateFile,
    MirrorRecord,
    ProcessRecord,
    PrometheusRecord,
    StateFileError,
    WanRecord,
    ZooKeeperRecord,
    parse_state,
)
from deploy.process_identity import Identity, carries_mark, find_marked, identity_of, is_running, parent_of
from deploy.prometheus_process import is_ready
from deploy.wan.client import WanApiError, WanClient
from deploy.zookeeper.four_letter import srvr
from mirror.status import MirrorStatus, PartitionStatus, StatusFileError, read_status
from security.client import ClientSecurity

__all__ = ["StateFileError", "StopReport", "alive", "broker_answers", "find_running", "owned",
           "read_mirror_report", "read_state", "status", "stop", "stop_report"]

T = TypeVar("T")

STOP_TIMEOUT_S = 60.0
#: A mirror's status file older than this (the mirror rewrites it every second) means the mirror
#: is stuck or stopped reporting.
MIRROR_STATUS_STALE_S = 30.0


# -- the state file ----------------------------------------------------------------------------


def read_state(state_dir: Path) -> LaunchStateFile | None:
    """The launcher's state file, checked; None when there is none.

    Raises StateFileError for a file that cannot be read, is not JSON, or lacks a field
    `status` and `down` rely on (naming the field).
    """
    path = state_dir / STATE_FILE
    try:
        raw = read_small_file(path, MAX_STATE_BYTES)
    except FileNotFoundError:
        return None
    except UnusableFile as exc:
        raise StateFileError(path, f"{exc}: not a launcher state file") from None
    except OSError as exc:
        raise StateFileError(path, f"cannot be read: {exc.strerror or exc}") from None
    return parse_state(path, raw)


# -- which processes are ours ------------------------------------------------------------------


def _recorded_identity(entry: ProcessRecord | dict[str, Any]) -> Identity | None:
    """The identity a state entry records (None without a start time: a pid proves nothing)."""
    if isinstance(entry, dict):
        try:
            entry = ProcessRecord.model_validate(entry)
        except ValueError:
            return None
    if entry.pid is None or entry.start_time is None or entry.cmdline is None:
        return None
    return Identity(entry.pid, entry.start_time, tuple(entry.cmdline))


def owned(entry: ProcessRecord | dict[str, Any], state_dir: Path) -> Identity | None:
    """The running process a state entry records, if (and only if) it is that very process (same
    pid, start time and command line) and it carries `state_dir`'s mark in its environment."""
    recorded = _recorded_identity(entry)
    if recorded is None or not recorded.is_current() or not carries_mark(recorded.pid, state_dir):
        return None
    return recorded


def alive(pid: int | None) -> bool:
    """Whether some process (not a zombie) has this pid: says nothing about whose it is."""
    return pid is not None and pid > 0 and is_running(pid)


def _recorded(state: LaunchStateFile) -> list[tuple[str, ProcessRecord]]:
    """Every process the state file records, children first (Prometheus, mirrors, brokers,
    ZooKeeper, emulator): a broker stops while its ZooKeeper still answers."""
    entries: list[tuple[str, ProcessRecord]] = [("prometheus", state.prometheus)] if state.prometheus else []
    entries += [(f"mirror {n}", m) for n, m in state.mirrors.items()]
    entries += [(f"broker {n}", b) for n, c in state.clusters.items() for b in c.brokers]
    entries += [(f"zookeeper {n}", c.zookeeper) for n, c in state.clusters.items() if c.zookeeper is not None]
    if state.wan.pid is not None:
        entries.append(("wan emulator", state.wan))
    return entries


@dataclass
class Running:
    """What runs from a state dir, found from the state file (verified) and /proc."""

    launcher: Identity | None = None
    children: list[tuple[str, Identity]] = field(default_factory=list)  # label, identity
    strangers: list[tuple[str, int]] = field(default_factory=list)  # label, pid: named but not ours

    @property
    def anything(self) -> bool:
        return self.launcher is not None or bool(self.children)

    def describe(self) -> list[str]:
        lines = [f"launcher (pid {self.launcher.pid})"] if self.launcher else []
        return lines + [f"{label} (pid {identity.pid})" for label, identity in self.children]


def find_running(state_dir: Path, state: LaunchStateFile | None) -> Running:
    """The launcher and children of `state_dir` that run now. `state` may be None (no file, or a
    damaged one): processes are then found by the state dir in their environment alone."""
    found = Running()
    recorded_launcher = None
    if state is not None:
        recorded_launcher = _recorded_identity(state)
        found.launcher = owned(state, state_dir)
        if found.launcher is None and state.pid and alive(state.pid):
            found.strangers.append(("launcher", state.pid))
        for label, entry in _recorded(state):
            identity = owned(entry, state_dir)
            if identity is not None:
                found.children.append((label, identity))
            elif entry.pid and alive(entry.pid):
                found.strangers.append((label, entry.pid))
    known = {identity.pid for _, identity in found.children}
    for identity in find_marked(state_dir):
        if identity.pid == os.getpid():
            continue  # a detached launcher checking, before it starts, that nothing else runs
        if _is_launcher(identity):  # a detached launcher, marked by the command that started it
            found.launcher = found.launcher or identity
            continue
        if identity.pid not in known:
            found.children.append((_label(identity), identity))
            known.add(identity.pid)
        # A foreground launcher has no mark of its own; it is the parent of marked children
        # (the launcher's own process, or the one the state file records, e.g. a test's).
        if found.launcher is None:
            parent = parent_of(identity.pid)
            candidate = identity_of(parent) if parent else None
            if candidate is not None and (_is_launcher(candidate) or candidate == recorded_launcher):
                found.launcher = candidate
    # A pid the file names but that is ours after all (found by its environment) is no stranger.
    ours = {identity.pid for _, identity in found.children} | ({found.launcher.pid} if found.launcher else set())
    found.strangers = [(label, pid) for label, pid in found.strangers if pid not in ours]
    return found


def _subcommand(identity: Identity) -> str | None:
    """The causeway subcommand a process runs (`python -m deploy.cli X` or `causeway X`)."""
    args = list(identity.cmdline)
    for i, arg in enumerate(args[:-1]):
        if arg == "deploy.cli" or Path(arg).name == "causeway":
            return args[i + 1]
    return None


def _label(identity: Identity) -> str:
    """A name for a process found by its environment alone."""
    command = _subcommand(identity)
    args = list(identity.cmdline)
    if any(arg.startswith("org.apache.zookeeper.server.") for arg in args):
        return "zookeeper node"  # a JVM of `causeway zookeeper`: it inherits the mark
    if args and Path(args[0]).name == "prometheus":
        return "prometheus server"  # the server `causeway prometheus` runs: it inherits the mark
    for name, flag, part in (("broker", "--data-dir", "name"), ("mirror", "--config", "stem"),
                             ("zookeeper", "--data-dir", "name")):
        if command == name and flag in args[:-1]:
            return f"{name} {getattr(Path(args[args.index(flag) + 1]), part)}"
    return {"wan": "wan emulator", None: "process"}.get(command, command) or "process"


def _is_launcher(identity: Identity) -> bool:
    return _subcommand(identity) == "up"


# -- status ------------------------------------------------------------------------------------


def broker_answers(address: str, timeout_s: float = 2.0) -> bool:
    """Whether a Kafka broker at `address` answers an ApiVersions v0 request."""
    try:
        host, port = parse_host_port(address)
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            body = encode_request_header(RequestHeader(ApiKey.API_VERSIONS, 0, 1, "causeway-status"), 1)
            sock.sendall(struct.pack(">i", len(body)) + body)
            head = sock.recv(8)
            return len(head) == 8 and struct.unpack(">ii", head)[1] == 1
    except (OSError, ValueError):
        return False


def status(state_dir: Path, *, links: bool = False) -> dict[str, Any]:
    """The status document `causeway status --json` prints.

    `running` says whether the launcher runs; `healthy` whether everything it started works.
    When the launcher is gone, `orphans` lists what it started that still runs; a damaged state
    file gives `state_error` (and the processes found without it, as orphans). With `links`
    (the live view), `wan.links` is the emulator's `GET /links` (declared bandwidth and bytes
    sent each way), asked with the other probes and bounded as they are; None when it did not
    answer or has no links (a real Toxiproxy).
    """
    try:
        state = read_state(state_dir)
    except StateFileError as exc:
        found = find_running(state_dir, None)
        return {"running": False, "healthy": False, "state_error": exc.reason, "state_file": str(exc.path),
                "orphans": found.describe(), "clusters": {}, "mirrors": {}, "wan": {}}
    found = find_running(state_dir, state)
    if state is None or found.launcher is None:
        report: dict[str, Any] = {"running": False, "healthy": False, "orphans": found.describe(),
                                  "strangers": [f"{label} (pid {pid})" for label, pid in found.strangers],
                                  "clusters": {}, "mirrors": {}, "wan": {}}
        if state is not None:
            report.update(name=state.name, pid=state.pid, stale=True)
        return report
    ours = {identity.pid for _, identity in found.children}
    answers = trio.run(partial(ask_all, state, links=links))
    clusters = {name: cluster_status(cluster, ours, answers.views[name], answers.zookeeper.get(name))
                for name, cluster in state.clusters.items()}
    wan = _wan_status(state.wan, ours, answers.wan)
    if links:
        wan["links"] = answers.links
    processes = {identity.pid: identity for _, identity in found.children}
    mirrors = {name: mirror_status(m, processes.get(m.pid or 0), state_dir) for name, m in state.mirrors.items()}
    prometheus = None if state.prometheus is None else _prometheus_status(state.prometheus, ours, answers.prometheus)
    return {
        "name": state.name,
        "running": True,
        "healthy": (all(c["healthy"] for c in clusters.values()) and wan["healthy"]
                    and all(m["healthy"] for m in mirrors.values()) and (prometheus is None or prometheus["healthy"])),
        "pid": found.launcher.pid,
        "metrics": state.metrics,  # the launcher's own: every process up, restarts
        "clusters": clusters,
        "mirrors": mirrors,
        "wan": wan,
        "prometheus": prometheus,
    }


#: At most this many under-replicated or offline partitions are listed by name (all are counted).
LISTED_PARTITIONS = 20
#: How long `status` waits for each answer (a broker's Metadata, a ZooKeeper node's `srvr`, the
#: WAN API). Every question is asked at once, so frozen brokers cost `status` this, not this
#: per broker: a process that is stopped still accepts connections (the kernel does) and never
#: answers.
PROBE_TIMEOUT_S = 1.5


@dataclass
class ProbeAnswers:
    """What every process asked by `status` answered (or why not)."""

    views: dict[str, list[ClusterView | str]] = field(default_factory=dict)  # cluster -> per broker
    zookeeper: dict[str, dict[str, str | None]] = field(default_factory=dict)  # cluster -> node -> mode
    wan: object = None  # the WAN API's proxies, None when it did not answer
    prometheus: bool = False  # Prometheus answered /-/ready
    links: dict[str, Any] | None = None  # the emulator's shared links, when asked for and answered


def broker_addresses(cluster: ClusterRecord) -> list[str]:
    listed = cluster.bootstrap.split(",")
    return [b.address or (listed[i] if i < len(listed) else listed[0]) for i, b in enumerate(cluster.brokers)]


async def _in_thread(call: Callable[[], T]) -> T | None:
    """A blocking question in a worker thread, given up (left to finish alone) after
    PROBE_TIMEOUT_S; None then."""
    with trio.move_on_after(PROBE_TIMEOUT_S):
        return await trio.to_thread.run_sync(call, abandon_on_cancel=True)
    return None


def _admin_security(cluster: ClusterRecord) -> ClientSecurity | None:
    """The login the launcher recorded for the cluster's LOCAL listener (a properties file it
    wrote, 0600; the state file names it, never a password), or None: plaintext."""
    if cluster.command_config is None:
        return None
    return read_client_security(Path(cluster.command_config))


def _logins(state: LaunchStateFile) -> dict[str, ClientSecurity | None | str]:
    """Each cluster's login (None: plaintext), or why there is none: file reads, for a thread."""
    logins: dict[str, ClientSecurity | None | str] = {}
    for name, cluster in state.clusters.items():
        try:
            logins[name] = _admin_security(cluster)
        except (OSError, ConfigError) as exc:
            logins[name] = f"cannot log in: {exc}"
    return logins


async def ask_all(state: LaunchStateFile, *, links: bool = False) -> ProbeAnswers:
    """Ask every broker, ZooKeeper node and the WAN API (its links too, with `links`) at once,
    each bounded."""
    answers = ProbeAnswers()
    # The login files are read first, all together (off the loop, and only when a cluster has
    # one): every probe then starts at once and gets the whole of its bound.
    secured = any(cluster.command_config is not None for cluster in state.clusters.values())
    logins = (await trio.to_thread.run_sync(_logins, state) if secured
              else dict.fromkeys(state.clusters, None))

    async def views(name: str, cluster: ClusterRecord) -> None:
        login = logins[name]
        if isinstance(login, str):
            answers.views[name] = [login] * len(cluster.brokers)
            return
        answers.views[name] = await read_views(broker_addresses(cluster), timeout_s=PROBE_TIMEOUT_S,
                                               security=login)

    async def mode(name: str, address: str) -> None:
        try:
            host, port = parse_host_port(address)
        except ValueError:
            return
        answer = await _in_thread(partial(srvr, host, port, timeout_s=PROBE_TIMEOUT_S))
        answers.zookeeper[name][address] = answer.mode if answer is not None else None

    async def wan() -> None:
        answers.wan = await _in_thread(partial(_wan_proxies, state.wan.api))

    async def wan_links() -> None:
        answers.links = await _in_thread(partial(_wan_links, state.wan.api))

    async def prometheus(url: str) -> None:
        answers.prometheus = bool(await _in_thread(partial(is_ready, url, timeout_s=PROBE_TIMEOUT_S)))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wan)
        if state.prometheus is not None:
            nursery.start_soon(prometheus, state.prometheus.url)
        if links:
            nursery.start_soon(wan_links)
        for name, cluster in state.clusters.items():
            nursery.start_soon(views, name, cluster)
            if cluster.zookeeper is not None:
                hosts = cluster.zookeeper.connect.partition("/")[0].split(",")
                answers.zookeeper[name] = dict.fromkeys(hosts)
                for address in hosts:
                    nursery.start_soon(mode, name, address)
    return answers


def cluster_status(cluster: ClusterRecord, ours: set[int], answers: list[ClusterView | str],
                   zookeeper_nodes: dict[str, str | None] | None) -> dict[str, Any]:
    """A cluster as its processes and its brokers' own Metadata show it.

    Each broker is asked separately. Its state: `down` (its process is not running), `not
    answering`, `starting` (it answers but has not rejoined: no controller known to it yet, as
    while a restarted broker waits for ZooKeeper to expire its previous run's session), `not
    registered` (the controller does not list it) or `serving`. The cluster's view is the
    controller's own answer (else any answer naming a controller). Healthy: every broker
    serving, a ZooKeeper cluster has its ZooKeeper and a controller, and no partition is offline
    or under-replicated; `unhealthy_because` says what is not so. `answers` are the brokers'
    own (in the record's order), `zookeeper_nodes` what each ZooKeeper node said of its mode.
    """
    reasons: list[str] = []
    zookeeper_mode = cluster.zookeeper is not None
    views = {b.id: a for b, a in zip(cluster.brokers, answers, strict=True) if isinstance(a, ClusterView)}
    view = next((v for broker_id, v in views.items() if v.controller_id == broker_id), None)
    view = view or next((v for v in views.values() if v.controller_id >= 0 or not zookeeper_mode), None)
    brokers = []
    for b, answer in zip(cluster.brokers, answers, strict=True):
        if b.pid not in ours:
            state, why = "down", "is not running"
        elif not isinstance(answer, ClusterView):
            state, why = "not answering", answer.removeprefix("no answer to ")
        elif zookeeper_mode and answer.controller_id < 0:
            state, why = "starting", "has not rejoined the cluster yet (it knows no controller)"
        elif view is not None and b.id not in view.brokers:
            state, why = "not registered", "is not registered with the controller"
        else:
            state, why = "serving", ""
        if why:
            reasons.append(f"broker {b.id} {why}")
        brokers.append({"id": b.id, "pid": b.pid, "restarts": b.restarts, "state": state, "address": b.address,
                        "metrics": b.metrics, "log": b.log})
    out: dict[str, Any] = {"datacenter": cluster.datacenter, "bootstrap": cluster.bootstrap, "wan": cluster.wan,
                           "brokers": brokers}
    if cluster.zookeeper is not None:
        out["zookeeper"] = zookeeper = _zookeeper_status(cluster.zookeeper, ours, zookeeper_nodes or {})
        if not zookeeper["healthy"]:
            reasons.append("its ZooKeeper is not serving")
    if view is None:
        reasons.append("no broker knows a controller" if views else "no broker answers Metadata")
    else:
        out.update(controller=view.controller_id, partitions=view.partitions,
                   under_replicated_count=len(view.under_replicated), offline_count=len(view.offline),
                   under_replicated=[str(p) for p in view.under_replicated[:LISTED_PARTITIONS]],
                   offline=[str(p) for p in view.offline[:LISTED_PARTITIONS]])
        if view.offline:
            reasons.append(f"{len(view.offline)} offline partition(s)")
        if view.under_replicated:
            reasons.append(f"{len(view.under_replicated)} under-replicated partition(s)")
    out.update(healthy=not reasons, unhealthy_because=reasons)
    return out


def _zookeeper_status(record: ZooKeeperRecord, ours: set[int], nodes: dict[str, str | None]) -> dict[str, Any]:
    """A cluster's ZooKeeper: its process runs and each node answers `srvr` in a serving mode."""
    healthy = record.pid in ours and bool(nodes) and all(mode is not None for mode in nodes.values())
    return {"connect": record.connect, "pid": record.pid, "restarts": record.restarts, "nodes": nodes,
            "healthy": healthy}


def _wan_status(wan: WanRecord, ours: set[int], proxies: object) -> dict[str, Any]:
    """The emulator (or external Toxiproxy) answers, and every link proxy is there and enabled."""
    out: dict[str, Any] = {"api": wan.api, "pid": wan.pid, "restarts": wan.restarts}
    problems: list[str] = []
    if wan.pid is not None and wan.pid not in ours:
        problems.append("the WAN emulator is not running")
    if not isinstance(proxies, dict):
        problems.append(f"the WAN API at {wan.api} does not answer")
    else:
        for name in wan.proxies:
            proxy = proxies.get(name)
            if not isinstance(proxy, dict):
                problems.append(f"link proxy {name} is missing")
            elif proxy.get("enabled") is not True:
                problems.append(f"link proxy {name} is disabled")
    out.update(healthy=not problems, problems=problems)
    return out


def _prometheus_status(record: PrometheusRecord, ours: set[int], ready: bool) -> dict[str, Any]:
    """`monitoring: prometheus`: its process runs and the server answers /-/ready."""
    reasons = [] if record.pid in ours else ["is not running"]
    if not ready:
        reasons.append(f"does not answer at {record.url}/-/ready")
    return {"url": record.url, "pid": record.pid, "restarts": record.restarts, "config": record.config,
            "log": record.log, "healthy": not reasons, "unhealthy_because": reasons}


def _wan_proxies(api: str) -> object:
    try:
        return WanClient(api, timeout_s=PROBE_TIMEOUT_S).proxies()
    except (OSError, ValueError, WanApiError):
        return None


def _wan_links(api: str) -> dict[str, Any] | None:
    try:
        return WanClient(api, timeout_s=PROBE_TIMEOUT_S).links()
    except (OSError, ValueError, WanApiError):
        return None  # not answering, or a real Toxiproxy (404: it has no links)


def mirror_status(mirror: MirrorRecord, process: Identity | None, state_dir: Path) -> dict[str, Any]:
    """What the launcher knows of a mirror, with what the daemon last reported of itself.

    Healthy means: running, reporting (its status file is fresh), and no problem reported, in
    particular none reaching its source: a mirror that cannot fetch is not "lag 0". Its lag is
    then unknown (`lag` None): `lag_at_least` is what it was when the source last answered, and
    `source_unreachable_since_ms` says when that was. A link-mode mirror whose every topic was
    promoted at the target is in state `promoted`: it has nothing left to copy. `topic_states`:
    a link-mode mirror's state of each topic (ACTIVE, PAUSED, STOPPED, ...), lag included.
    """
    out: dict[str, Any] = {"source": mirror.source, "target": mirror.target, "mode": mirror.mode,
                           "pid": mirror.pid, "restarts": mirror.restarts, "log": mirror.log, "metrics": mirror.metrics}
    running = process is not None
    out["alive"] = running
    reasons: list[str] = []
    try:
        report = read_mirror_report(mirror, state_dir)
    except StatusFileError as exc:
        report = None
        if running:
            reasons.append(str(exc))  # the mirror writes it whole (atomically): damaged by someone else
    if report is not None and process is not None and report.updated_ms < now_ms() - process.age_s() * 1000:
        report = None  # written by an earlier process: says nothing about this one
    if process is None:
        reasons.append("not running")
    if report is None:
        if process is None or process.age_s() > MIRROR_STATUS_STALE_S:
            reasons.append("no status reported")
    else:
        source = _source_reach(mirror, report, running)
        reasons += _report_reasons(mirror, report, running, source)
        promoted = report.mode == "link" and bool(report.promoted) and not report.topics
        out.update(state="promoted" if promoted else report.state, records=report.records,
                   max_latency_ms=report.max_latency_ms, problems=report.problems, topics=report.topics,
                   promoted=report.promoted, updated_ms=report.updated_ms, **source,
                   topic_states={t: state.model_dump() for t, state in report.topic_states.items()},
                   partitions=[_partition_status(p, known=source["lag"] is not None) for p in report.partitions])
    out["healthy"] = not reasons
    out["unhealthy_because"] = reasons
    return out


def read_mirror_report(mirror: MirrorRecord, state_dir: Path) -> MirrorStatus | None:
    """The mirror's status file, which must be in the state dir (the state file names it, and
    anyone may have written that). Raises StatusFileError."""
    try:
        path = state_path(state_dir, os.path.relpath(mirror.status_file, state_dir))
    except (StateDirError, ValueError) as exc:
        raise StatusFileError(f"{mirror.status_file}: not read: {exc}") from None
    return read_status(path)


def _source_reach(mirror: MirrorRecord, report: MirrorStatus, running: bool) -> dict[str, Any]:
    """Whether the mirror reaches its source, and its lag as far as that allows knowing it: the
    lag it reports counts against the source ends of its last answered fetch, so while the
    source is unreachable (or the report itself is stale) it is a lower bound, never a figure."""
    unreachable = _source_problem(mirror, report) is not None
    stale = running and now_ms() - report.updated_ms > MIRROR_STATUS_STALE_S * 1000
    out: dict[str, Any] = {"source_reachable": not unreachable,
                           "source_unreachable_since_ms": report.source_reached_ms if unreachable else None,
                           "lag": report.lag, "lag_at_least": None}
    if unreachable or stale:
        out.update(lag=None, lag_at_least=report.lag)
    return out


def _source_problem(mirror: MirrorRecord, report: MirrorStatus) -> str | None:
    """What the mirror last said of reaching its source: its fetches (`source`), or, before it
    could start, its requests for the source's topics (`source <alias>`)."""
    return report.problems.get("source") or report.problems.get(f"source {mirror.source}")


def _partition_status(partition: PartitionStatus, *, known: bool) -> dict[str, Any]:
    out = partition.model_dump(include={"topic", "partition", "remote_topic", "position", "source_end", "lag",
                                        "latency_ms", "error"})
    if not known:
        out.update(lag=None, lag_at_least=partition.lag)
    return out


def _report_reasons(mirror: MirrorRecord, report: MirrorStatus, running: bool, source: dict[str, Any]) -> list[str]:
    """Why a mirror's own report says it is unhealthy (nothing: it is fine)."""
    reasons: list[str] = []
    # Starting and waiting states are fine until they fail: a failure shows in `problems`.
    if report.state == "stopped":
        reasons.append("stopped")
    problem = _source_problem(mirror, report)
    if problem is not None:
        since = source["source_unreachable_since_ms"]
        when = (f"since {_clock(since)} ({(now_ms() - since) / 1000:.0f} s)" if since is not None
                else "since it started (never reached in this run)")
        reasons.append(f"cannot reach its source {mirror.source} {when}: {problem}; lag unknown, at least "
                       f"{report.lag} (against the source's ends when last reached)")
    reasons += [f"{what}: {text}" for what, text in report.problems.items()
                if what not in ("source", f"source {mirror.source}")]
    if running and now_ms() - report.updated_ms > MIRROR_STATUS_STALE_S * 1000:
        reasons.append(f"its status file has not been updated for over {MIRROR_STATUS_STALE_S:.0f} s "
                       f"(last at {_clock(report.updated_ms)})")
    return reasons


def _clock(ms: int) -> str:
    """A time of day in UTC, for an operator reading `status`."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%H:%M:%S UTC")


# -- down --------------------------------------------------------------------------------------


@dataclass
class StopReport:
    stopped: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # named by the state file, not ours: left alone
    state_error: StateFileError | None = None
    set_aside: Path | None = None  # where a damaged state file was moved
    cleanup_error: str | None = None  # the state file could not be removed (or set aside): why


def _terminate(identity: Identity, timeout_s: float) -> bool:
    """SIGTERM (and SIGCONT, so a stopped process sees it), then SIGKILL after `timeout_s`.

    Signals go through a pidfd opened before the identity is checked once more, so they reach
    this very process even if it exits and its pid is reused meanwhile. False: it was gone.
    """
    try:
        fd = os.pidfd_open(identity.pid)
    except ProcessLookupError:
        return False
    try:
        if not identity.is_current():
            return False
        for sig in (signal.SIGTERM, signal.SIGCONT):
            signal.pidfd_send_signal(fd, sig)
        ready, _, _ = select.select([fd], [], [], timeout_s)
        if not ready:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
            select.select([fd], [], [], 5.0)
        return True
    except ProcessLookupError:
        return False
    finally:
        os.close(fd)


def stop_report(state_dir: Path) -> StopReport:
    """Stop the launcher and everything it started, as far as each is provably ours."""
    report = StopReport()
    try:
        state = read_state(state_dir)
    except StateFileError as exc:
        report.state_error = exc
        state = None
    found = find_running(state_dir, state)
    report.refused = [f"{label}: pid {pid} is not the process the state file recorded; not signalled"
                      for label, pid in found.strangers]
    if found.launcher is not None and _terminate(found.launcher, STOP_TIMEOUT_S):
        report.stopped.append(f"launcher (pid {found.launcher.pid})")
    # Whatever outlived the launcher (it was killed, or crashed) is stopped directly.
    for label, identity in find_running(state_dir, state).children:
        if _terminate(identity, STOP_TIMEOUT_S):
            report.stopped.append(f"{label} (pid {identity.pid})")
    path = state_dir / STATE_FILE
    try:
        if report.state_error is not None:
            # Kept, not deleted: it may be all that tells what ran here.
            aside = path.with_name(STATE_FILE + ".damaged")
            os.replace(path, aside)
            report.set_aside = aside
        else:
            path.unlink(missing_ok=True)
    except FileNotFoundError:
        pass  # the launcher removed it on its way out
    except OSError as exc:
        report.cleanup_error = f"cannot remove the state file {path}: {exc.strerror or exc}"
    return report


def stop(state_dir: Path) -> list[str]:
    """Stop everything; returns what was stopped, by name (see `stop_report` for the rest)."""
    return stop_report(state_dir).stopped
