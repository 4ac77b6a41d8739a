"""Bring a launch plan up on this machine, keep it up, and describe it in the state dir.

One WAN emulator serves every link. Each cluster gets a broker with a LOCAL listener for its own
datacenter and one WAN_<DC> listener per remote datacenter that reads it; that listener advertises
the address of a proxy on the link, so a client in the remote datacenter reaches the broker only
through the emulated WAN. Every port is allocated once, before anything starts, so a restarted
process comes back on the same address. A restarted emulator starts empty: the launcher makes
its proxies and toxics again before the emulator counts as up (the supervisor's `on_ready`).

Every process started here dies with the launcher (see deploy/supervisor.py) and carries
`CAUSEWAY_STATE_DIR` in its environment; the state file records each one's pid, start time and
command line, so `status` and `down` signal or report only processes that are provably ours.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import sys
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import trio

from broker.atomic_file import write_atomically
from deploy.launcher.plan import ClusterPlan, LaunchPlan, LinkPlan, MirrorPlan, listener_name
from deploy.launcher.state_file import (
    STATE_FORMAT,
    BrokerRecord,
    ClusterRecord,
    LaunchStateFile,
    MirrorRecord,
    ProcessRecord,
    WanRecord,
)
from deploy.process_identity import STATE_DIR_ENV, Identity, identity_of
from deploy.supervisor import ProcessSpec, Supervised, supervise
from deploy.wan.client import WanApiError, WanClient

__all__ = ["STATE_FILE", "LaunchState", "free_port", "link_toxics", "run_plan"]

log = logging.getLogger(__name__)

STATE_FILE = "state.json"
BROKER_READY = re.compile(r"^causeway broker \d+ ready: ")
WAN_READY = re.compile(r"^causeway wan ready: http://([^\s]+)$")
MIRROR_READY = re.compile(r"^causeway mirror ready: ")


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (the kernel's pick for port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "deploy.cli", *args]


@dataclass
class ClusterState:
    plan: ClusterPlan
    bootstrap: str
    wan: dict[str, str]  # remote datacenter -> proxy address its clients use
    broker: Supervised


@dataclass
class MirrorState:
    plan: MirrorPlan
    source_bootstrap: str  # through the WAN link when the source is in another datacenter
    target_bootstrap: str
    config_file: Path
    status_file: Path
    process: Supervised


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
    identity: Identity | None = field(default_factory=lambda: identity_of(os.getpid()))

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
            wan=wan,
            clusters={
                name: ClusterRecord(
                    datacenter=c.plan.datacenter, bootstrap=c.bootstrap, wan=dict(c.wan),
                    brokers=[BrokerRecord(id=0, log=str(c.broker.spec.log_path), **_process(c.broker).model_dump())],
                )
                for name, c in self.clusters.items()
            },
            mirrors={
                name: MirrorRecord(
                    source=m.plan.source, target=m.plan.target,
                    source_bootstrap=m.source_bootstrap, target_bootstrap=m.target_bootstrap,
                    log=str(m.process.spec.log_path), config=str(m.config_file), status_file=str(m.status_file),
                    **_process(m.process).model_dump(),
                )
                for name, m in self.mirrors.items()
            },
        )

    def changed(self, _child: Supervised | None = None) -> None:
        """A child started or exited (the supervisor's `on_change`): save soon, off the loop."""
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


def link_toxics(link: LinkPlan) -> list[dict[str, Any]]:
    toxics: list[dict[str, Any]] = []
    for stream in ("downstream", "upstream"):
        if link.latency_ms or link.jitter_ms:
            toxics.append({"name": f"latency_{stream}", "type": "latency", "stream": stream,
                           "attributes": {"latency": link.latency_ms, "jitter": link.jitter_ms}})
        if link.bandwidth_bytes_per_s:
            toxics.append({"name": f"bandwidth_{stream}", "type": "bandwidth", "stream": stream,
                           "attributes": {"rate": max(1, link.bandwidth_bytes_per_s // 1000)}})
    return toxics


def _broker_spec(
    state_dir: Path, cluster: ClusterPlan, local_port: int, wan_ports: dict[str, tuple[int, int]]
) -> ProcessSpec:
    """The broker command: LOCAL plus one WAN listener per remote datacenter (bound, advertised)."""
    listeners = [f"LOCAL://127.0.0.1:{local_port}"]
    advertised = [f"LOCAL://127.0.0.1:{local_port}"]
    protocols = ["LOCAL:PLAINTEXT"]
    for dc, (bound, proxy) in wan_ports.items():
        name = listener_name(dc)
        listeners.append(f"{name}://127.0.0.1:{bound}")
        advertised.append(f"{name}://127.0.0.1:{proxy}")
        protocols.append(f"{name}:PLAINTEXT")
    overrides = {
        **cluster.broker_configs,
        "listeners": ",".join(listeners),
        "advertised.listeners": ",".join(advertised),
        "listener.security.protocol.map": ",".join(protocols),
        "inter.broker.listener.name": "LOCAL",
    }
    argv = _cli("broker", "--data-dir", str(state_dir / "data" / cluster.name))
    for key, value in overrides.items():
        argv += ["--override", f"{key}={value}"]
    for topic, partitions in cluster.topics.items():
        argv += ["--topic", f"{topic}:{partitions}"]
    return _spec(state_dir, f"broker {cluster.name}", argv, state_dir / "logs" / f"{cluster.name}-broker-0.log",
                 BROKER_READY)


async def _mirror_state(state: LaunchState, mirror: MirrorPlan) -> MirrorState:
    """The mirror runs in the target's datacenter: it reads the source through the WAN link's
    proxy (the source's WAN listener for that datacenter) and writes to the target locally."""
    source, target = state.clusters[mirror.source], state.clusters[mirror.target]
    source_bootstrap = source.wan.get(target.plan.datacenter, source.bootstrap)
    directory = state.state_dir / "mirrors"
    directory.mkdir(parents=True, exist_ok=True)
    config_file = directory / f"{mirror.name}.yaml"
    config = {"name": mirror.name,
              "source": {"alias": mirror.source, "bootstrap": source_bootstrap},
              "target": {"alias": mirror.target, "bootstrap": target.bootstrap},
              **mirror.settings}
    text = json.dumps(config, indent=2) + "\n"  # JSON is YAML
    await trio.to_thread.run_sync(write_atomically, config_file, text)
    status_file = directory / f"{mirror.name}.status.json"
    argv = _cli("mirror", "--config", str(config_file), "--status-file", str(status_file))
    log_path = state.state_dir / "logs" / f"mirror-{mirror.name}.log"
    process = Supervised(_spec(state.state_dir, f"mirror {mirror.name}", argv, log_path, MIRROR_READY),
                         on_change=state.changed)
    return MirrorState(mirror, source_bootstrap, target.bootstrap, config_file, status_file, process)


async def run_plan(plan: LaunchPlan, state_dir: Path, *, toxiproxy: str | None = None,
                   task_status: trio.TaskStatus[LaunchState] = trio.TASK_STATUS_IGNORED) -> None:
    """Start the WAN emulator and every cluster, report the LaunchState, supervise until cancelled.

    `toxiproxy` (HOST:PORT of a running Toxiproxy, the real one or ours) is used for the links
    instead of starting an emulator; the proxies made there are removed again on the way out.
    Raises deploy.supervisor.StartFailed naming the process that could not start (after stopping
    everything started before it).
    """
    state_dir.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - once, before anything starts
    state = LaunchState(plan, state_dir)
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
        # Everything this launcher started has stopped (the nursery waited for it): say so.
        (state_dir / STATE_FILE).unlink(missing_ok=True)


async def _run(state: LaunchState, toxiproxy: str | None, task_status: trio.TaskStatus[LaunchState]) -> None:
    plan, state_dir = state.plan, state.state_dir
    async with trio.open_nursery() as nursery:
        nursery.start_soon(state.keep_saved)
        if toxiproxy is not None:
            state.wan_api = toxiproxy
        else:
            state.wan = Supervised(_spec(state_dir, "wan emulator", _cli("wan", "--api", f"127.0.0.1:{free_port()}"),
                                         state_dir / "logs" / "wan.log", WAN_READY),
                                   on_change=state.changed, on_ready=partial(_restore_links, state))
            ready = await nursery.start(supervise, state.wan)
            match = WAN_READY.match(ready)
            assert match is not None
            state.wan_api = match.group(1)
        for cluster in plan.clusters:
            local_port = cluster.port or free_port()
            wan_ports = {dc: (free_port(), free_port()) for dc in cluster.remote_datacenters}
            supervised = Supervised(_broker_spec(state_dir, cluster, local_port, wan_ports),
                                    on_change=state.changed)
            state.clusters[cluster.name] = ClusterState(
                cluster, f"127.0.0.1:{local_port}", {dc: f"127.0.0.1:{proxy}" for dc, (_, proxy) in wan_ports.items()},
                supervised)
            await nursery.start(supervise, supervised)
            for dc, (bound, proxy) in wan_ports.items():
                link = plan.link(cluster.datacenter, dc)
                name = f"{cluster.name}-to-{dc}"
                body = {"name": name, "listen": f"127.0.0.1:{proxy}", "upstream": f"127.0.0.1:{bound}"}
                toxics = link_toxics(link) if link is not None else []
                await _make_link(state.wan_api, body, toxics)
                state.links[name] = (body, toxics)
            log.info("cluster %s up at %s", cluster.name, state.clusters[cluster.name].bootstrap)
        for mirror in plan.mirrors:
            state.mirrors[mirror.name] = await _mirror_state(state, mirror)
            await nursery.start(supervise, state.mirrors[mirror.name].process)
            log.info("mirror %s up: %s -> %s", mirror.name, mirror.source, mirror.target)
        await state.save()  # before `up` says ready: `status` and `down` find what runs
        task_status.started(state)


async def _make_link(api: str, body: dict[str, Any], toxics: list[dict[str, Any]]) -> None:
    proxy = await trio.to_thread.run_sync(partial(WanClient(api).create_proxy, **body))
    await trio.to_thread.run_sync(proxy.add_toxics, toxics)


async def _restore_links(state: LaunchState, wan: Supervised) -> None:
    """The emulator's `on_ready`: a new emulator process has no proxies, so make every link
    made so far again, toxics included (none on the first start). Raising makes the supervisor
    stop this emulator and start another."""
    if not state.links:
        return
    match = WAN_READY.match(wan.ready_line)
    assert match is not None  # the supervisor matched this line already
    for body, toxics in state.links.values():
        await _make_link(match.group(1), body, toxics)
    log.warning("WAN emulator restarted (pid %s): its %d proxies and their toxics made again",
                wan.pid, len(state.links))
