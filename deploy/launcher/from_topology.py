"""Compile a topology file into the launcher's plan."""

from __future__ import annotations

from pathlib import Path

from deploy.launcher.plan import (
    SYNC_TOPIC_ACLS,
    AclPlan,
    ClusterPlan,
    LaunchPlan,
    LinkPlan,
    MirrorPlan,
    SecurityPlan,
    TopicPlan,
)
from topology import load_topology
from topology.schema import Cluster, Mirror

__all__ = ["plan_from_file"]


def plan_from_file(path: Path) -> LaunchPlan:
    """Raises TopologyError for an invalid file."""
    topology = load_topology(path)
    clusters = tuple(
        ClusterPlan(
            name=name,
            datacenter=cluster.datacenter,
            topics={t: TopicPlan(spec.partitions, spec.replication_factor, spec.config_texts())
                    for t, spec in cluster.topics.items()},
            broker_configs=cluster.config_texts(),
            remote_datacenters=tuple(topology.remote_datacenters(name)),
            port=cluster.port,
            coordination=cluster.coordination,
            brokers=cluster.brokers,
            security=security_plan(cluster),
        )
        for name, cluster in topology.clusters.items()
    )
    links = tuple(LinkPlan(link.between[0], link.between[1], link.latency, link.jitter, link.bandwidth,
                           link.loss, link.reorder)
                  for link in topology.links)
    mirrors = tuple(MirrorPlan(name, m.source, m.target, mirror_settings(m), m.principal, m.lag_alert_seconds)
                    for name, m in topology.mirrors.items())
    return LaunchPlan(topology.name, clusters, links, mirrors, monitoring=topology.spec.monitoring)


def mirror_settings(mirror: Mirror) -> dict[str, object]:
    """The mirror's config beyond its name and clusters, as `causeway mirror --config` reads it.
    A link-mode mirror gets no `naming` key: it keeps names, and the mirror refuses an explicit
    `naming: default` with it. `sync_topic_acls: false` becomes MM2's `sync.topic.acls.enabled`,
    `exactly_once_support: required` its `exactly.once.support`."""
    settings: dict[str, object] = {"mode": mirror.mode, "topics": mirror.topics.model_dump(),
                                   "groups": mirror.groups.model_dump()}
    if mirror.mode == "mm2":
        settings["naming"] = mirror.naming
    if not mirror.sync_topic_acls:
        settings[SYNC_TOPIC_ACLS] = False
    if mirror.exactly_once_support == "required":
        settings["exactly.once.support"] = "required"
    return settings


def security_plan(cluster: Cluster) -> SecurityPlan | None:
    """The cluster's `security:` as plain data: one AclPlan per operation of each ACL."""
    security = cluster.security
    if security is None:
        return None
    acls = None
    if security.acls is not None:
        acls = tuple(AclPlan(acl.principal, operation, kind, name, acl.pattern, acl.permission, acl.host)
                     for acl in security.acls for kind, name in acl.resources for operation in acl.operations)
    return SecurityPlan(security.local, security.wan, security.between_brokers,
                        security.sasl_mechanism(cluster.coordination), tuple(security.users), acls,
                        zookeeper=security.zookeeper)
