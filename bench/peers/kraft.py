"""Start and stop an Apache Kafka 4.x broker (KRaft, one node, combined broker and controller).

The peer gets a directory of its own: a generated ``server.properties``, the metadata and data
logs, and ``server.log``. Start = pick free loopback ports, ``kafka-storage format`` with a fresh
cluster id, then ``kafka.Kafka server.properties``; it is ready when its broker listener answers an
ApiVersions request (polled, bounded), which Kafka only does once the broker has caught up with the
metadata log. Stop = SIGTERM (Kafka's controlled shutdown), SIGKILL if it lingers.
"""

from __future__ import annotations

import socket
import struct
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from bench.peers.cache import peer
from bench.peers.tools import java_command, main_class
from broker.ids import random_uuid_text
from deploy.broker_process import stop_process

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
    client_id = b"causeway-peers"
    body = struct.pack(">hhih", 18, 0, 1, len(client_id)) + client_id
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(struct.pack(">i", len(body)) + body)
            head = _recv_exact(sock, 4)
            (size,) = struct.unpack(">i", head)
            if not 6 <= size <= 1 << 20:
                return False
            reply = _recv_exact(sock, size)
    except OSError:
        return False
    correlation, error = struct.unpack(">ih", reply[:6])
    return bool(correlation == 1 and error == 0)


def _recv_exact(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


@dataclass
class KafkaBroker:
    """One Apache Kafka 4.x KRaft node in `directory`; `bootstrap` once started."""

    directory: Path
    overrides: dict[str, str] = field(default_factory=dict)
    profile: str = "kafka4"
    jvm_flags: Sequence[str] = BROKER_JVM_FLAGS
    proc: subprocess.Popen[str] | None = None
    port: int = 0
    controller_port: int = 0
    startup_seconds: float = 0.0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.directory / "server.log"

    @property
    def config_path(self) -> Path:
        return self.directory / "server.properties"

    def config(self) -> dict[str, str]:
        return {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.directory / "data"),
            **SINGLE_NODE,
            **self.overrides,
        }

    def start(self) -> KafkaBroker:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.controller_port = free_port()
        while self.controller_port == self.port:
            self.controller_port = free_port()
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in self.config().items()))
        began = time.monotonic()
        target = peer(self.profile)
        fmt = subprocess.run(java_command(target, main_class("kafka-storage", self.profile),
                                          ["format", "-t", cluster_id(), "-c", str(self.config_path)]),
                             capture_output=True, text=True, timeout=START_TIMEOUT_S)
        if fmt.returncode != 0:
            raise RuntimeError(f"kafka-storage format failed ({fmt.returncode}):\n{fmt.stdout}{fmt.stderr}")
        cmd = java_command(target, main_class("kafka-server-start", self.profile), [str(self.config_path)],
                           jvm_flags=[*self.jvm_flags, f"-Dkafka.logs.dir={self.directory}"], log4j2=LOG4J2_BROKER)
        with (self.directory / "console.log").open("ab") as console:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT,
                                         text=True)
        deadline = began + START_TIMEOUT_S
        while not api_versions_answers("127.0.0.1", self.port):
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.proc = None
                raise RuntimeError(f"Kafka exited with {code} before it was ready:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"Kafka not ready in {START_TIMEOUT_S}s:\n{self.log_tail()}")
            time.sleep(0.2)  # polling another process's listener; it has no readiness channel to us
        self.startup_seconds = time.monotonic() - began
        return self

    def stop(self) -> int:
        if self.proc is None:
            return 0
        code = stop_process(self.proc, STOP_TIMEOUT_S)
        self.proc = None
        return code

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def log_tail(self, lines: int = 40) -> str:
        parts = []
        for path in (self.log_path, self.directory / "console.log"):
            try:
                parts.append(f"--- {path.name}\n" + "\n".join(path.read_text().splitlines()[-lines:]))
            except OSError:
                continue
        return "\n".join(parts) or "(no log)"

    def __enter__(self) -> KafkaBroker:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

