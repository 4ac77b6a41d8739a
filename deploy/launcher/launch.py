"""Bring a launch plan up on this machine, keep it up, and describe it in the state dir.

One WAN emulator serves every link. Each broker gets a LOCAL listener for its own datacenter and
one WAN_<DC> listener per remote datacenter that reads its cluster; that listener advertises the
address of the broker's own proxy on the link (Kafka's advertised.listeners, per listener), so a
client in the remote datacenter reaches every broker of the cluster only through the emulated WAN.
Every port is allocated once, before anything starts, so a restarted process comes back on the
same address. A restarted emulator starts empty: the launcher makes its proxies and toxics again
before the emulator counts as up (the supervisor's `on_ready`).

A standalone cluster is one broker (id 0). A ZooKeeper cluster (`coordination: zookeeper`) gets
its own ZooKeeper first, then brokers 1..N, started side by side with `zookeeper.connect` and
`broker.id` set; it is up once every broker is ready and the cluster has a controller with every
broker registered. Then the launcher creates the plan's topics through the admin client (with
their replication factors and configs). The clusters start side by side, then the mirrors, side
by side too. On the way out the brokers stop before their ZooKeeper, so their controlled shutdowns
can still move leaderships.

Every process started here dies with the launcher (see deploy/supervisor.py) and carries
`CAUSEWAY_STATE_DIR` in its environment; the state file records each one's pid, start time and
command line, so `status` and `down` signal or report only processes that are provably ours.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import trio

from broker.atomic_file import write_atomically
from broker.client import ClientError, KafkaError
from broker.client.cluster import open_client
from broker.config import ConfigError
from broker.tasks import gather
from deploy.broker_process import READY as BROKER_READY
from deploy.broker_process import broker_command
from deploy.launcher.cluster_view import TOPICS_TIMEOUT_S, create_topics, read_view, wait_for_controller
from deploy.launcher.metrics import DEFAULT_LISTENER, ChildRow, LauncherCollector, serve_launcher_metrics
from deploy.launcher.plan import AclPlan, ClusterPlan, LaunchPlan, LinkPlan, MirrorPlan, listener_name
from deploy.launcher.prometheus import BrokerTarget, MirrorTarget, PrometheusState, start_prometheus
from deploy.launcher.security import (
    ADMIN_USER,
    ClusterSecrets,
    CredentialsError,
    admin_security,
    create_acls,
    mirror_acls,
    prepare_cluster,
    write_broker_config,
    write_scram_credentials,
)
from deploy.launcher.state_file import (
    STATE_FORMAT,
    BrokerRecord,
    ClusterRecord,
    LaunchStateFile,
    MirrorRecord,
    ProcessRecord,
    PrometheusRecord,
    WanRecord,
    ZooKeeperRecord,
)
from deploy.ports import free_port
from deploy.process_identity import STATE_DIR_ENV, Identity, identity_of
from deploy.supervisor import ProcessSpec, StartFailed, Supervised, hold, supervise
from deploy.wan.client import WanApiError, WanClient
from deploy.wan.process import READY as WAN_READY
from deploy.wan.process import wan_command
from security.certs import CertsError, ZookeeperCertificates
from security.client import ClientSecurity

__all__ = ["BROKER_LISTENER", "STATE_FILE", "BrokerState", "ClusterState", "LaunchState", "StateDirError",
           "broker_spec", "free_port", "link_body", "link_toxics", "prepare_state_dir", "run_plan", "state_path"]

log = logging.getLogger(__name__)

STATE_FILE = "state.json"
MIRROR_READY = re.compile(r"^causeway mirror ready: ")
ZOOKEEPER_READY = re.compile(r"^causeway zookeeper ready: (\S+)$")


class StateDirError(Exception):
    """The state dir cannot be used: it cannot be written, or a path would lead out of it."""


def state_path(state_dir: Path, *parts: str) -> Path:
    """`state_dir/parts...`, checked to stay inside the state dir once `..` and symbolic links
    are followed: names come from a topology file, and nothing `up` writes (data dirs, logs,
    mirror configs) may land elsewhere. Raises StateDirError."""
    path = state_dir.joinpath(*parts)
    root = state_dir.resolve()
    resolved = path.resolve()
    if resolved == root or not resolved.is_relative_to(root):
        raise StateDirError(f"{path} leads out of the state dir {root} (to {resolved}): refused")
    return path


def prepare_state_dir(state_dir: Path) -> None:
    """Create the state dir (and its logs dir) and prove it writable, before anything starts:
    a launcher that could not record what it started would leave processes nobody finds.
    Raises StateDirError with the system's reason."""
    try:
        state_path(state_dir, "logs").mkdir(parents=True, exist_ok=True)
        probe = state_path(state_dir, f".{STATE_FILE}.probe")
        write_atomically(probe, "")
        probe.unlink()
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        raise StateDirError(f"cannot write the state dir {state_dir}{where}: {exc.strerror or exc}") from None




def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "deploy.cli", *args]


@dataclass
class BrokerState:
    broker_id: int
    local: str  # host:port of its LOCAL listener
    wan: dict[str, str]  # remote datacenter -> host:port of this broker's proxy on the link
    process: Supervised
    metrics: str = ""  # host:port of its causeway.metrics.listener


@dataclass
class ClusterState:
    plan: ClusterPlan
    brokers: dict[int, BrokerState]  # by broker id, in id order
    zookeeper: Supervised | None = None  # coordination: zookeeper
    zookeeper_connect: str = ""  # zookeeper.connect of its plain client port, with the cluster's chroot
    # security.zookeeper: SSL: the TLS client port's zookeeper.connect (what the brokers use) and
    # the certificates `causeway zookeeper --tls` made for it.
    zookeeper_tls_connect: str = ""
    zookeeper_tls: ZookeeperCertificates | None = None
    secrets: ClusterSecrets | None = None  # a cluster with `security:`
    security: ClientSecurity | None = None  # how the launcher's own clients log in (LOCAL listener)

    @property
    def admin_config(self) -> str | None:
        """The admin user's client properties file, when the LOCAL listener needs a login."""
        if self.secrets is None or self.security is None:
            return None
        return str(self.secrets.client_config(ADMIN_USER))

    @property
    def bootstrap(self) -> str:
        """Every broker's LOCAL address: bootstrap.servers for clients in the cluster's datacenter."""
        return ",".join(b.local for b in self.brokers.values())

    @property
    def wan(self) -> dict[str, str]:
        """Remote datacenter -> bootstrap.servers for its clients: every broker's proxy there."""
        return {dc: ",".join(b.wan[dc] for b in self.brokers.values()) for dc in self.plan.remote_datacenters}

    @property
    def broker(self) -> Supervised:
        """The first broker's process (all there is of a standalone cluster)."""
        return next(iter(self.brokers.values())).process


@dataclass
class MirrorState:
    plan: MirrorPlan
    source_bootstrap: str  # through the WAN link when the source is in another datacenter
    target_bootstrap: str
    config_file: Path
    status_file: Path
    process: Supervised
    metrics: str = ""  # host:port of its metrics.listener


@dataclass
class LaunchState:
    plan: LaunchPlan
    state_dir: Path
    wan_api: str = ""
    wan: Supervised | None = None
    clusters: dict[str, ClusterState] = field(default_factory=dict)
    mirrors: dict[str, MirrorState] = field(default_factory=dict)
    # The WAN links made on the emulator, by proxy name: the proxy's body and its toxics, kept to
    # make them again when the emulator restarts.
    links: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = field(default_factory=dict)
    # The shared links made on the emulator (their bodies), made before the proxies that cross
    # them; none when the API is a real Toxiproxy, which has no links (then each proxy gets the
    # link's latency and bandwidth as toxics of its own: `shared_links` False).
    wan_links: list[dict[str, Any]] = field(default_factory=list)
    shared_links: bool = True
    prometheus: PrometheusState | None = None  # monitoring: prometheus
    identity: Identity | None = field(default_factory=lambda: identity_of(os.getpid()))
    metrics: str = ""  # host:port of the launcher's own metrics (deploy/launcher/metrics.py)
    collector: LauncherCollector = field(default_factory=LauncherCollector)

    @property
    def proxies(self) -> list[str]:
        return list(self.links)

    # Set by every child's start and exit: the state file is rewritten (off the loop) by
    # `keep_saved`. A trio.Event, replaced once seen, so changes while a write runs are not lost.
    _changed: trio.Event = field(default_factory=trio.Event)
    _save_lock: trio.Lock = field(default_factory=trio.Lock)

    def snapshot(self) -> LaunchStateFile:
        """The state file's content as of now (taken on the event loop: a consistent view)."""
        wan = WanRecord(api=self.wan_api, proxies=self.proxies,
                        **(_process(self.wan).model_dump() if self.wan else {}))
        return LaunchStateFile(
            format=STATE_FORMAT,
            name=self.plan.name,
            **_identity(self.identity).model_dump(exclude={"restarts"}),
            metrics=self.metrics or None,
            wan=wan,
            clusters={
                name: ClusterRecord(
                    datacenter=c.plan.datacenter, bootstrap=c.bootstrap, wan=dict(c.wan),
                    command_config=c.admin_config,
                    brokers=[BrokerRecord(id=b.broker_id, log=str(b.process.spec.log_path), address=b.local,
                                          metrics=b.metrics or None, **_process(b.process).model_dump())
                             for b in c.brokers.values()],
                    zookeeper=ZooKeeperRecord(connect=c.zookeeper_connect, tls_connect=c.zookeeper_tls_connect or None,
                                              log=str(c.zookeeper.spec.log_path),
                                              **_process(c.zookeeper).model_dump()) if c.zookeeper else None,
                )
                for name, c in self.clusters.items()
            },
            mirrors={
                name: MirrorRecord(
                    source=m.plan.source, target=m.plan.target, mode=m.plan.mode,
                    source_bootstrap=m.source_bootstrap, target_bootstrap=m.target_bootstrap,
                    log=str(m.process.spec.log_path), config=str(m.config_file), status_file=str(m.status_file),
                    metrics=m.metrics or None, **_process(m.process).model_dump(),
                )
                for name, m in self.mirrors.items()
            },
            prometheus=None if self.prometheus is None else PrometheusRecord(
                url=self.prometheus.url, config=str(self.prometheus.config_file),
                log=str(self.prometheus.process.spec.log_path), **_process(self.prometheus.process).model_dump()),
        )

    def children(self) -> list[tuple[str, Supervised]]:
        """Every supervised child known so far, with its kind, in the order they start."""
        found: list[tuple[str, Supervised]] = [("wan", self.wan)] if self.wan is not None else []
        for cluster in self.clusters.values():
            if cluster.zookeeper is not None:
                found.append(("zookeeper", cluster.zookeeper))
            found += [("broker", b.process) for b in cluster.brokers.values()]
        found += [("mirror", m.process) for m in self.mirrors.values()]
        if self.prometheus is not None:
            found.append(("prometheus", self.prometheus.process))
        return found

    def changed(self, _child: Supervised | None = None) -> None:
        """A child started or exited (the supervisor's `on_change`): the metrics' rows now, the
        state file soon, off the loop."""
        self.collector.update(ChildRow(p.spec.name, kind, p.healthy, p.restarts) for kind, p in self.children())
        self._changed.set()

    async def save(self) -> None:
        """Rewrite the state file now: snapshot here, the write (fsync, rename, fsync of the
        directory) in a worker thread. One write at a time: they share a temporary file."""
        async with self._save_lock:
            text = self.snapshot().to_json()
            await trio.to_thread.run_sync(write_atomically, self.state_dir / STATE_FILE, text)

    async def keep_saved(self) -> None:
        """Save after every change until cancelled; changes during a write make one more."""
        while True:
            await self._changed.wait()
            self._changed = trio.Event()
            try:
                await self.save()
            except OSError as exc:
                log.warning("cannot write the state file in %s: %s", self.state_dir, exc)


def _identity(identity: Identity | None) -> ProcessRecord:
    if identity is None:
        return ProcessRecord()
    return ProcessRecord(pid=identity.pid, start_time=identity.start_time, cmdline=list(identity.cmdline))


def _process(supervised: Supervised) -> ProcessRecord:
    return _identity(supervised.identity).model_copy(update={"restarts": supervised.restarts})


def _spec(state_dir: Path, name: str, argv: list[str], log_path: Path, ready: re.Pattern[str]) -> ProcessSpec:
    """Every child carries the state dir in its environment: how the next command finds it."""
    return ProcessSpec(name, argv, log_path, ready, env={STATE_DIR_ENV: str(state_dir.resolve())})


def link_body(link: LinkPlan) -> dict[str, Any]:
    """The link on the WAN emulator (`POST /links`, deploy/wan/link.py): one shared pipe each
    way, which every proxy across it joins."""
    return {"name": link.name, "between": [link.a, link.b], "bandwidth": link.bandwidth_bytes_per_s or 0,
            "latency": link.latency_ms, "jitter": link.jitter_ms, "loss": link.loss_percent,
            "reorder": link.reorder_percent}


def link_toxics(link: LinkPlan) -> list[dict[str, Any]]:
    """A link as Toxiproxy's per-proxy toxics, for a real Toxiproxy (which has no shared links):
    latency each way and a bandwidth cap per connection; loss and reorder have no toxic."""
    toxics: list[dict[str, Any]] = []
    for stream in ("upstream", "downstream"):
        if link.latency_ms or link.jitter_ms:
            toxics.append({"name": f"latency_{stream}", "type": "latency", "stream": stream,
                           "attributes": {"latency": link.latency_ms, "jitter": link.jitter_ms}})
        if link.bandwidth_bytes_per_s:
            toxics.append({"name": f"bandwidth_{stream}", "type": "bandwidth", "stream": stream,
                           "attributes": {"rate": max(1, link.bandwidth_bytes_per_s // 1000)}})
    return toxics


#: The listener brokers reach each other through when it is not LOCAL (see _inter_broker).
BROKER_LISTENER = "BROKER"


def _inter_broker(cluster: ClusterPlan) -> str | None:
    """The protocol of a BROKER listener of its own, or None: the brokers use LOCAL. A ZooKeeper
    cluster whose LOCAL listener asks clients to log in gets one (brokers do not log in with
    SASL), and so does `between_brokers: SSL` (mutual TLS, each broker its own principal)."""
    security = cluster.security
    if security is None or cluster.coordination != "zookeeper":
        return None
    if security.between_brokers == "SSL":
        return "SSL"
    return "PLAINTEXT" if security.local != "PLAINTEXT" else None


def broker_spec(state_dir: Path, cluster: ClusterPlan, broker_id: int, local: str, proxies: dict[str, str],
                 bound: dict[str, int], zookeeper_connect: str, secrets: ClusterSecrets | None = None,
                 broker_port: int | None = None, zookeeper_tls: ZookeeperCertificates | None = None,
                 metrics_listener: str | None = None) -> ProcessSpec:
    """The broker command: LOCAL plus one WAN listener per remote datacenter, bound on `bound`'s
    port and advertised as this broker's proxy on the link (`proxies`); in a ZooKeeper cluster
    with its broker.id and zookeeper.connect (and with `zookeeper_tls`, the keys that reach it
    over TLS and set znode ACLs). A secured cluster's brokers speak its protocols (and a BROKER
    listener on `broker_port` when _inter_broker says so); their secrets are in a 0600 file
    passed with --config (written here: blocking). With `metrics_listener` (HOST:PORT) it serves
    Prometheus metrics there (causeway.metrics.listener)."""
    security = cluster.security
    local_protocol, wan_protocol = (security.local, security.wan) if security else ("PLAINTEXT", "PLAINTEXT")
    endpoints = [("LOCAL", local, local, local_protocol)]
    for dc, proxy in proxies.items():
        endpoints.append((listener_name(dc), f"127.0.0.1:{bound[dc]}", proxy, wan_protocol))
    inter_broker = _inter_broker(cluster)
    if inter_broker is not None:
        assert broker_port is not None
        address = f"127.0.0.1:{broker_port}"
        endpoints.append((BROKER_LISTENER, address, address, inter_broker))
    overrides = {
        **cluster.broker_configs,
        "listeners": ",".join(f"{name}://{bind}" for name, bind, _, _ in endpoints),
        "advertised.listeners": ",".join(f"{name}://{advertised}" for name, _, advertised, _ in endpoints),
        "listener.security.protocol.map": ",".join(f"{name}:{protocol}" for name, _, _, protocol in endpoints),
        "inter.broker.listener.name": BROKER_LISTENER if inter_broker is not None else "LOCAL",
    }
    if metrics_listener is not None:
        overrides["causeway.metrics.listener"] = metrics_listener
    if zookeeper_connect:
        overrides.update({"zookeeper.connect": zookeeper_connect, "broker.id": str(broker_id)})
        if zookeeper_tls is not None:
            overrides.update(zookeeper_tls.broker_properties())
        data_dir = state_path(state_dir, "data", f"{cluster.name}-broker-{broker_id}")
        name = f"broker {broker_id} of {cluster.name}"
    else:
        data_dir, name = state_path(state_dir, "data", cluster.name), f"broker {cluster.name}"
    log_path = state_path(state_dir, "logs", f"{cluster.name}-broker-{broker_id}.log")
    argv = broker_command(data_dir, overrides=[f"{key}={value}" for key, value in overrides.items()])
    if secrets is not None:
        listeners = {name: protocol for name, _, _, protocol in endpoints}
        argv += ["--config", str(write_broker_config(secrets, broker_id, listeners))]
    return _spec(state_dir, name, argv, log_path, BROKER_READY)


async def _mirror_state(state: LaunchState, mirror: MirrorPlan) -> MirrorState:
    """The mirror runs in the target's datacenter: it reads the source through the WAN link's
    proxy (the source's WAN listener for that datacenter) and writes to the target locally."""
    source, target = state.clusters[mirror.source], state.clusters[mirror.target]
    source_bootstrap = source.wan.get(target.plan.datacenter, source.bootstrap)
    config_file = state_path(state.state_dir, "mirrors", f"{mirror.name}.yaml")
    config_file.parent.mkdir(parents=True, exist_ok=True)
    metrics = f"127.0.0.1:{free_port()}"
    config = {"name": mirror.name, "metrics.listener": metrics,
              "source": {"alias": mirror.source, "bootstrap": source_bootstrap,
                         **_mirror_login(mirror, source, wan=source_bootstrap != source.bootstrap)},
              "target": {"alias": mirror.target, "bootstrap": target.bootstrap,
                         **_mirror_login(mirror, target, wan=False)},
              **mirror.settings}
    text = json.dumps(config, indent=2) + "\n"  # JSON is YAML
    # 0600: a secured cluster's login (its password) is in the file.
    await trio.to_thread.run_sync(partial(write_atomically, config_file, text, mode=0o600))
    status_file = state_path(state.state_dir, "mirrors", f"{mirror.name}.status.json")
    argv = _cli("mirror", "--config", str(config_file), "--status-file", str(status_file))
    log_path = state_path(state.state_dir, "logs", f"mirror-{mirror.name}.log")
    process = Supervised(_spec(state.state_dir, f"mirror {mirror.name}", argv, log_path, MIRROR_READY),
                         on_change=state.changed)
    return MirrorState(mirror, source_bootstrap, target.bootstrap, config_file, status_file, process, metrics)


def _mirror_login(mirror: MirrorPlan, cluster: ClusterState, *, wan: bool) -> dict[str, object]:
    """The mirror's client `properties` for `cluster` (MM2's source.cluster.* / target.cluster.*):
    its principal's login on the listener it uses; nothing for a PLAINTEXT one."""
    secrets = cluster.secrets
    if secrets is None or mirror.principal is None:
        return {}
    protocol = secrets.plan.wan if wan else secrets.plan.local
    if protocol == "PLAINTEXT":
        return {}
    return {"properties": secrets.client_properties(mirror.principal, protocol)}


async def run_plan(plan: LaunchPlan, state_dir: Path, *, toxiproxy: str | None = None,
                   metrics_listener: str = DEFAULT_LISTENER,
                   task_status: trio.TaskStatus[LaunchState] = trio.TASK_STATUS_IGNORED) -> None:
    """Start the WAN emulator and every cluster, report the LaunchState, supervise until cancelled.

    `toxiproxy` (HOST:PORT of a running Toxiproxy, the real one or ours) is used for the links
    instead of starting an emulator; the proxies made there are removed again on the way out.
    The launcher's own metrics are served at `metrics_listener` (HOST:PORT; port 0 picks one).
    Raises deploy.supervisor.StartFailed naming the process that could not start (after stopping
    everything started before it), MetricsListenerError (before anything starts) when the
    metrics listener cannot be bound.
    """
    # Once, before anything starts; in a worker thread, as the probe is fsynced.
    await trio.to_thread.run_sync(prepare_state_dir, state_dir)
    state = LaunchState(plan, state_dir)
    server = serve_launcher_metrics(metrics_listener, state.collector)  # binds only: fast
    state.metrics = f"{server.host}:{server.port}"
    try:
        await _run(state, toxiproxy, task_status)
    finally:
        if toxiproxy is not None:
            with trio.CancelScope(shield=True):
                for name in state.proxies:
                    try:
                        await trio.to_thread.run_sync(WanClient(toxiproxy).delete_proxy, name)
                    except (WanApiError, OSError) as exc:
                        log.warning("could not remove proxy %s from %s: %s", name, toxiproxy, exc)
                for body in state.wan_links:
                    try:
                        await trio.to_thread.run_sync(WanClient(toxiproxy).request, "DELETE", f"/links/{body['name']}")
                    except (WanApiError, OSError) as exc:
                        log.warning("could not remove link %s from %s: %s", body["name"], toxiproxy, exc)
        with trio.CancelScope(shield=True):  # on the way out, cancelled: the close must still run
            await trio.to_thread.run_sync(server.close)
        # Everything this launcher started has stopped (the nursery waited for it): say so.
        (state_dir / STATE_FILE).unlink(missing_ok=True)


async def _run(state: LaunchState, toxiproxy: str | None, task_status: trio.TaskStatus[LaunchState]) -> None:
    # ZooKeeper and the brokers of ZooKeeper clusters run in `last`, shielded: on the way out,
    # once the mirrors have stopped, the brokers stop in order (see _stop_in_order), then their
    # ZooKeeper, which a stopping broker still talks to for its controlled shutdown.
    shields: list[_Shield] = []
    async with trio.open_nursery() as last:
        try:
            async with trio.open_nursery() as nursery:
                await _start_all(state, toxiproxy, nursery, partial(_supervise_shielded, last, shields), task_status)
        finally:
            zookeepers = [c.zookeeper for c in state.clusters.values() if c.zookeeper is not None]
            with trio.CancelScope(shield=True), trio.move_on_after(ORDERED_STOP_S):
                await gather([partial(_stop_in_order, c) for c in state.clusters.values() if c.zookeeper], collect=())
                # Whatever broker is left (a cluster still starting, or a broker restarting that
                # waits for ZooKeeper to drop its old registration) stops before ZooKeeper too:
                # stopped together, a broker's controlled shutdown waits out its ZooKeeper session.
                brokers = [s for s in shields if not any(s.process is z for z in zookeepers)]
                for shield in brokers:
                    shield.scope.cancel()
                for shield in brokers:
                    await shield.done.wait()
            for shield in shields:
                shield.scope.cancel()


#: The most the ordered stop of ZooKeeper clusters may take; whatever still runs then is stopped
#: as everything else is (SIGTERM, then SIGKILL after the supervisor's grace period).
ORDERED_STOP_S = 30.0


async def _stop_in_order(cluster: ClusterState) -> None:
    """Stop a ZooKeeper cluster's brokers as an operator would: every broker but the controller
    first, side by side, so each one's controlled shutdown finds a controller that moves its
    leaderships away; then the controller. Stopped all at once, the controller tends to go first
    and the others retry their controlled shutdowns against nobody (controlled.shutdown.max.retries
    x controlled.shutdown.retry.backoff.ms, 15 s by default). A cluster still starting (some
    broker not healthy) is left to the plain stop."""
    brokers = {b.broker_id: b.process for b in cluster.brokers.values()}
    if not brokers or not all(p.healthy for p in brokers.values()):
        return
    controller = -1  # unknown: all side by side, as without an order
    try:
        controller = (await read_view(cluster.bootstrap, timeout_s=2.0, security=cluster.security)).controller_id
    except (ClientError, KafkaError, OSError, trio.TooSlowError) as exc:
        log.info("cluster %s: controller unknown (%s); stopping its brokers side by side", cluster.plan.name, exc)
    await gather([partial(hold, p) for i, p in brokers.items() if i != controller], collect=(RuntimeError,))
    if controller in brokers:
        await hold(brokers[controller])


@dataclass
class _Shield:
    """A process supervised in `last`: the scope that shields it, set once its supervisor ended."""

    process: Supervised
    scope: trio.CancelScope
    done: trio.Event


async def _supervise_shielded(nursery: trio.Nursery, shields: list[_Shield], supervised: Supervised) -> str:
    """`supervise(supervised)` in `nursery`, shielded from cancellation until its scope (added to
    `shields`) is cancelled; returns the first ready line."""
    shield = _Shield(supervised, trio.CancelScope(shield=True), trio.Event())
    shields.append(shield)

    async def shielded(*, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            with shield.scope:
                await supervise(supervised, task_status=task_status)
        finally:
            shield.done.set()

    ready: str = await nursery.start(shielded)
    return ready


StartLast = Callable[[Supervised], Awaitable[str]]


async def _start_all(state: LaunchState, toxiproxy: str | None, nursery: trio.Nursery, last: StartLast,
                     task_status: trio.TaskStatus[LaunchState]) -> None:
    plan, state_dir = state.plan, state.state_dir
    nursery.start_soon(state.keep_saved)
    if toxiproxy is not None:
        state.wan_api = toxiproxy
    else:
        state.wan = Supervised(_spec(state_dir, "wan emulator", wan_command(f"127.0.0.1:{free_port()}"),
                                     state_path(state_dir, "logs", "wan.log"), WAN_READY),
                               on_change=state.changed, on_ready=partial(_restore_links, state))
        ready = await nursery.start(supervise, state.wan)
        match = WAN_READY.match(ready)
        assert match is not None
        state.wan_api = match.group(1)
    await _make_shared_links(state)
    # The clusters side by side: none waits for another (the mirrors, which read two, start
    # after all of them). Their entries first, in the plan's order, which `status` keeps.
    for cluster in plan.clusters:
        state.clusters[cluster.name] = ClusterState(cluster, {})
    await gather([partial(_start_cluster, state, c, nursery, last) for c in state.clusters.values()],
                 collect=(StartFailed, StateDirError))
    for mirror in plan.mirrors:
        state.mirrors[mirror.name] = await _mirror_state(state, mirror)
    # Side by side too: each mirror reads and writes clusters that are up, never another mirror.
    await gather([partial(_start_mirror, m, nursery) for m in state.mirrors.values()], collect=(StartFailed,))
    if plan.monitoring == "prometheus":
        await _start_prometheus(state, nursery)
    await state.save()  # before `up` says ready: `status` and `down` find what runs
    task_status.started(state)


async def _start_prometheus(state: LaunchState, nursery: trio.Nursery) -> None:
    """Prometheus over every broker's and mirror's metrics listener and the WAN emulator's API, when
    the emulator is ours (a real Toxiproxy serves /metrics only when started so): see
    deploy/launcher/prometheus.py."""
    brokers = [BrokerTarget(c.plan.name, c.plan.datacenter, b.broker_id, b.metrics)
               for c in state.clusters.values() for b in c.brokers.values()]
    mirrors = [MirrorTarget(m.plan.name, m.plan.source, m.plan.target, state.clusters[m.plan.target].plan.datacenter,
                            m.metrics, m.plan.lag_alert_seconds) for m in state.mirrors.values()]
    state.prometheus = await start_prometheus(
        state.state_dir, state.plan.name, brokers, mirrors, state.wan_api if state.wan is not None else None,
        f"127.0.0.1:{free_port()}", nursery,
        {STATE_DIR_ENV: str(state.state_dir.resolve())}, on_change=state.changed, launcher=state.metrics)
    state.changed()  # its first start was heard before it was known here
    log.info("prometheus up at %s", state.prometheus.url)


async def _start_mirror(mirror: MirrorState, nursery: trio.Nursery) -> None:
    await nursery.start(supervise, mirror.process)
    log.info("mirror %s up: %s -> %s", mirror.plan.name, mirror.plan.source, mirror.plan.target)


async def _start_cluster(state: LaunchState, running: ClusterState, nursery: trio.Nursery, last: StartLast) -> None:
    """A cluster's ZooKeeper (coordination: zookeeper), its brokers side by side, their WAN
    links, then its topics once it has a controller."""
    cluster = running.plan
    if cluster.security is not None:
        await _prepare_security(state, running)
    if cluster.coordination == "zookeeper":
        await _start_zookeeper(state, running, last)
        if running.secrets is not None and running.secrets.plan.uses_sasl and \
                running.secrets.plan.mechanism.startswith("SCRAM"):
            await _write_scram(running)
    bound: dict[int, dict[str, int]] = {}  # broker id -> remote datacenter -> its WAN listener's port
    brokers = running.brokers
    for i, broker_id in enumerate(cluster.broker_ids):
        local = f"127.0.0.1:{(cluster.port if i == 0 else None) or free_port()}"
        bound[broker_id] = {dc: free_port() for dc in cluster.remote_datacenters}
        proxies = {dc: f"127.0.0.1:{free_port()}" for dc in cluster.remote_datacenters}
        metrics = f"127.0.0.1:{free_port()}"
        spec = await trio.to_thread.run_sync(partial(
            broker_spec, state.state_dir, cluster, broker_id, local, proxies, bound[broker_id],
            running.zookeeper_tls_connect or running.zookeeper_connect, running.secrets, free_port(),
            running.zookeeper_tls, metrics_listener=metrics))
        brokers[broker_id] = BrokerState(broker_id, local, proxies, Supervised(spec, on_change=state.changed),
                                         metrics)
    # Side by side: ZooKeeper-mode brokers wait for each other (the controller, the topics).
    start = last if cluster.coordination == "zookeeper" else partial(nursery.start, supervise)
    await gather([partial(start, b.process) for b in brokers.values()], collect=(StartFailed,))
    for broker in brokers.values():
        for dc, proxy in broker.wan.items():
            link = state.plan.link(cluster.datacenter, dc)
            # The single broker's proxy keeps its name (`east-to-west`): the chaos rig and
            # operators' scripts know it.
            name = f"{cluster.name}-to-{dc}" if broker.broker_id == 0 else f"{cluster.name}-{broker.broker_id}-to-{dc}"
            body: dict[str, Any] = {"name": name, "listen": proxy,
                                    "upstream": f"127.0.0.1:{bound[broker.broker_id][dc]}"}
            toxics: list[dict[str, Any]] = []
            if link is not None and state.shared_links:
                body["link"] = {"name": link.name, "upstream": cluster.datacenter}
            elif link is not None:
                toxics = link_toxics(link)
            await _make_link(state.wan_api, body, toxics)
            state.links[name] = (body, toxics)
    first_log = next(iter(brokers.values())).process.spec.log_path
    what = f"cluster {cluster.name}"
    if cluster.coordination == "zookeeper":
        await wait_for_controller(running.bootstrap, set(brokers), what=what, log_path=first_log,
                                  security=running.security)
    await create_topics(running.bootstrap, cluster.topic_plans(), what=what, log_path=first_log,
                        security=running.security)
    if cluster.security is not None and cluster.security.acls is not None:
        await _create_acls(running, [*cluster.security.acls, *mirror_acls(cluster, state.plan.mirrors)], first_log)
    log.info("cluster %s up at %s", cluster.name, running.bootstrap)


async def _prepare_security(state: LaunchState, cluster: ClusterState) -> None:
    """The cluster's certificates, passwords and client files (deploy/launcher/security.py), and
    the launcher's own login. Raises StateDirError: a file there cannot be made or used."""
    directory = state_path(state.state_dir, "security", cluster.plan.name)
    try:
        cluster.secrets = await trio.to_thread.run_sync(prepare_cluster, directory, cluster.plan)
        cluster.security = await trio.to_thread.run_sync(admin_security, cluster.secrets)
    except (OSError, ValueError, CertsError, ConfigError) as exc:
        raise StateDirError(f"cannot prepare the security files of cluster {cluster.plan.name} in {directory}: "
                            f"{exc}") from None


async def _write_scram(cluster: ClusterState) -> None:
    """The users' SCRAM credentials into the cluster's ZooKeeper, before its brokers start.
    Raises StartFailed with ZooKeeper's reason."""
    assert cluster.secrets is not None and cluster.zookeeper is not None
    try:
        connect = cluster.zookeeper_tls_connect or cluster.zookeeper_connect
        await trio.to_thread.run_sync(write_scram_credentials, connect, cluster.secrets, cluster.zookeeper_tls)
    except CredentialsError as exc:
        raise StartFailed(f"zookeeper {cluster.plan.name}", str(exc), cluster.zookeeper.spec.log_path) from exc


async def _create_acls(cluster: ClusterState, acls: list[AclPlan], log_path: Path) -> None:
    """The topology's ACLs and the mirrors' grants, as the launcher's admin user. Raises
    StartFailed with the broker's refusal."""
    what = f"cluster {cluster.plan.name}"
    try:
        with trio.fail_after(TOPICS_TIMEOUT_S):
            async with open_client(cluster.bootstrap, client_id="causeway-up", security=cluster.security,
                                   request_timeout_s=TOPICS_TIMEOUT_S) as client:
                await create_acls(client, acls)
    except (ClientError, KafkaError, trio.TooSlowError) as exc:
        raise StartFailed(what, f"cannot create its ACLs: {exc or 'timed out'}", log_path) from exc


async def _start_zookeeper(state: LaunchState, cluster: ClusterState, last: StartLast) -> None:
    """The cluster's own ZooKeeper, one node (`causeway zookeeper`, supervised like the rest),
    before its brokers. Its client port is allocated once, so a restart keeps the address; the
    cluster's chroot (/<cluster>) separates its znodes should clusters ever share an ensemble."""
    name = cluster.plan.name
    directory = state_path(state.state_dir, "zookeeper", name)
    argv = _cli("zookeeper", "--nodes", "1", "--data-dir", str(directory), "--port", str(free_port()))
    secure_port = None
    if cluster.plan.security is not None and cluster.plan.security.zookeeper == "SSL":
        secure_port = free_port()
        argv += ["--tls", "--secure-port", str(secure_port)]
    cluster.zookeeper = Supervised(_spec(state.state_dir, f"zookeeper {name}", argv,
                                         state_path(state.state_dir, "logs", f"{name}-zookeeper.log"),
                                         ZOOKEEPER_READY),
                                   on_change=state.changed)
    ready = await last(cluster.zookeeper)
    match = ZOOKEEPER_READY.match(ready)
    assert match is not None  # the supervisor matched this line already
    cluster.zookeeper_connect = f"{match.group(1)}/{name}"
    if secure_port is not None:
        # The ensemble made them before it said ready; the brokers log in with the client one.
        cluster.zookeeper_tls = ZookeeperCertificates(directory / "tls")
        cluster.zookeeper_tls_connect = f"127.0.0.1:{secure_port}/{name}"
        log.info("cluster %s: ZooKeeper at %s, TLS at %s (znodes with ACLs)", name, cluster.zookeeper_connect,
                 cluster.zookeeper_tls_connect)
        return
    log.info("cluster %s: ZooKeeper at %s", name, cluster.zookeeper_connect)


async def _make_link(api: str, body: dict[str, Any], toxics: list[dict[str, Any]]) -> None:
    proxy = await trio.to_thread.run_sync(partial(WanClient(api).create_proxy, **body))
    await trio.to_thread.run_sync(proxy.add_toxics, toxics)


async def _make_shared_links(state: LaunchState) -> None:
    """Every link of the plan as one shared link on the emulator, before any proxy joins it. A
    real Toxiproxy has no links (404): then each proxy gets the link's toxics instead, and the
    bandwidth is per connection, as Toxiproxy shapes it."""
    client = WanClient(state.wan_api)
    for link in state.plan.links:
        body = link_body(link)
        try:
            await trio.to_thread.run_sync(client.create_link, body)
        except WanApiError as exc:
            if exc.status != 404:
                raise
            state.shared_links = False
            log.warning("the WAN API at %s has no shared links (a real Toxiproxy?): each proxy gets its link's "
                        "latency and bandwidth as toxics of its own, so the bandwidth is per connection and "
                        "loss and reorder are not applied", state.wan_api)
            return
        state.wan_links.append(body)


async def _restore_links(state: LaunchState, wan: Supervised) -> None:
    """The emulator's `on_ready`: a new emulator process has no links or proxies, so make every
    one made so far again, toxics included (none on the first start). Raising makes the
    supervisor stop this emulator and start another."""
    if not state.links and not state.wan_links:
        return
    match = WAN_READY.match(wan.ready_line)
    assert match is not None  # the supervisor matched this line already
    for link in state.wan_links:
        await trio.to_thread.run_sync(WanClient(match.group(1)).create_link, link)
    for body, toxics in state.links.values():
        await _make_link(match.group(1), body, toxics)
    log.warning("WAN emulator restarted (pid %s): its %d proxies and their toxics made again",
                wan.pid, len(state.links))
