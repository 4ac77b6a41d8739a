"""A managed ZooKeeper ensemble of 1 or 3 nodes on this machine, for trio code.

    async with open_ensemble(directory, nodes=3) as ensemble:   # deploy.zookeeper.ensemble
        ensemble.connect          # "127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3" (zookeeper.connect)
        await ensemble.kill(ensemble.leader_id)    # SIGKILL one node
        await ensemble.wait_ready()                # the others elected a new leader
        await ensemble.start_node(node_id)         # it rejoins

or `ensemble = await nursery.start(run_ensemble, directory)`: ready (every node serves, and
an ensemble of three has exactly one leader) when `started` reports it; stopped (SIGTERM, a
bounded wait, SIGKILL) when cancelled.

Layout: `<directory>/node-<id>/` holds the node's zoo.cfg, its data/ (with myid) and its
zookeeper.log. ZooKeeper cannot bind port 0 and say which port it got, so ports are picked free
here; a node whose port another process took in between fails to bind, and the whole start is
tried again with fresh ports, at most START_ATTEMPTS times. A client port the caller fixed is
checked first and never changed. Every wait is bounded: a JVM that exits or does not serve is
a NodeFailed naming the node with its log's last lines.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import trio

from broker.tasks import leaves
from deploy.child_process import ChildProcess, log_tail
from deploy.supervisor import RESTART_BACKOFF, STABLE_AFTER_S
from deploy.zookeeper.config import HOST, JAVA, NodePorts, Tuning, pick_free_port
from deploy.zookeeper.four_letter import ServerState
from deploy.zookeeper.node import STOP_TIMEOUT_S, NodeFailed, ZkNode, ZooKeeperMissing, check_installed

__all__ = ["START_ATTEMPTS", "START_TIMEOUT_S", "Ensemble", "open_ensemble", "run_ensemble"]

log = logging.getLogger("causeway.zookeeper")

START_ATTEMPTS = 3
START_TIMEOUT_S = 60.0  # a lone node serves in about half a second, three elect in about two
POLL_INTERVAL_S = 0.05
SIZES = (1, 3)  # a quorum of two out of three survives one node; 2 would survive none


@dataclass
class Ensemble:
    """A running ensemble; `connect` is its zookeeper.connect string (no chroot)."""

    nodes: tuple[ZkNode, ...]
    start_timeout_s: float = START_TIMEOUT_S
    supervise: bool = False  # restart a node that exits on its own (the CLI and `causeway up`)
    _nursery: trio.Nursery | None = field(default=None, repr=False)
    _down: set[int] = field(default_factory=set, repr=False)  # node ids stopped on purpose
    _failures: dict[int, int] = field(default_factory=dict, repr=False)  # restarts per node, for backoff
    # Node ids being started: an exit now is reported by the start that waits for them.
    _starting: set[int] = field(default_factory=set, repr=False)
    _spawned_at: dict[int, float] = field(default_factory=dict, repr=False)  # trio time of each node's start

    @property
    def connect(self) -> str:
        return ",".join(node.address for node in self.nodes)

    @property
    def secure_connect(self) -> str | None:
        """The zookeeper.connect string of the TLS client ports; None unless the ensemble has TLS."""
        secure = [node.secure_address for node in self.nodes]
        return None if None in secure else ",".join(str(address) for address in secure)

    def node(self, node_id: int) -> ZkNode:
        for node in self.nodes:
            if node.node_id == node_id:
                return node
        raise KeyError(f"no zookeeper node {node_id} (nodes: {[n.node_id for n in self.nodes]})")

    async def states(self) -> dict[int, ServerState | None]:
        """Every node's `srvr` answer (None: down or not serving)."""
        result: dict[int, ServerState | None] = {}
        for node in self.nodes:
            if not node.running():
                result[node.node_id] = None
                continue
            try:
                result[node.node_id] = await trio.to_thread.run_sync(node.check)
            except NodeFailed:
                result[node.node_id] = None
        return result

    async def leader_id(self) -> int | None:
        """The node that says it leads (or the lone standalone node); None when none does."""
        for node_id, state in (await self.states()).items():
            if state is not None and state.mode in ("leader", "standalone"):
                return node_id
        return None

    async def wait_ready(self, timeout_s: float | None = None) -> dict[int, ServerState]:
        """Until every running node serves and, in an ensemble, exactly one leads; bounded.
        A node that exits meanwhile raises NodeFailed at once."""
        live = [node for node in self.nodes if node.node_id not in self._down]
        return await _wait_serving(live, ensemble=len(self.nodes) > 1,
                                   timeout_s=self.start_timeout_s if timeout_s is None else timeout_s)

    async def kill(self, node_id: int) -> None:
        """SIGKILL one node (a crash); it stays down until `start_node`."""
        node = self.node(node_id)
        self._down.add(node_id)
        await trio.to_thread.run_sync(node.kill)
        log.info("zookeeper node %d killed", node_id)

    async def stop_node(self, node_id: int) -> int:
        """SIGTERM one node (bounded wait, then SIGKILL); it stays down until `start_node`."""
        node = self.node(node_id)
        self._down.add(node_id)
        with trio.CancelScope(shield=True):
            code = await trio.to_thread.run_sync(node.stop)
        log.info("zookeeper node %d stopped (exit %d)", node_id, code)
        return code

    async def start_node(self, node_id: int) -> ServerState:
        """Start a node stopped or killed before, on its ports and data; returns once the
        ensemble is ready again with it."""
        node = self.node(node_id)
        self._failures.pop(node_id, None)
        self._starting.add(node_id)
        try:
            await self._spawn(node)
            self._down.discard(node_id)
            states = await self.wait_ready()
        except BaseException:
            self._down.add(node_id)
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(node.kill)
            raise
        finally:
            self._starting.discard(node_id)
        return states[node_id]

    async def restart(self, node_id: int) -> ServerState:
        """stop_node then start_node."""
        await self.stop_node(node_id)
        return await self.start_node(node_id)

    async def _spawn(self, node: ZkNode) -> None:
        await trio.to_thread.run_sync(node.write_files)
        # On the trio thread, which outlives every node: the parent-death signal is bound to it.
        node.spawn(write_files=False)
        self._spawned_at[node.node_id] = trio.current_time()
        assert self._nursery is not None and node.proc is not None
        self._nursery.start_soon(self._watch, node, node.proc)

    async def _watch(self, node: ZkNode, jvm: ChildProcess) -> None:
        """Wait (through a pidfd, no polling) for this JVM to exit; report an exit nobody asked
        for and, when supervising, start the node again with backoff."""
        code = await jvm.wait_exited()
        if node.node_id in self._down or node.node_id in self._starting or node.proc is not jvm:
            return  # stopped on purpose, reported by the start waiting for it, or already replaced
        pid = jvm.pid
        log.warning("zookeeper node %d (pid %d) exited with %s\n--- last lines of %s ---\n%s", node.node_id, pid,
                    code, node.log_path, log_tail(node.log_path, 10))
        if not self.supervise:
            return
        if trio.current_time() - self._spawned_at.get(node.node_id, 0.0) > STABLE_AFTER_S:
            self._failures[node.node_id] = 0  # it had been up a while: not a crash loop
        while True:
            failures = self._failures[node.node_id] = self._failures.get(node.node_id, 0) + 1
            await trio.sleep(RESTART_BACKOFF.delay(failures))
            if node.node_id in self._down or (node.proc is not None and node.proc is not jvm):
                return  # stopped, or started by someone else, meanwhile
            log.info("zookeeper node %d: starting again", node.node_id)
            node.proc = None
            try:
                await self._spawn(node)  # its new watcher reports and handles the next exit
            except NodeFailed as exc:
                log.warning("%s", exc)
                continue  # could not even start (java gone?): again, after a longer pause
            return

    async def _stop_all(self) -> None:
        """SIGTERM every node at once, bounded, then SIGKILL; shielded so cancellation cannot
        orphan a JVM."""
        with trio.CancelScope(shield=True):
            self._down.update(node.node_id for node in self.nodes)
            async with trio.open_nursery() as nursery:
                for node in self.nodes:
                    if node.proc is not None:
                        nursery.start_soon(partial(trio.to_thread.run_sync, node.stop, STOP_TIMEOUT_S))


async def _wait_serving(nodes: list[ZkNode], *, ensemble: bool, timeout_s: float) -> dict[int, ServerState]:
    states: dict[int, ServerState | None] = {}
    with trio.move_on_after(timeout_s):
        while True:
            for node in nodes:
                states[node.node_id] = await trio.to_thread.run_sync(node.check)  # raises if it died
            served = {node_id: state for node_id, state in states.items() if state is not None}
            leaders = [node_id for node_id, state in served.items() if state.mode == "leader"]
            if len(served) == len(nodes) and (not ensemble or len(leaders) == 1):
                return served
            await trio.sleep(POLL_INTERVAL_S)
    waiting = [node for node in nodes if states.get(node.node_id) is None] or nodes
    summary = ", ".join(f"node {n}: {s.mode if s else 'not serving'}" for n, s in states.items())
    raise waiting[0].failure(f"the ensemble is not ready after {timeout_s} s ({summary})")


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as ZooKeeper binds it
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def _pick_ports(count: int, client_port: int | None, pick_port: Callable[[], int], *,
                secure: bool = False, secure_client_port: int | None = None) -> list[NodePorts]:
    """Ports for `count` nodes, all distinct: client ports from `client_port` up when given;
    with `secure`, a TLS client port each too, from `secure_client_port` up when given."""
    taken: set[int] = set()
    if client_port is not None:
        taken.update(range(client_port, client_port + count))
    if secure_client_port is not None:
        taken.update(range(secure_client_port, secure_client_port + count))

    def fresh() -> int:
        for _ in range(100):
            port = pick_port()
            if port not in taken:
                taken.add(port)
                return port
        raise RuntimeError("no free port found")

    return [NodePorts(client=client_port + i if client_port is not None else fresh(),
                      quorum=fresh() if count > 1 else 0, election=fresh() if count > 1 else 0,
                      secure_client=(secure_client_port + i if secure_client_port is not None else fresh())
                      if secure else None)
            for i in range(count)]


@contextmanager
def _start_errors_unwrapped() -> Iterator[None]:
    """A start failure leaves the nursery as a group of one: raise it by itself, so callers
    catch NodeFailed as this module documents it."""
    try:
        yield
    except BaseExceptionGroup as group:
        found = leaves(group)
        if len(found) == 1 and isinstance(found[0], NodeFailed | ZooKeeperMissing):
            raise found[0] from None
        raise


async def run_ensemble(directory: Path, *, nodes: int = 1, client_port: int | None = None,
                       secure_client_port: int | None = None, tuning: Tuning | None = None, java: str = JAVA,
                       start_timeout_s: float = START_TIMEOUT_S, supervise: bool = False,
                       pick_port: Callable[[], int] = pick_free_port,
                       task_status: trio.TaskStatus[Ensemble] = trio.TASK_STATUS_IGNORED) -> None:
    """Start the ensemble, report it through `task_status.started(Ensemble)` once ready, and
    keep it until cancelled, then stop every node. `client_port` fixes the first node's client
    port (the others follow it), `secure_client_port` its TLS client port (with `tuning.tls`);
    `pick_port` picks a free port (tests give a colliding one)."""
    if nodes not in SIZES:
        raise ValueError(f"a ZooKeeper ensemble here has 1 or 3 nodes, not {nodes}")
    tuning = tuning or Tuning()
    if secure_client_port is not None and tuning.tls is None:
        raise ValueError("a secure client port needs TLS (Tuning.tls)")
    check_installed()
    for first, what in ((client_port, "client"), (secure_client_port, "secure client")):
        if first is not None:
            busy = [p for p in range(first, first + nodes) if not _port_free(p)]
            if busy:
                raise NodeFailed(f"ZooKeeper {what} port {busy[0]} is already in use on {HOST}")
    with _start_errors_unwrapped():
        await _run(directory, nodes, (client_port, secure_client_port), tuning, java, start_timeout_s, supervise,
                   pick_port, task_status)


async def _run(directory: Path, nodes: int, fixed_ports: tuple[int | None, int | None], tuning: Tuning, java: str,
               start_timeout_s: float, supervise: bool, pick_port: Callable[[], int],
               task_status: trio.TaskStatus[Ensemble]) -> None:
    client_port, secure_client_port = fixed_ports
    async with trio.open_nursery() as nursery:
        ensemble: Ensemble | None = None
        try:
            for attempt in range(1, START_ATTEMPTS + 1):
                ports = _pick_ports(nodes, client_port, pick_port, secure=tuning.tls is not None,
                                    secure_client_port=secure_client_port)
                peers = tuple((i + 1, p) for i, p in enumerate(ports)) if nodes > 1 else ()
                members = tuple(ZkNode(i + 1, directory / f"node-{i + 1}", p, peers, tuning, java)
                                for i, p in enumerate(ports))
                ensemble = Ensemble(members, start_timeout_s=start_timeout_s, supervise=supervise, _nursery=nursery)
                ensemble._starting.update(node.node_id for node in members)
                for node in ensemble.nodes:
                    log.info("zookeeper node %d starting: client %s, dir %s", node.node_id, node.address, node.node_dir)
                    await ensemble._spawn(node)
                try:
                    states = await ensemble.wait_ready()
                except NodeFailed as exc:
                    await ensemble._stop_all()
                    if not exc.bind_failed or attempt == START_ATTEMPTS:
                        raise
                    log.warning("%s (attempt %d of %d); picking new ports", str(exc).splitlines()[0], attempt,
                                START_ATTEMPTS)
                    continue
                modes = ", ".join(f"node {n} {s.mode}" for n, s in sorted(states.items()))
                log.info("zookeeper ready: %s%s (%s)", ensemble.connect,
                         f", TLS {ensemble.secure_connect}" if ensemble.secure_connect else "", modes)
                ensemble._starting.clear()
                task_status.started(ensemble)
                await trio.sleep_forever()
        finally:
            if ensemble is not None:
                await ensemble._stop_all()
            nursery.cancel_scope.cancel()  # the exit watchers


@asynccontextmanager
async def open_ensemble(directory: Path, **options: object) -> AsyncIterator[Ensemble]:
    """`run_ensemble` as an async context manager: the ensemble, ready; stopped on exit."""
    with _start_errors_unwrapped():
        async with trio.open_nursery() as nursery:
            ensemble: Ensemble = await nursery.start(partial(run_ensemble, directory, **options))  # type: ignore[arg-type]
            try:
                yield ensemble
            finally:
                nursery.cancel_scope.cancel()

