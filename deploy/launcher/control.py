"""`causeway status` and `causeway down`: read the state dir, check health, stop everything."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import struct
import urllib.request
from pathlib import Path
from typing import Any

from broker.protocol.api import ApiKey
from broker.protocol.headers import RequestHeader, encode_request_header
from deploy.launcher.launch import STATE_FILE

__all__ = ["alive", "broker_answers", "read_state", "status", "stop"]

STOP_TIMEOUT_S = 60.0


def read_state(state_dir: Path) -> dict[str, Any] | None:
    try:
        loaded: dict[str, Any] = json.loads((state_dir / STATE_FILE).read_text())
        return loaded
    except FileNotFoundError:
        return None


def alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie has exited; it only waits for a parent that may never reap it (an orphan of `up -d`).
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def broker_answers(address: str, timeout_s: float = 2.0) -> bool:
    """Whether a Kafka broker at `address` answers an ApiVersions v0 request."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
            body = encode_request_header(RequestHeader(ApiKey.API_VERSIONS, 0, 1, "causeway-status"), 1)
            sock.sendall(struct.pack(">i", len(body)) + body)
            head = sock.recv(8)
            return len(head) == 8 and struct.unpack(">ii", head)[1] == 1
    except OSError:
        return False


def status(state_dir: Path) -> dict[str, Any]:
    """The status document `causeway status --json` prints."""
    state = read_state(state_dir)
    if state is None:
        return {"running": False, "clusters": {}, "mirrors": {}, "wan": {}}
    clusters = {}
    for name, cluster in state["clusters"].items():
        brokers = [{"id": b["id"], "pid": b["pid"], "restarts": b.get("restarts", 0)} for b in cluster["brokers"]]
        healthy = all(alive(b["pid"]) for b in brokers) and broker_answers(cluster["bootstrap"])
        clusters[name] = {"datacenter": cluster["datacenter"], "bootstrap": cluster["bootstrap"],
                          "wan": cluster.get("wan", {}), "healthy": healthy, "brokers": brokers}
    return {
        "name": state["name"],
        "running": alive(state["pid"]),
        "pid": state["pid"],
        "clusters": clusters,
        "mirrors": {name: _mirror_status(m) for name, m in state.get("mirrors", {}).items()},
        "wan": {"api": state["wan"]["api"], "pid": state["wan"]["pid"],
                "healthy": alive(state["wan"]["pid"]) if state["wan"]["pid"] else _answers_http(state["wan"]["api"])},
    }


def _mirror_status(mirror: dict[str, Any]) -> dict[str, Any]:
    """What the launcher knows of a mirror, with what the daemon last reported of itself."""
    out = {k: mirror[k] for k in ("source", "target", "pid", "restarts", "log")}
    out["alive"] = alive(mirror["pid"])
    try:
        report = json.loads(Path(mirror["status_file"]).read_text())
    except (OSError, ValueError, KeyError):
        report = None
    if report is not None:
        out.update(state=report["state"], lag=report["lag"], records=report["records"],
                   max_latency_ms=report["max_latency_ms"], problems=report["problems"],
                   topics=report["topics"], updated_ms=report["updated_ms"],
                   partitions=[{k: p[k] for k in ("topic", "partition", "remote_topic", "position", "source_end",
                                                  "lag", "latency_ms", "error")} for p in report["partitions"]])
    return out


def _answers_http(api: str) -> bool:
    """Whether a Toxiproxy API (one we did not start) answers GET /version."""
    try:
        with urllib.request.urlopen(f"http://{api}/version", timeout=2) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


def _wait_exit(pid: int, timeout_s: float) -> bool:
    """Wait for a process that is not our child to exit (pidfd: no polling)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        ready, _, _ = select.select([fd], [], [], timeout_s)
        return bool(ready) or not alive(pid)
    finally:
        os.close(fd)


def stop(state_dir: Path) -> list[str]:
    """Stop the launcher and everything it started; returns what was stopped, by name."""
    state = read_state(state_dir)
    if state is None:
        return []
    stopped = []
    children = [(f"mirror {n}", m["pid"]) for n, m in state.get("mirrors", {}).items()]
    children += [(f"broker {n}", b["pid"]) for n, c in state["clusters"].items() for b in c["brokers"]]
    children.append(("wan emulator", state["wan"]["pid"]))
    launcher = state["pid"]
    if alive(launcher):
        os.kill(launcher, signal.SIGTERM)
        if not _wait_exit(launcher, STOP_TIMEOUT_S):
            os.kill(launcher, signal.SIGKILL)
            _wait_exit(launcher, 5)
        stopped.append(f"launcher (pid {launcher})")
    # Whatever outlived the launcher (it was killed, or crashed) is stopped directly.
    for name, pid in children:
        if alive(pid):
            os.kill(pid, signal.SIGTERM)
            if not _wait_exit(pid, STOP_TIMEOUT_S):
                os.kill(pid, signal.SIGKILL)
                _wait_exit(pid, 5)
            stopped.append(f"{name} (pid {pid})")
    (state_dir / STATE_FILE).unlink(missing_ok=True)
    return stopped
