"""One ZooKeeper server process (a JVM): its files, its start, its readiness, its stop.

Plain blocking code, shared by the test fixture (tests/support/zookeeper.py, which waits with
`wait_serving`) and the trio ensemble (deploy/zookeeper/ensemble.py, which calls `spawn` on the
trio thread and polls `check` from a worker thread).

The JVM dies with the process that started it: it is started by `deploy.child_process` with a
parent-death signal, which fires when the *thread* that forked exits, so `spawn` must be called
on a thread that lives as long as the node should (the main thread or the trio thread).
Its stdout and stderr go to `zookeeper.log` in the node's dir, next to `zoo.cfg` and `data/`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from deploy.child_process import ChildOwner, ChildProcess, log_tail
from deploy.zookeeper.config import HOST, JAVA, ZOOKEEPER_JAR, NodePorts, Tuning, java_argv, write_node_files
from deploy.zookeeper.four_letter import ServerState, srvr

__all__ = ["STOP_TIMEOUT_S", "NodeFailed", "ZkNode", "ZooKeeperMissing", "check_installed"]

STOP_TIMEOUT_S = 15.0  # SIGTERM, then SIGKILL: ZooKeeper stops in well under a second
# What a node's log says when one of its ports was taken (the client port in the JVM's
# BindException; the quorum port when it becomes leader; the election port in its listener).
_BIND_FAILURES = ("BindException", "Address already in use", "Couldn't bind to", "Unable to bind")


class ZooKeeperMissing(RuntimeError):
    """The Debian package is not installed."""


class NodeFailed(RuntimeError):
    """A node exited (or could not be started) before it served; `bind_failed` when a port it
    was given was taken, which the caller retries with other ports."""

    def __init__(self, message: str, *, bind_failed: bool = False) -> None:
        super().__init__(message)
        self.bind_failed = bind_failed


def check_installed() -> None:
    """Raise ZooKeeperMissing unless the ZooKeeper jar is where Debian's package puts it."""
    if not ZOOKEEPER_JAR.is_file():
        raise ZooKeeperMissing(f"ZooKeeper is not installed ({ZOOKEEPER_JAR} is missing): run `make system-deps` "
                               "as root, or `apt-get install zookeeper`")


@dataclass
class ZkNode(ChildOwner):
    """One node; `peers` lists every (id, ports) of its ensemble, empty for a lone node."""

    node_id: int
    node_dir: Path
    ports: NodePorts
    peers: tuple[tuple[int, NodePorts], ...] = ()
    tuning: Tuning = field(default_factory=Tuning)
    java: str = JAVA
    proc: ChildProcess | None = None
    starts: int = 0
    _last: ChildProcess | None = field(default=None, repr=False)  # the running or last JVM: its log lines
    # SIGTERM, then SIGKILL after this: ZooKeeper stops in well under a second (exit 143 on SIGTERM)
    stop_timeout_s: ClassVar[float] = STOP_TIMEOUT_S

    @property
    def log_path(self) -> Path:
        return self.node_dir / "zookeeper.log"

    @property
    def data_dir(self) -> Path:
        return self.node_dir / "data"

    @property
    def address(self) -> str:
        return f"{HOST}:{self.ports.client}"

    @property
    def secure_address(self) -> str | None:
        """HOST:PORT of the TLS client port; None without TLS."""
        return None if self.ports.secure_client is None else f"{HOST}:{self.ports.secure_client}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def write_files(self) -> Path:
        """zoo.cfg and myid, for the node's current ports (blocking file IO)."""
        return write_node_files(self.node_dir, node_id=self.node_id, ports=self.ports, peers=self.peers,
                                tuning=self.tuning)

    def spawn(self, *, write_files: bool = True) -> None:
        """Start the JVM on the calling thread (see the module docstring); returns at once.
        `write_files` False: the caller wrote zoo.cfg and myid already (off the trio thread)."""
        if self.running():
            raise RuntimeError(f"zookeeper node {self.node_id} is already running (pid {self.pid})")
        check_installed()
        cfg = self.write_files() if write_files else self.node_dir / "zoo.cfg"
        argv = java_argv(cfg, ensemble=bool(self.peers), java=self.java)
        try:
            self.proc = self._last = ChildProcess.start(f"zookeeper node {self.node_id}", argv, log_path=self.log_path,
                                                        stdout="log", cwd=self.node_dir, die_with_parent=True)
        except OSError as exc:
            raise NodeFailed(f"zookeeper node {self.node_id}: cannot run {argv[0]!r}: {exc}") from exc
        self.starts += 1

    def own_log(self) -> str:
        """What the running (or last) JVM wrote to the log."""
        return "" if self._last is None else self._last.own_log()

    def failure(self, what: str) -> NodeFailed:
        """A NodeFailed naming the node, what happened and its log's last lines."""
        own = self.own_log()
        bind_failed = any(marker in own for marker in _BIND_FAILURES)
        ports = f"client {self.ports.client}, quorum {self.ports.quorum}, election {self.ports.election}"
        if self.ports.secure_client is not None:
            ports += f", secure client {self.ports.secure_client}"
        return NodeFailed(f"zookeeper node {self.node_id} ({ports}): {what}\n--- last lines of {self.log_path} ---\n"
                          f"{log_tail(self.log_path)}", bind_failed=bind_failed)

    def bind_failed(self) -> bool:
        """Whether the running JVM logged that a port was taken (it may linger instead of exiting)."""
        own = self.own_log()
        return any(marker in own for marker in _BIND_FAILURES)

    def check(self) -> ServerState | None:
        """One readiness probe: the node's `srvr` state, None while it does not serve yet.
        Raises NodeFailed when the JVM has exited or logged that a port was taken."""
        if self.proc is None:
            raise NodeFailed(f"zookeeper node {self.node_id} is not running")
        code = self.proc.poll()
        if code is not None:
            raise self.failure(f"exited with {code} before it served")
        state = srvr(HOST, self.ports.client, timeout_s=1.0)
        if state is None and self.bind_failed():
            raise self.failure("a port was taken")
        return state

    def wait_serving(self, timeout_s: float, *, modes: Sequence[str] = ()) -> ServerState:
        """Poll `check` until the node serves (in one of `modes`, when given); bounded by
        `timeout_s`, after which the node is killed and NodeFailed raised."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                state = self.check()
            except NodeFailed:
                self.kill()
                raise
            if state is not None and (not modes or state.mode in modes):
                return state
            if time.monotonic() >= deadline:
                self.kill()
                raise self.failure(f"not serving after {timeout_s} s")
            time.sleep(0.05)

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.log_path, lines)
