"""A real single-node ZooKeeper for a test: its own free port, its own data dir, its own JVM.

    def test_x(zookeeper: ZooKeeperServer) -> None:      # the fixture in tests/conftest.py
        zk = KazooClient(hosts=zookeeper.connect)        # "127.0.0.1:PORT"
        ...
        zookeeper.kill()      # SIGKILL: a crash
        zookeeper.restart()   # the same port and data: clients reconnect, sessions may survive

    with zookeeper_server(tmp_path / "zk") as server:   # the same, as a context manager
        ...

Plain blocking code, usable from sync and trio tests alike (start takes about half a second).
The node is Debian's ZooKeeper run by deploy/zookeeper (ZooKeeperServerMain, a small JVM); its
log is `<dir>/zookeeper.log`, shown in every start failure. For 3-node ensembles and trio code
use `deploy.zookeeper.open_ensemble`.

Tuned for tests: tickTime 500 ms (so sessions as short as 1 s are allowed; the maximum stays
60 s, so a broker's 18 s default is honoured), no fsync (a JVM killed by a test loses nothing
the kernel already has).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from deploy.zookeeper.config import NodePorts, Tuning, pick_free_port
from deploy.zookeeper.four_letter import ServerState, srvr
from deploy.zookeeper.node import NodeFailed, ZkNode

__all__ = ["START_TIMEOUT_S", "TEST_TUNING", "ZooKeeperServer", "zookeeper_server"]

START_TIMEOUT_S = 30.0
START_ATTEMPTS = 3  # a port another process took between pick and bind: pick again, this often
TEST_TUNING = Tuning(tick_time_ms=500, force_sync=False, prealloc_kb=1024)


def _fresh_ports(tuning: Tuning) -> NodePorts:
    # A lone node listens only on its client port (and its TLS one); the other two are never bound.
    return NodePorts(client=pick_free_port(), quorum=0, election=0,
                     secure_client=pick_free_port() if tuning.tls is not None else None)


@dataclass
class ZooKeeperServer(ZkNode):
    """One ZooKeeper node (a ZkNode that starts as a test needs); `connect` is its
    zookeeper.connect string, "127.0.0.1:PORT"."""

    @property
    def connect(self) -> str:
        return self.address

    @property
    def port(self) -> int:
        return self.ports.client

    @property
    def secure_connect(self) -> str:
        """"127.0.0.1:PORT" of the TLS client port (a node started with `Tuning.tls`)."""
        assert self.secure_address is not None, "this node has no TLS client port"
        return self.secure_address

    def start(self) -> ZooKeeperServer:
        """Start the node and return once it serves. A first start whose port was taken meanwhile
        picks another; a restart keeps its port (clients know it) and fails instead."""
        first = self.starts == 0
        for attempt in range(1, START_ATTEMPTS + 1):
            self.spawn()
            try:
                self.wait_serving(START_TIMEOUT_S)
                return self
            except NodeFailed as exc:
                if not (first and exc.bind_failed and attempt < START_ATTEMPTS):
                    raise
                self.ports = _fresh_ports(self.tuning)
        raise AssertionError("unreachable")

    def state(self) -> ServerState | None:
        """The node's `srvr` answer; None when it does not answer."""
        return srvr("127.0.0.1", self.port)

    def restart(self) -> ZooKeeperServer:
        """Stop (SIGTERM) if running, then start on the same port with the same data."""
        self.stop()
        return self.start()


@contextmanager
def zookeeper_server(directory: Path, *, tuning: Tuning = TEST_TUNING) -> Iterator[ZooKeeperServer]:
    """A running single-node ZooKeeper in `directory` (zoo.cfg, data/, zookeeper.log); killed
    on exit (a test's ZooKeeper has nothing to flush)."""
    server = ZooKeeperServer(node_id=1, node_dir=directory, ports=_fresh_ports(tuning), tuning=tuning)
    try:
        yield server.start()
    finally:
        server.kill()
