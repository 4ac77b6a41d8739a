"""Compile a topology file into the launcher's plan."""

from __future__ import annotations

from pathlib import Path

from deploy.launcher.plan import ClusterPlan, LaunchPlan, LinkPlan, MirrorPlan, TopicPlan
from topology import TopologyError, load_topology
from topology.errors import Problem

__all__ = ["plan_from_file"]


def plan_from_file(path: Path) -> LaunchPlan:
    """Raises TopologyError for an invalid file, or for what this launcher cannot start yet."""
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
        )
        for name, cluster in topology.clusters.items()
    )
    links = tuple(LinkPlan(link.between[0], link.between[1], link.latency, link.jitter, link.bandwidth)
                  for link in topology.links)
    unlaunchable = [
        Problem(str(path), 1, 1, f"mirrors.{name}.mode", "link mode is not available yet; use mode: mm2")
        for name, m in topology.mirrors.items() if m.mode != "mm2"
    ]
    if unlaunchable:
        raise TopologyError(unlaunchable)
    mirrors = tuple(
        MirrorPlan(name, m.source, m.target, {
            "topics": m.topics.model_dump(), "groups": m.groups.model_dump(), "naming": m.naming})
        for name, m in topology.mirrors.items()
    )
    return LaunchPlan(topology.name, clusters, links, mirrors)
