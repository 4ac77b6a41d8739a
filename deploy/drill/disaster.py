"""The disasters a drill injects: the primary's brokers SIGKILLed, or the WAN link between the
two sites cut through the emulator's Toxiproxy API (and put back)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from deploy.launcher.control import owned, read_state
from deploy.launcher.state_file import ClusterRecord, LaunchStateFile
from deploy.wan.client import WanClient

__all__ = ["DisasterError", "kill_brokers", "link_proxies", "set_link"]


class DisasterError(RuntimeError):
    pass


def kill_brokers(state_dir: Path, cluster: str) -> list[int]:
    """SIGKILL every broker of `cluster` that the state file records and that is still that very
    process (never a pid reused by someone else). Returns the pids killed. The launcher restarts
    them after its backoff, as a machine that reboots would."""
    state = read_state(state_dir)
    if state is None or cluster not in state.clusters:
        raise DisasterError(f"{state_dir}: no running cluster {cluster!r}")
    killed = []
    for broker in state.clusters[cluster].brokers:
        identity = owned(broker, state_dir)
        if identity is not None:
            os.kill(identity.pid, signal.SIGKILL)
            killed.append(identity.pid)
    if not killed:
        raise DisasterError(f"cluster {cluster}: none of its brokers is running")
    return killed


def link_proxies(state: LaunchStateFile, source: str, target: str) -> list[str]:
    """The emulator's proxies that carry traffic between the datacenters of clusters `source`
    and `target`: those of the link between the two (the emulator's own links), or, on a real
    Toxiproxy (no links), those listening where one cluster is advertised to the other."""
    clusters: dict[str, ClusterRecord] = state.clusters
    dcs = {clusters[source].datacenter, clusters[target].datacenter}
    listens = {a for name in (source, target) for a in ",".join(clusters[name].wan.values()).split(",") if a}
    found = []
    for name, body in WanClient(state.wan.api, timeout_s=5).proxies().items():
        link = body.get("link") if isinstance(body, dict) else None
        if isinstance(link, dict) and set(str(link.get("name", "")).split("~")) == dcs:
            found.append(name)
        elif isinstance(body, dict) and body.get("listen") in listens:
            found.append(name)
    if not found:
        raise DisasterError(f"the WAN emulator at {state.wan.api} has no proxy between {source} and {target}")
    return sorted(found)


def set_link(api: str, proxies: list[str], *, enabled: bool) -> None:
    """Cut (`enabled` False) or restore the proxies: a cut proxy closes its connections and
    refuses new ones, as a partitioned WAN link would."""
    client = WanClient(api, timeout_s=5)
    for name in proxies:
        proxy = client.proxy(name)
        proxy.enable() if enabled else proxy.disable()
