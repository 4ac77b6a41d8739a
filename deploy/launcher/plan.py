"""What `causeway up` starts, as plain data: clusters, the WAN links between datacenters.

The topology language (topology/) is compiled into this plan; the launcher only reads the plan,
so it can be built and tested without a YAML file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from topology.schema import DEFAULT_LAG_ALERT_SECONDS, MAX_LAG_ALERT_SECONDS, check_name

__all__ = ["SYNC_TOPIC_ACLS", "AclPlan", "ClusterPlan", "LaunchPlan", "LinkPlan", "MirrorPlan", "SecurityPlan",
           "TopicPlan", "listener_name"]

#: The mirror config's key for MirrorMaker 2's topic ACL sync (mirror/config.py), in a plan's settings.
SYNC_TOPIC_ACLS = "sync.topic.acls.enabled"


def listener_name(datacenter: str) -> str:
    """The broker listener that a remote datacenter's clients reach through its WAN link."""
    cleaned = "".join(c if c.isalnum() else "_" for c in datacenter.upper())
    return f"WAN_{cleaned}"


def _check_names(what: str, **names: str) -> None:
    """The topology's rule for names (they become paths under the state dir), also for a plan
    built without a topology file. Raises ValueError naming the field."""
    for key, value in names.items():
        try:
            check_name(value)
        except ValueError as exc:
            raise ValueError(f"{what}: {key}: {exc}") from None


@dataclass(frozen=True)
class LinkPlan:
    """A WAN link between two datacenters; latency is one way, applied in each direction; the
    bandwidth is per direction, shared by every connection across the link; loss and reorder in
    percent, as netem takes them."""

    a: str
    b: str
    latency_ms: int = 0
    jitter_ms: int = 0
    bandwidth_bytes_per_s: int | None = None
    loss_percent: float = 0.0
    reorder_percent: float = 0.0

    @property
    def name(self) -> str:
        """The link's name on the WAN emulator (`east~west`: `~` is in no datacenter name)."""
        return f"{self.a}~{self.b}"

    def joins(self, x: str, y: str) -> bool:
        return {self.a, self.b} == {x, y}


@dataclass(frozen=True)
class TopicPlan:
    """A topic the launcher creates once the cluster is up; replication_factor None is the
    brokers' default.replication.factor."""

    partitions: int = 1
    replication_factor: int | None = None
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AclPlan:
    """One ACL binding, in Kafka's names: `kafka-acls --add --allow-principal User:alice
    --operation Read --topic orders` is AclPlan("User:alice", "Read", "Topic", "orders")."""

    principal: str
    operation: str  # Read, Write, Describe, ... (security.acl.Operation's titles)
    resource_type: str  # Topic, Group, Cluster, TransactionalId
    resource_name: str  # "*" is every resource of the type; the cluster is "kafka-cluster"
    pattern: str = "literal"  # or "prefixed"
    permission: str = "allow"  # or "deny"
    host: str = "*"


@dataclass(frozen=True)
class SecurityPlan:
    """A cluster's security: its listeners' protocols (Kafka's listener.security.protocol.map
    values), the SASL mechanism, its users (passwords generated at `up`) and ACLs (None: no
    authorizer; a tuple, even empty: Kafka's AclAuthorizer with these bindings)."""

    local: str = "PLAINTEXT"
    wan: str = "PLAINTEXT"
    between_brokers: str = "PLAINTEXT"  # or "SSL": mutual TLS on a BROKER listener of its own
    mechanism: str = "PLAIN"
    users: tuple[str, ...] = ()
    acls: tuple[AclPlan, ...] | None = None
    zookeeper: str = "PLAINTEXT"  # or "SSL": mutual TLS to the cluster's ZooKeeper, znodes with ACLs

    def __post_init__(self) -> None:
        for user in self.users:
            _check_names("security", user=user)

    @property
    def protocols(self) -> tuple[str, ...]:
        return self.local, self.wan, self.between_brokers

    @property
    def uses_tls(self) -> bool:
        return any(p in ("SSL", "SASL_SSL") for p in self.protocols)

    @property
    def uses_sasl(self) -> bool:
        return any(p.startswith("SASL_") for p in self.protocols)


@dataclass(frozen=True)
class ClusterPlan:
    name: str
    datacenter: str
    topics: Mapping[str, int | TopicPlan] = field(default_factory=dict)  # name -> partitions, or the whole plan
    broker_configs: dict[str, str] = field(default_factory=dict)
    port: int | None = None  # the first broker's LOCAL listener port; allocated when None
    # Datacenters whose clients (mirrors) read this cluster across a WAN link.
    remote_datacenters: tuple[str, ...] = ()
    coordination: str = "standalone"  # or "zookeeper": the cluster gets its own ZooKeeper
    brokers: int = 1  # more than one needs coordination "zookeeper"
    security: SecurityPlan | None = None  # None: every listener PLAINTEXT, no authorizer

    def __post_init__(self) -> None:
        _check_names(f"cluster {self.name!r}", name=self.name, datacenter=self.datacenter)
        if self.brokers < 1:
            raise ValueError(f"cluster {self.name}: brokers must be at least 1, not {self.brokers}")
        if self.brokers > 1 and self.coordination != "zookeeper":
            raise ValueError(f"cluster {self.name}: {self.brokers} brokers need coordination zookeeper")

    @property
    def broker_ids(self) -> tuple[int, ...]:
        """A standalone cluster's one broker keeps id 0 (node.id's default, as before); the brokers
        of a ZooKeeper cluster are 1..N, as Kafka's ZooKeeper-mode examples number them."""
        if self.coordination != "zookeeper":
            return (0,)
        return tuple(range(1, self.brokers + 1))

    def topic_plans(self) -> dict[str, TopicPlan]:
        return {name: t if isinstance(t, TopicPlan) else TopicPlan(t) for name, t in self.topics.items()}


@dataclass(frozen=True)
class MirrorPlan:
    """A mirror daemon, run in the target's datacenter; `settings` are the rest of its config
    (topic and group patterns, naming, MM2 knobs), as `causeway mirror --config` reads them."""

    name: str
    source: str  # cluster names
    target: str
    settings: dict[str, object] = field(default_factory=dict)
    principal: str | None = None  # the user it logs in as on secured clusters
    # CausewayMirrorLagHigh's threshold for it, in seconds (deploy/launcher/alert_rules.py).
    lag_alert_seconds: float = DEFAULT_LAG_ALERT_SECONDS

    def __post_init__(self) -> None:
        _check_names(f"mirror {self.name!r}", name=self.name, source=self.source, target=self.target)
        if not 0 < self.lag_alert_seconds <= MAX_LAG_ALERT_SECONDS:
            raise ValueError(f"mirror {self.name}: lag_alert_seconds must be above 0 and at most "
                             f"{MAX_LAG_ALERT_SECONDS:.0f}, not {self.lag_alert_seconds!r}")
        if self.principal is not None:
            _check_names(f"mirror {self.name!r}", principal=self.principal)

    @property
    def mode(self) -> str:
        """`mm2` or `link` (the mirror config's `mode`, mm2 when absent)."""
        return str(self.settings.get("mode", "mm2"))

    @property
    def keeps_names(self) -> bool:
        """Whether remote topics keep their source names (link mode, or identity naming)."""
        return self.mode == "link" or self.settings.get("naming") == "identity"

    @property
    def syncs_topic_acls(self) -> bool:
        """Whether it copies the source's topic ACLs to the target (MM2's key, on by default)."""
        return self.settings.get(SYNC_TOPIC_ACLS, True) is not False


@dataclass(frozen=True)
class LaunchPlan:
    name: str
    clusters: tuple[ClusterPlan, ...]
    links: tuple[LinkPlan, ...] = ()
    mirrors: tuple[MirrorPlan, ...] = ()
    monitoring: str = "none"  # or "prometheus": a Prometheus scraping every daemon (deploy/launcher/prometheus.py)

    def __post_init__(self) -> None:
        _check_names(f"topology {self.name!r}", name=self.name)
        if self.monitoring not in ("none", "prometheus"):
            raise ValueError(f"topology {self.name}: monitoring must be none or prometheus, not {self.monitoring!r}")

    def cluster(self, name: str) -> ClusterPlan:
        return next(c for c in self.clusters if c.name == name)

    def link(self, x: str, y: str) -> LinkPlan | None:
        return next((link for link in self.links if link.joins(x, y)), None)
