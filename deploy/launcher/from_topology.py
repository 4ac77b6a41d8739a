"""Compile a topology file into the launcher's plan."""

from __future__ import annotations

from pathlib import Path

from deploy.launcher.plan import ClusterPlan, LaunchPlan, LinkPlan, MirrorPlan, TopicPlan
from topology import load_topology
from topology.schema import Mirror

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
        )
        for name, cluster in topology.clusters.items()
    )
    links = tuple(LinkPlan(link.between[0], link.between[1], link.latency, link.jitter, link.bandwidth)
                  for link in topology.links)
    mirrors = tuple(MirrorPlan(name, m.source, m.target, mirror_settings(m)) for name, m in topology.mirrors.items())
    return LaunchPlan(topology.name, clusters, links, mirrors)


def mirror_settings(mirror: Mirror) -> dict[str, object]:
    """The mirror's config beyond its name and clusters, as `causeway mirror --config` reads it.
    A link-mode mirror gets no `naming` key: it keeps names, and the mirror refuses an explicit
    `naming: default` with it."""
    settings: dict[str, object] = {"mode": mirror.mode, "topics": mirror.topics.model_dump(),
                                   "groups": mirror.groups.model_dump()}
    if mirror.mode == "mm2":
        settings["naming"] = mirror.naming
    return settings
