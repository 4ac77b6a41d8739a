"""Start and stop an Apache Kafka 4.x cluster of several KRaft nodes, each a combined broker and
controller, so a test can move partition leaders as in a real cluster (a node SIGKILLed and
started again, a preferred-leader election, a reassignment).

    with KafkaCluster(tmp_path / "kafka", size=3) as kafka:
        kafka.bootstrap                  # every node's PLAINTEXT address, comma-separated
        kafka.node(2).kill(); kafka.node(2).restart()

Every node is a voter of the controller quorum (a static `controller.quorum.voters`), so the
cluster keeps its metadata with one node down. With `replication_links` (the Toxiproxy API of a
WAN emulator, deploy/wan), each node's replication listener (REPLICATION, the inter-broker one)
is reached through a proxy `kafka-replication-<id>` there, while clients and the controllers
connect directly: disabling a node's proxy keeps its followers from fetching from it, so as
leader it appends records that only it holds, above its high watermark.

A node's broker listener answers ApiVersions only once a quorum of controllers runs, so the nodes
are formatted and started together and only then waited for (bench/peers/kraft.py formats,
starts and waits for a single node in one step).
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from bench.peers.cache import peer
from bench.peers.kraft import (
    BROKER_JVM_FLAGS,
    LOG4J2_BROKER,
    START_TIMEOUT_S,
    KafkaBroker,
    api_versions_answers,
    cluster_id,
)
from bench.peers.tools import java_command, main_class
from deploy.child_process import ChildFailed, ChildProcess
from deploy.wan.client import WanClient, WanProxy

__all__ = ["CLUSTER_DEFAULTS", "KafkaCluster", "KafkaNode"]

# Kafka's internal topics replicated as in a production cluster of three.
CLUSTER_DEFAULTS: dict[str, str] = {
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
}
# Three JVMs beside Causeway on two shared cores: a smaller heap each than a lone peer's.
NODE_JVM_FLAGS: tuple[str, ...] = tuple("-Xmx384m" if flag == "-Xmx512m" else flag for flag in BROKER_JVM_FLAGS)


def free_ports(count: int) -> list[int]:
    """`count` distinct loopback ports free right now: bound all at once, then let go (Kafka's
    controllers must know each other's ports before they bind; a race with another binder fails
    the start loudly)."""
    with ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]


@dataclass
class KafkaNode(KafkaBroker):
    """One node of a KafkaCluster: its `node_id` and the cluster's id and quorum; its ports are
    picked by the cluster, which must know every controller's port before any node starts."""

    node_id: int = 1
    quorum_voters: str = ""
    cluster_id: str = ""
    jvm_flags: Sequence[str] = NODE_JVM_FLAGS
    # The REPLICATION listener's port and the address the other nodes reach it at (a proxy);
    # 0 and "": none, the nodes replicate over PLAINTEXT.
    replication_port: int = 0
    replication_address: str = ""
    replication_proxy: WanProxy | None = None

    def config(self) -> dict[str, str]:
        config = {**super().config(), "node.id": str(self.node_id), "controller.quorum.voters": self.quorum_voters}
        if self.replication_port:
            config["listeners"] += f",REPLICATION://127.0.0.1:{self.replication_port}"
            config["advertised.listeners"] += f",REPLICATION://{self.replication_address}"
            config["listener.security.protocol.map"] += ",REPLICATION:PLAINTEXT"
            config["inter.broker.listener.name"] = "REPLICATION"
        return config

    def write_config(self) -> None:
        """Write server.properties with the ports the cluster gave this node."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in self.config().items()))

    def format_storage(self) -> None:
        """`kafka-storage format` with the cluster's id. Raises RuntimeError, with what it
        printed, when it fails."""
        fmt = subprocess.run(java_command(peer(self.profile), main_class("kafka-storage", self.profile),
                                          ["format", "-t", self.cluster_id, "-c", str(self.config_path)]),
                             capture_output=True, text=True, timeout=START_TIMEOUT_S)
        if fmt.returncode != 0:
            raise RuntimeError(f"kafka-storage format of node {self.node_id} failed ({fmt.returncode}):\n"
                               f"{fmt.stdout}{fmt.stderr}")

    def launch(self) -> None:
        """Start the node's JVM on its formatted storage and return at once (`wait_started` waits)."""
        cmd = java_command(peer(self.profile), main_class("kafka-server-start", self.profile),
                           [str(self.config_path)],
                           jvm_flags=[*self.jvm_flags, f"-Dkafka.logs.dir={self.directory}"], log4j2=LOG4J2_BROKER)
        self.proc = ChildProcess.start(f"Kafka node {self.node_id}", cmd, log_path=self.directory / "console.log",
                                       stdout="log")

    def wait_started(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Return once the node's broker answers ApiVersions (it has caught up with the metadata
        log). Raises ChildFailed, with its logs' last lines, when it exits or is not ready in
        time (then it is killed)."""
        assert self.proc is not None, f"Kafka node {self.node_id} was not launched"
        try:
            # Polling another process's listener: it has no readiness channel to us.
            self.proc.wait_ready(lambda: api_versions_answers("127.0.0.1", self.port), timeout_s, interval_s=0.2)
        except ChildFailed as exc:
            self.proc = None  # exited or killed, and waited for
            raise ChildFailed(f"{exc}\n{self.log_tail()}") from None

    def restart(self, timeout_s: float = START_TIMEOUT_S) -> KafkaNode:
        """Start a stopped or killed node again on its data, as an operator restarts a crashed
        broker, and wait until it serves: it rejoins the quorum, truncates what its partitions'
        new leaders do not hold, and follows them. Raises as `wait_started`."""
        began = time.monotonic()
        self.launch()
        self.wait_started(timeout_s)
        self.startup_seconds = time.monotonic() - began
        return self


@dataclass
class KafkaCluster:
    """`size` Apache Kafka KRaft nodes in `directory`/node-<id>, node ids 1..size; `overrides`
    go into every node's server.properties (after CLUSTER_DEFAULTS). With `replication_links`,
    each node's followers reach it through its proxy there (`KafkaNode.replication_proxy`)."""

    directory: Path
    size: int = 3
    overrides: dict[str, str] = field(default_factory=dict)
    profile: str = "kafka4"
    replication_links: WanClient | None = None
    nodes: list[KafkaNode] = field(default_factory=list)
    startup_seconds: float = 0.0

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes)

    def node(self, node_id: int) -> KafkaNode:
        """The node with Kafka's `node.id` `node_id`."""
        return next(node for node in self.nodes if node.node_id == node_id)

    def node_at(self, address: str) -> KafkaNode:
        """The node whose PLAINTEXT listener is `address` (HOST:PORT, as metadata names it)."""
        return next(node for node in self.nodes if node.bootstrap == address)

    def start(self) -> KafkaCluster:
        """Format every node's storage with one cluster id, start them all and return once each
        answers ApiVersions. Raises RuntimeError (ChildFailed, with the logs' last lines) when a
        node fails to format, exits or is not ready in time; the others are stopped then."""
        began = time.monotonic()
        self._plan()
        try:
            with ThreadPoolExecutor(self.size) as pool:  # one JVM each, a few seconds: side by side
                list(pool.map(KafkaNode.format_storage, self.nodes))
            for node in self.nodes:
                node.launch()
            for node in self.nodes:
                node.wait_started(START_TIMEOUT_S - (time.monotonic() - began))
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        return self

    def _plan(self) -> None:
        """Each node's directory, distinct free ports and server.properties, naming every voter."""
        per_node = 3 if self.replication_links is not None else 2
        ports = iter(free_ports(per_node * self.size))
        identity = cluster_id()
        self.nodes = [KafkaNode(self.directory / f"node-{i}", overrides={**CLUSTER_DEFAULTS, **self.overrides},
                                profile=self.profile, node_id=i, cluster_id=identity) for i in range(1, self.size + 1)]
        for node in self.nodes:
            node.port, node.controller_port = next(ports), next(ports)
            if self.replication_links is not None:
                node.replication_port = next(ports)
                proxy = f"kafka-replication-{node.node_id}"
                node.replication_proxy = self.replication_links.create_proxy(
                    proxy, "127.0.0.1:0", f"127.0.0.1:{node.replication_port}")
                node.replication_address = self.replication_links.proxies()[proxy]["listen"]
        voters = ",".join(f"{node.node_id}@127.0.0.1:{node.controller_port}" for node in self.nodes)
        for node in self.nodes:
            node.quorum_voters = voters
            node.write_config()

    def stop(self) -> dict[int, int]:
        """SIGTERM every running node at once (Kafka's controlled shutdown; one at a time, the
        last ones would wait for a controller quorum that is gone), SIGKILL one that lingers.
        Each node's exit code, by node id (0 for one that was not running)."""
        with ThreadPoolExecutor(max(1, len(self.nodes))) as pool:
            codes = list(pool.map(lambda node: node.stop(), self.nodes))
        return {node.node_id: code for node, code in zip(self.nodes, codes, strict=True)}

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(f"=== node {node.node_id}\n{node.log_tail(lines)}" for node in self.nodes)

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
