"""Compile a topology file into the launcher's plan."""

from __future__ import annotations

from pathlib import Path

from deploy.launcher.plan import ClusterPlan, LaunchPlan, LinkPlan
from topology import TopologyError, load_topology
from topology.errors import Problem

__all__ = ["plan_from_file"]


def plan_from_file(path: Path) -> LaunchPlan:
    """Raises TopologyError for an invalid file, or for what this launcher cannot start yet."""
    topology = load_topology(path)
    unsupported = [
        Problem(str(path), 1, 1, f"clusters.{name}", "multi-broker and ZooKeeper clusters cannot be launched yet; "
                "use brokers: 1 and coordination: standalone")
        for name, c in topology.clusters.items() if c.brokers > 1 or c.coordination != "standalone"
    ]
    if unsupported:
        raise TopologyError(unsupported)
    clusters = tuple(
        ClusterPlan(
            name=name,
            datacenter=cluster.datacenter,
            topics={t: spec.partitions for t, spec in cluster.topics.items()},
            broker_configs=cluster.config_texts(),
            remote_datacenters=tuple(topology.remote_datacenters(name)),
            port=cluster.port,
        )
        for name, cluster in topology.clusters.items()
    )
    links = tuple(LinkPlan(link.between[0], link.between[1], link.latency, link.jitter, link.bandwidth)
                  for link in topology.links)
    return LaunchPlan(topology.name, clusters, links)
