"""What a managed ZooKeeper node runs: its `zoo.cfg`, its `myid`, its java command line.

ZooKeeper comes from Debian's `zookeeper` package (`make system-deps`): the server classes are in
/usr/share/java/zookeeper.jar, whose manifest names every other jar it needs (netty, jute,
jackson, slf4j-api, ...), so the class path only adds a logging backend, slf4j-simple, which
writes to stderr: the node's log file.

A node of one is run with ZooKeeperServerMain (standalone), a node of an ensemble with
QuorumPeerMain; either reads a generated zoo.cfg in the node's own directory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from deploy.ports import free_port

__all__ = ["CLASSPATH", "JAVA", "QUORUM_MAIN", "STANDALONE_MAIN", "ZOOKEEPER_JAR", "NodePorts", "Tuning",
           "ZkTls", "java_argv", "pick_free_port", "render_zoo_cfg", "write_node_files"]

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
# netty-codec serves TLS client ports (NettyServerCnxnFactory); Debian's zookeeper.jar manifest
# leaves it out (the package depends on libnetty-java, which installs it).
CLASSPATH = f"{ZOOKEEPER_JAR}:/usr/share/java/slf4j-simple.jar:/usr/share/java/netty-codec.jar"
JAVA = "java"
STANDALONE_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"
QUORUM_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
CLI_MAIN = "org.apache.zookeeper.ZooKeeperMain"  # zkCli, for the manual (docs/operations/zookeeper.md)
HOST = "127.0.0.1"

# A small JVM: ZooKeeper holds a few znodes for a test or a demo cluster, so a small initial heap
# and the serial collector (no GC threads per core) keep each node's RSS low; C1 only (tiered level
# 1) starts faster and compiles less. IPv4 only: every address here is 127.0.0.1. The heap may
# grow to Kafka's own default for ZooKeeper (zookeeper-server-start.sh: 512 MB): ZooKeeper keeps
# every znode in memory, and at 128 MB some thirty 1 MB notifications (anyone with write access
# can make them) read by three brokers ran it out of heap and it exited (the hostile chaos matrix).
JVM_OPTIONS: tuple[str, ...] = ("-Xms16m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                                "-XX:MaxMetaspaceSize=64m", "-Xss512k", "-Djava.net.preferIPv4Stack=true")


@dataclass(frozen=True)
class NodePorts:
    """The ports of one node: clients, followers to the leader, leader election, and with TLS
    the secure client port (secureClientPort)."""

    client: int
    quorum: int
    election: int
    secure_client: int | None = None


@dataclass(frozen=True)
class ZkTls:
    """TLS on the client port, by PEM files: the server's key and chain, and the CAs whose
    client certificates it accepts (ssl.clientAuth=need: a client without one is refused). The
    x509 provider then names each session by its certificate's subject, which is the identity
    that brokers with zookeeper.set.acl give every right on the znodes they create."""

    keystore: Path      # the node's key and certificate chain, one PEM file
    truststore: Path    # CA certificates, PEM


@dataclass(frozen=True)
class Tuning:
    """zoo.cfg settings beyond the ports and dirs, by ZooKeeper's names (defaults: its own,
    except where noted)."""

    tick_time_ms: int = 2000         # tickTime
    init_limit: int = 10             # initLimit, in ticks
    sync_limit: int = 5              # syncLimit, in ticks
    # maxSessionTimeout: ZooKeeper's default is 20 ticks (40 s at 2000 ms); fixed here so a short
    # tick for tests does not silently cut a broker's zookeeper.session.timeout.ms (18 s).
    max_session_timeout_ms: int = 60000
    force_sync: bool = True          # forceSync: fsync the transaction log before acknowledging
    # preAllocSize (KB): ZooKeeper grows its transaction log 64 MB at a time; 4 MB is plenty
    # for the metadata of a few clusters and keeps test dirs small.
    prealloc_kb: int = 4096
    # A secure client port beside the plain one (None: plaintext only). The plain port stays for
    # the four-letter words readiness reads and for read-only tools; ACLs keep writes to the brokers.
    tls: ZkTls | None = None


def pick_free_port() -> int:
    """A loopback port nothing listens on right now. ZooKeeper cannot bind port 0 and report the
    port it got, so the port is picked here; another process may take it before the node binds
    it, which the caller detects (the node exits with a BindException) and retries. Never one
    this process handed out before (deploy/ports.py)."""
    return free_port(HOST)


def render_zoo_cfg(*, data_dir: Path, ports: NodePorts, peers: Sequence[tuple[int, NodePorts]],
                   tuning: Tuning) -> str:
    """The zoo.cfg of one node; `peers` is every (id, ports) of the ensemble, empty for one
    node (standalone: no server.N lines)."""
    lines = [
        "# Written by causeway (deploy/zookeeper); rewritten at every start.",
        f"tickTime={tuning.tick_time_ms}",
        f"initLimit={tuning.init_limit}",
        f"syncLimit={tuning.sync_limit}",
        f"dataDir={data_dir}",
        f"clientPort={ports.client}",
        f"clientPortAddress={HOST}",
        f"maxSessionTimeout={tuning.max_session_timeout_ms}",
        f"forceSync={'yes' if tuning.force_sync else 'no'}",
        f"preAllocSize={tuning.prealloc_kb}",
        # The AdminServer (Jetty) would take port 8080 on every node.
        "admin.enableServer=false",
        # Readiness and `status` read `srvr`; the others help an operator (`echo mntr | nc ...`).
        "4lw.commands.whitelist=srvr,ruok,stat,mntr,conf",
        # Old snapshots and logs are purged hourly, keeping ZooKeeper's minimum of three.
        "autopurge.purgeInterval=1",
    ]
    if tuning.tls is not None and ports.secure_client is not None:
        lines += [
            f"secureClientPort={ports.secure_client}",
            f"secureClientPortAddress={HOST}",
            # TLS client ports need ZooKeeper's Netty server (the NIO one has no TLS).
            "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
            f"ssl.keyStore.location={tuning.tls.keystore}",
            "ssl.keyStore.type=PEM",
            f"ssl.trustStore.location={tuning.tls.truststore}",
            "ssl.trustStore.type=PEM",
            "ssl.clientAuth=need",
            # Sessions on the secure port are named x509:<subject DN>, which ACLs can then name.
            "authProvider.x509=org.apache.zookeeper.server.auth.X509AuthenticationProvider",
        ]
    lines += [f"server.{peer}={HOST}:{p.quorum}:{p.election}" for peer, p in peers]
    return "\n".join(lines) + "\n"


def write_node_files(node_dir: Path, *, node_id: int, ports: NodePorts,
                     peers: Sequence[tuple[int, NodePorts]], tuning: Tuning) -> Path:
    """Create the node's dir, its data dir with `myid` (ensembles only) and its zoo.cfg;
    returns the zoo.cfg path. Blocking file IO: call it off the trio thread."""
    data_dir = node_dir / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    if peers:
        (data_dir / "myid").write_text(f"{node_id}\n")
    cfg = node_dir / "zoo.cfg"
    cfg.write_text(render_zoo_cfg(data_dir=data_dir, ports=ports, peers=peers, tuning=tuning))
    return cfg


def java_argv(cfg: Path, *, ensemble: bool, java: str = JAVA) -> list[str]:
    """The command line of a node reading `cfg`."""
    main = QUORUM_MAIN if ensemble else STANDALONE_MAIN
    # The election port is re-bound at most once on failure (ZooKeeper's default is three tries
    # a second apart): a taken port fails fast and the ensemble picks new ports.
    return [java, *JVM_OPTIONS, "-Dzookeeper.electionPortBindRetry=1", "-Dzookeeper.jmx.log4j.disable=true",
            "-cp", CLASSPATH, main, str(cfg)]
