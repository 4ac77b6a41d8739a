"""What a topology does with topics: where each one arrives, over how many hops and links, and
a picture of it (Graphviz dot or Mermaid).

Mirroring follows MirrorMaker 2: a mirror copies every source topic its patterns select, named
`<source>.<topic>` (default naming) or unchanged (identity); a topic that came from the mirror's
target is never sent back to it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from topology.model import Topology
from topology.schema import Cluster, Link

__all__ = ["Arrival", "arrivals", "explain", "to_dot", "to_mermaid"]


@dataclass(frozen=True)
class Arrival:
    topic: str  # its name at this cluster
    origin_cluster: str
    origin_topic: str
    mirrors: tuple[str, ...]  # the mirrors it came through, in order
    wan_links: tuple[str, ...]  # "a<->b (40 ms)" for each WAN link crossed


def arrivals(topology: Topology) -> dict[str, dict[str, Arrival]]:
    """Per cluster, every topic it holds (own topics have no mirrors), by name."""
    held: dict[str, dict[str, Arrival]] = {
        name: {t: Arrival(t, name, t, (), ()) for t in cluster.topics} for name, cluster in topology.clusters.items()
    }
    for _ in range(len(topology.clusters) + 1):  # a path never visits a cluster twice
        changed = False
        for mirror_name, mirror in topology.mirrors.items():
            source, target = mirror.source, mirror.target
            a, b = topology.clusters[source].datacenter, topology.clusters[target].datacenter
            link = topology.link_between(a, b) if a != b else None
            for arrival in list(held[source].values()):
                if not mirror.topics.matches(arrival.topic):
                    continue
                if arrival.origin_cluster == target or target in _visited(topology, arrival):
                    continue  # MM2 loop prevention: never back to where it came from
                name = mirror.remote_name(arrival.topic)
                if name in held[target]:
                    continue
                crossed = arrival.wan_links + ((f"{a}<->{b} ({link.latency} ms)",) if link else ())
                held[target][name] = Arrival(name, arrival.origin_cluster, arrival.origin_topic,
                                             (*arrival.mirrors, mirror_name), crossed)
                changed = True
        if not changed:
            break
    return held


def _visited(topology: Topology, arrival: Arrival) -> set[str]:
    return {topology.mirrors[m].source for m in arrival.mirrors}


def explain(topology: Topology) -> str:
    lines = [f"topology {topology.name}: {len(topology.datacenters)} datacenters, {len(topology.clusters)} clusters, "
             f"{len(topology.links)} WAN links, {len(topology.mirrors)} mirrors"]
    for name, held in arrivals(topology).items():
        cluster = topology.clusters[name]
        lines.append(f"\ncluster {name} (datacenter {cluster.datacenter}, {cluster.role})")
        own = [a for a in held.values() if not a.mirrors]
        arrived = [a for a in held.values() if a.mirrors]
        lines.append("  own topics: " + (", ".join(sorted(a.topic for a in own)) or "none"))
        for a in sorted(arrived, key=lambda a: a.topic):
            hops = len(a.mirrors)
            wan = ", ".join(a.wan_links) if a.wan_links else "no WAN link"
            link = ", a read-only mirror topic (link mode)" if topology.mirrors[a.mirrors[-1]].mode == "link" else ""
            lines.append(f"  {a.topic} <- {a.origin_cluster}:{a.origin_topic} via {' -> '.join(a.mirrors)} "
                         f"({hops} hop{'s' if hops > 1 else ''}; {wan}{link})")
        if not arrived:
            lines.append("  mirrored in: none")
    return "\n".join(lines)


def _id(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)


def _clusters_in(topology: Topology, dc: str) -> Iterator[tuple[str, Cluster]]:
    return ((name, c) for name, c in topology.clusters.items() if c.datacenter == dc)


def _wan_label(link: Link) -> str:
    """A WAN link as both graphs label it: "WAN 40 ms", with ", 8 Mbit/s" when its bandwidth is
    capped (shared, per direction) and ", 0.1% loss" when it loses packets."""
    return (f"WAN {link.latency} ms" + (f", {link.bandwidth * 8 / 1e6:g} Mbit/s" if link.bandwidth else "")
            + (f", {link.loss:g}% loss" if link.loss else ""))


def to_dot(topology: Topology) -> str:
    out = [f'digraph "{topology.name}" {{', "  rankdir=LR;", '  node [shape=box, style=rounded];']
    for dc in topology.datacenters:
        out.append(f'  subgraph cluster_{_id(dc)} {{ label="{dc}";')
        for name, cluster in _clusters_in(topology, dc):
            style = ', style="rounded,bold", color=darkgreen' if cluster.role == "aggregate" else ""
            out.append(f'    c_{_id(name)} [label="{name}\\n{cluster.brokers} broker(s)"{style}];')
        out.append("  }")
    for name, mirror in topology.mirrors.items():
        label = f"{name}\\n{mirror.mode}, {mirror.effective_naming}"
        out.append(f'  c_{_id(mirror.source)} -> c_{_id(mirror.target)} [label="{label}"];')
    for link in topology.links:
        a, b = link.between
        anchors = [n for n, c in topology.clusters.items() if c.datacenter in (a, b)]
        if len({topology.clusters[n].datacenter for n in anchors}) == 2:
            first = next(n for n in anchors if topology.clusters[n].datacenter == a)
            second = next(n for n in anchors if topology.clusters[n].datacenter == b)
            out.append(f'  c_{_id(first)} -> c_{_id(second)} [dir=none, style=dashed, color=gray, '
                       f'label="{_wan_label(link)}", ltail=cluster_{_id(a)}, lhead=cluster_{_id(b)}];')
    out.append("}")
    return "\n".join(out) + "\n"


def to_mermaid(topology: Topology) -> str:
    out = ["flowchart LR"]
    for dc in topology.datacenters:
        out.append(f"  subgraph {_id(dc)}[{dc}]")
        for name, cluster in _clusters_in(topology, dc):
            shape = f"[[{name}]]" if cluster.role == "aggregate" else f"[{name}]"
            out.append(f"    c_{_id(name)}{shape}")
        out.append("  end")
    for name, mirror in topology.mirrors.items():
        label = f"{name}: {mirror.mode}, {mirror.effective_naming}"
        out.append(f"  c_{_id(mirror.source)} -->|{label}| c_{_id(mirror.target)}")
    for link in topology.links:
        a, b = link.between
        out.append(f"  {_id(a)} -.-|{_wan_label(link)}| {_id(b)}")
    return "\n".join(out) + "\n"
