"""Start and stop an Apache Kafka 4.x broker (KRaft, one node, combined broker and controller).

The peer gets a directory of its own: a generated ``server.properties``, the metadata and data
logs, and ``server.log``. Start = pick free loopback ports, ``kafka-storage format`` with a fresh
cluster id, then ``kafka.Kafka server.properties``; it is ready when its broker listener answers an
ApiVersions request (polled, bounded), which Kafka only does once the broker has caught up with the
metadata log. Stop = SIGTERM (Kafka's controlled shutdown), SIGKILL if it lingers.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import ClassVar

from bench.peers.cache import peer
from bench.peers.tools import java_command, main_class
from broker.ids import random_uuid_text
from broker.protocol.errors import ProtocolError
from broker.protocol.messages import ApiVersionsRequest
from deploy.child_process import NO_LOG, ChildFailed, ChildOwner, ChildProcess, log_tail
from deploy.kafka_socket import ask

LOG4J2_BROKER = Path(__file__).with_name("broker-log4j2.properties")
# A broker that keeps a small heap beside Causeway on two shared cores.
BROKER_JVM_FLAGS: tuple[str, ...] = ("-Xms256m", "-Xmx512m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                                     "-Xshare:auto", "-Djava.awt.headless=true")
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 30.0

# Single-node settings a developer's server.properties has: internal topics with one replica, no
# initial rebalance delay (as Kafka's own config/server.properties for quick starts).
SINGLE_NODE: dict[str, str] = {
    "num.partitions": "1",
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
}


def free_port() -> int:
    """A loopback port free right now. Kafka's controller must know its port before it binds, so
    it cannot take port 0; the short race with another binder fails the start loudly, not silently."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cluster_id() -> str:
    """A Kafka Uuid as `kafka-storage random-uuid` prints it: 16 random bytes, URL-safe base64."""
    return random_uuid_text()


def api_versions_answers(host: str, port: int, timeout: float = 2.0) -> bool:
    """True when the listener answers ApiVersions v0 with error code 0."""
    try:
        answer = ask((host, port), ApiVersionsRequest(), 0, timeout_s=timeout, client_id="causeway-peers")
    except (OSError, ProtocolError):
        return False
    return bool(answer.error_code == 0)


@dataclass
class KafkaBroker(ChildOwner):
    """One Apache Kafka 4.x KRaft node in `directory`; `bootstrap` once started."""

    directory: Path
    overrides: dict[str, str] = field(default_factory=dict)
    profile: str = "kafka4"
    jvm_flags: Sequence[str] = BROKER_JVM_FLAGS
    proc: ChildProcess | None = None
    port: int = 0
    stop_timeout_s: ClassVar[float] = STOP_TIMEOUT_S
    controller_port: int = 0
    startup_seconds: float = 0.0
    # Listeners beside PLAINTEXT, each named as its security protocol (SSL, SASL_SSL, ...): their
    # ssl.* and sasl.* keys come in `overrides`. Inter-broker traffic stays on PLAINTEXT.
    extra_listeners: tuple[str, ...] = ()
    extra_ports: dict[str, int] = field(default_factory=dict)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def address(self, listener: str) -> str:
        """HOST:PORT of a listener: PLAINTEXT or one of `extra_listeners`."""
        return self.bootstrap if listener == "PLAINTEXT" else f"127.0.0.1:{self.extra_ports[listener]}"

    @property
    def log_path(self) -> Path:
        return self.directory / "server.log"

    @property
    def config_path(self) -> Path:
        return self.directory / "server.properties"

    def config(self) -> dict[str, str]:
        advertised = ",".join(f"{name}://{self.address(name)}" for name in ("PLAINTEXT", *self.extra_listeners))
        return {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"{advertised},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": advertised,
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": ",".join(
                f"{name}:{name}" for name in ("PLAINTEXT", *self.extra_listeners)) + ",CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.directory / "data"),
            **SINGLE_NODE,
            **self.overrides,
        }

    def write_config(self) -> None:
        """Pick the node's free ports and write its server.properties."""
        self.directory.mkdir(parents=True, exist_ok=True)
        taken: set[int] = set()

        def distinct_port() -> int:
            port = free_port()
            while port in taken:
                port = free_port()
            taken.add(port)
            return port

        self.port = distinct_port()
        self.controller_port = distinct_port()
        self.extra_ports = {name: distinct_port() for name in self.extra_listeners}
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in self.config().items()))

    def format_storage(self) -> None:
        """`kafka-storage format` with a fresh cluster id: the first of a fresh node's two JVMs.
        Raises RuntimeError, with what it printed, when it fails."""
        fmt = subprocess.run(java_command(peer(self.profile), main_class("kafka-storage", self.profile),
                                          ["format", "-t", cluster_id(), "-c", str(self.config_path)]),
                             capture_output=True, text=True, timeout=START_TIMEOUT_S)
        if fmt.returncode != 0:
            raise RuntimeError(f"kafka-storage format failed ({fmt.returncode}):\n{fmt.stdout}{fmt.stderr}")

    def start(self) -> KafkaBroker:
        """Format the node's storage, start it and return once it answers ApiVersions. Raises
        RuntimeError (ChildFailed, with the logs' last lines) when it exits or is not ready in time."""
        self.write_config()
        began = time.monotonic()
        self.format_storage()
        return self._launch(began)

    def restart(self) -> KafkaBroker:
        """Stop the node cleanly and start it again on the same ports and data (no format): a
        single node's restart moves its partitions' leader epochs on, as KRaft fences and
        unfences it. Raises as `start`."""
        code = self.stop()
        if code not in (0, 143):  # 143: the JVM's exit on SIGTERM
            raise RuntimeError(f"Kafka did not stop cleanly (exit {code}):\n{self.log_tail()}")
        return self._launch(time.monotonic())

    def _launch(self, began: float) -> KafkaBroker:
        target = peer(self.profile)
        cmd = java_command(target, main_class("kafka-server-start", self.profile), [str(self.config_path)],
                           jvm_flags=[*self.jvm_flags, f"-Dkafka.logs.dir={self.directory}"], log4j2=LOG4J2_BROKER)
        self.proc = proc = ChildProcess.start("Kafka", cmd, log_path=self.directory / "console.log", stdout="log")
        try:
            # Polling another process's listener: it has no readiness channel to us.
            proc.wait_ready(lambda: api_versions_answers("127.0.0.1", self.port),
                            START_TIMEOUT_S - (time.monotonic() - began), interval_s=0.2)
        except ChildFailed as exc:
            self.proc = None  # exited or killed, and waited for
            raise ChildFailed(f"{exc}\n--- {self.log_path.name}\n{log_tail(self.log_path)}") from None
        self.startup_seconds = time.monotonic() - began
        return self

    def log_tail(self, lines: int = 40) -> str:
        parts = []
        for path in (self.log_path, self.directory / "console.log"):
            tail = log_tail(path, lines)
            if tail != NO_LOG:
                parts.append(f"--- {path.name}\n{tail}")
        return "\n".join(parts) or NO_LOG

    def __enter__(self) -> KafkaBroker:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

