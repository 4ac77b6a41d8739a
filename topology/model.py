"""Load and validate a topology: the shape (schema.py), then what the shape cannot say.

Every problem is collected, named by file, line, column and key path, before anything starts:
dangling references (with a suggestion), a mirror between datacenters with no WAN link, clashing
ports, replication factors (and min.insync.replicas) above the broker count, several brokers
without ZooKeeper coordination, mirror cycles that nothing stops (identity naming or link mode
all the way round), and link-mode mirrors given `naming: default` or copying onto a topic the
target declares itself.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from topology.errors import Problem, TopologyError, format_path
from topology.loader import Positions, load_yaml, position_of
from topology.schema import ADMIN_USER, Cluster, Link, Mirror, TopologySpec, check_name

__all__ = ["Topology", "load_topology"]


@dataclass(frozen=True)
class Topology:
    name: str
    path: Path
    spec: TopologySpec

    @property
    def clusters(self) -> dict[str, Cluster]:
        return self.spec.clusters

    @property
    def datacenters(self) -> list[str]:
        return list(self.spec.datacenters)

    @property
    def links(self) -> list[Link]:
        return self.spec.links

    @property
    def mirrors(self) -> dict[str, Mirror]:
        return self.spec.mirrors

    def link_between(self, a: str, b: str) -> Link | None:
        return next((link for link in self.spec.links if set(link.between) == {a, b}), None)

    def remote_datacenters(self, cluster: str) -> list[str]:
        """Datacenters whose mirrors read `cluster` across a WAN link (mirrors run at the target)."""
        home = self.clusters[cluster].datacenter
        out: list[str] = []
        for mirror in self.mirrors.values():
            if mirror.source == cluster:
                dc = self.clusters[mirror.target].datacenter
                if dc != home and dc not in out:
                    out.append(dc)
        return out


def _suggest(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def schema_problems(exc: ValidationError, file: str, positions: Positions) -> list[Problem]:
    """pydantic's errors as Problems, each at the line of its key (or the nearest key above)."""
    problems = []
    for error in exc.errors():
        loc = tuple(error["loc"])
        # pydantic adds validator names ("function-before[...]") to some locations; drop them.
        path = tuple(p for p in loc if not (isinstance(p, str) and "[" in p))
        message = error["msg"]
        if error["type"] == "extra_forbidden":
            message = f"unknown key '{path[-1]}'"
        elif message.startswith("Value error, "):
            message = message.removeprefix("Value error, ")
        line, column = position_of(positions, path)
        problems.append(Problem(file, line, column, format_path(path), message))
    return problems


def _semantic_problems(spec: TopologySpec, file: str, positions: Positions) -> list[Problem]:
    problems: list[Problem] = []

    def problem(path: tuple[str | int, ...], message: str) -> None:
        line, column = position_of(positions, path)
        problems.append(Problem(file, line, column, format_path(path), message))

    dcs = list(spec.datacenters)
    clusters = list(spec.clusters)
    ports: dict[int, str] = {}
    for name, cluster in spec.clusters.items():
        if cluster.datacenter not in spec.datacenters:
            problem(("clusters", name, "datacenter"),
                    f"unknown datacenter '{cluster.datacenter}'{_suggest(cluster.datacenter, dcs)}")
        if cluster.port is not None:
            if cluster.port in ports:
                other = ports[cluster.port]
                problem(("clusters", name, "port"), f"port {cluster.port} is also used by cluster '{other}'")
            ports[cluster.port] = name
        if cluster.brokers > 1 and cluster.coordination == "standalone":
            problem(("clusters", name, "brokers"),
                    f"{cluster.brokers} brokers need coordination: zookeeper; a standalone cluster is one broker "
                    "(its metadata in its own data dir)")
        _check_replication(name, cluster, problem)
        _check_security(name, cluster, problem)
    seen_links: dict[frozenset[str], int] = {}
    for i, link in enumerate(spec.links):
        for j, dc in enumerate(link.between):
            if dc not in spec.datacenters:
                problem(("links", i, "between", j), f"unknown datacenter '{dc}'{_suggest(dc, dcs)}")
        pair = frozenset(link.between)
        if len(pair) == 1:
            problem(("links", i, "between"), "a link joins two different datacenters")
        elif pair in seen_links:
            problem(("links", i, "between"), f"these datacenters are already linked by links[{seen_links[pair]}]")
        seen_links.setdefault(pair, i)
        if link.jitter > link.latency:
            problem(("links", i, "jitter"), f"jitter {link.jitter}ms is larger than the latency {link.latency}ms")
    for name, mirror in spec.mirrors.items():
        ends_known = True
        for end in ("source", "target"):
            cluster = getattr(mirror, end)
            if cluster not in spec.clusters:
                problem(("mirrors", name, end), f"unknown cluster '{cluster}'{_suggest(cluster, clusters)}")
                ends_known = False
        if not ends_known:
            continue
        if mirror.source == mirror.target:
            problem(("mirrors", name, "target"), "a mirror copies between two different clusters")
            continue
        a, b = spec.clusters[mirror.source].datacenter, spec.clusters[mirror.target].datacenter
        if a != b and a in spec.datacenters and b in spec.datacenters and frozenset((a, b)) not in seen_links:
            problem(("mirrors", name, "target"),
                    f"no WAN link between datacenters '{a}' and '{b}'; add one under links:")
    _check_link_mirrors(spec, problem)
    _check_mirror_principals(spec, problem)
    _check_cycles(spec, problem)
    return problems


def _check_security(name: str, cluster: Cluster, problem: Callable[[tuple[str | int, ...], str], None]) -> None:
    """What a cluster's `security:` cannot mean: SCRAM without ZooKeeper (SCRAM credentials live
    in /config/users), secured brokers in a one-broker cluster, a user named twice or called
    like the launcher's own user, an ACL naming no resource or several."""
    security = cluster.security
    if security is None:
        return
    at = ("clusters", name, "security")
    if security.mechanism is not None and security.mechanism.startswith("SCRAM") \
            and cluster.coordination != "zookeeper":
        problem((*at, "mechanism"), f"{security.mechanism} keeps its credentials in ZooKeeper (/config/users): it "
                                    "needs coordination: zookeeper; a standalone cluster uses PLAIN")
    if security.zookeeper != "PLAINTEXT" and cluster.coordination != "zookeeper":
        problem((*at, "zookeeper"), "a standalone cluster has no ZooKeeper: remove zookeeper, or use "
                                    "coordination: zookeeper")
    if security.between_brokers != "PLAINTEXT" and cluster.coordination != "zookeeper":
        problem((*at, "between_brokers"), "a standalone cluster is one broker, with no traffic between brokers: "
                                          "remove between_brokers, or use coordination: zookeeper")
    seen: set[str] = set()
    for i, user in enumerate(security.users):
        if user == ADMIN_USER:
            problem((*at, "users", i), f"'{ADMIN_USER}' is the launcher's own user (a super user it creates "
                                       "topics and ACLs with): choose another name")
        elif user in seen:
            problem((*at, "users", i), f"user '{user}' is listed twice")
        seen.add(user)
    for i, acl in enumerate(security.acls or []):
        if len(acl.resources) != 1:
            problem((*at, "acls", i), "an ACL names exactly one resource: topic:, group:, transactional_id: "
                                      "or cluster: true")
        elif acl.pattern == "prefixed" and acl.cluster:
            problem((*at, "acls", i, "pattern"), "the cluster resource has no prefixed form (pattern: literal)")


def _mirror_listener(spec: TopologySpec, mirror: Mirror, end: str) -> str:
    """The protocol of the listener the mirror reaches `end` (source or target) through: it runs
    in the target's datacenter, so a source elsewhere is read over its WAN listener."""
    cluster = spec.clusters[getattr(mirror, end)]
    if cluster.security is None:
        return "PLAINTEXT"
    home = spec.clusters[mirror.target].datacenter
    return cluster.security.wan if cluster.datacenter != home else cluster.security.local


def _check_mirror_principals(spec: TopologySpec, problem: Callable[[tuple[str | int, ...], str], None]) -> None:
    """A mirror logs in as its principal wherever the listener it uses asks who it is (SASL, or
    TLS with client certificates): the principal must be a user of that cluster."""
    for name, mirror in spec.mirrors.items():
        if mirror.source not in spec.clusters or mirror.target not in spec.clusters:
            continue  # reported above
        for end in ("source", "target"):
            cluster_name = getattr(mirror, end)
            security = spec.clusters[cluster_name].security
            protocol = _mirror_listener(spec, mirror, end)
            if security is None or protocol == "PLAINTEXT":
                continue
            if mirror.principal is None:
                problem(("mirrors", name), f"the mirror reaches cluster '{cluster_name}' over {protocol}: give it "
                                           f"principal: <a user of '{cluster_name}'> to log in as")
            elif mirror.principal not in security.users:
                problem(("mirrors", name, "principal"),
                        f"'{mirror.principal}' is not a user of cluster '{cluster_name}', which the mirror "
                        f"reaches over {protocol}: add it to clusters.{cluster_name}.security.users")


def _check_link_mirrors(spec: TopologySpec, problem: Callable[[tuple[str | int, ...], str], None]) -> None:
    """A link-mode mirror keeps topic names, and its copies are mirror topics it creates itself:
    `naming: default` given with it cannot be honoured, and a topic the target cluster declares
    under the same name would be an ordinary topic the mirror must not write to."""
    for name, mirror in spec.mirrors.items():
        if mirror.mode != "link":
            continue
        if "naming" in mirror.model_fields_set and mirror.naming == "default":
            problem(("mirrors", name, "naming"),
                    "a link-mode mirror keeps topic names (its mirror topics have the source's offsets under "
                    "the source's names): remove `naming: default`, or use mode: mm2 for <source>.<topic> names")
        if mirror.exactly_once_support == "required":
            problem(("mirrors", name, "exactly_once_support"),
                    "exactly_once_support is for mode: mm2 (a link-mode mirror copies transactional batches with "
                    "their markers, so read_committed readers at the target already see what they see at the "
                    "source): remove it, or use mode: mm2")
        source, target = spec.clusters.get(mirror.source), spec.clusters.get(mirror.target)
        if source is None or target is None or mirror.source == mirror.target:
            continue  # reported above
        for topic in source.topics:
            if topic in target.topics and mirror.topics.matches(topic):
                problem(("clusters", mirror.target, "topics", topic),
                        f"link-mode mirror '{name}' copies topic '{topic}' from cluster '{mirror.source}' into "
                        f"'{mirror.target}' as a read-only mirror topic it creates itself; cluster "
                        f"'{mirror.target}' cannot declare a topic of that name too (remove it here, or exclude "
                        f"it from the mirror's topics)")


# Cluster configs that name a replica count: more than the cluster's brokers can never be met.
_REPLICA_COUNT_CONFIGS = ("default.replication.factor", "min.insync.replicas")


def _count(value: object) -> int | None:
    """A config value that is a whole number (3 or "3"); None for anything else, which the
    broker itself refuses with its own message."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def _check_replication(name: str, cluster: Cluster, problem: Callable[[tuple[str | int, ...], str], None]) -> None:
    """Replication factors (a topic's, or the cluster's default.replication.factor that topics
    without one get) and min.insync.replicas above the broker count: Kafka refuses such a topic
    with INVALID_REPLICATION_FACTOR, or every acks=all write with NOT_ENOUGH_REPLICAS."""
    for key in _REPLICA_COUNT_CONFIGS:
        value = _count(cluster.configs.get(key))
        if value is not None and value > cluster.brokers:
            problem(("clusters", name, "configs", key),
                    f"{key} {value} is more than the cluster's {cluster.brokers} broker(s)")
    for topic, topic_spec in cluster.topics.items():
        rf = topic_spec.replication_factor
        if rf is not None and rf > cluster.brokers:
            problem(("clusters", name, "topics", topic, "replication_factor"),
                    f"replication factor {rf} is more than the cluster's {cluster.brokers} broker(s)")
        isr = _count(topic_spec.configs.get("min.insync.replicas"))
        if isr is not None and isr > cluster.brokers:
            problem(("clusters", name, "topics", topic, "configs", "min.insync.replicas"),
                    f"min.insync.replicas {isr} is more than the cluster's {cluster.brokers} broker(s)")


def _check_cycles(spec: TopologySpec, problem: Callable[[tuple[str | int, ...], str], None]) -> None:
    """Mirror cycles where every hop keeps topic names (identity naming, or link mode): records
    would circle for ever (mm2), or each link mirror would find the other's topics in its way."""
    edges: dict[str, list[tuple[str, str]]] = {}
    for name, mirror in spec.mirrors.items():
        if mirror.keeps_names and mirror.source in spec.clusters and mirror.target in spec.clusters:
            edges.setdefault(mirror.source, []).append((mirror.target, name))
    reported: set[frozenset[str]] = set()

    def walk(start: str, node: str, trail: list[str], names: list[str]) -> None:
        for target, mirror_name in edges.get(node, []):
            if target == start:
                cycle = frozenset(names + [mirror_name])
                if cycle not in reported:
                    reported.add(cycle)
                    loop = " -> ".join([*trail, start])
                    names_key = "mode" if spec.mirrors[mirror_name].mode == "link" else "naming"
                    links = any(spec.mirrors[m].mode == "link" for m in cycle)
                    how = "that keeps topic names (identity naming or link mode)" if links else \
                        "with identity naming"
                    advice = ("use naming: default on at least one of these mirrors" if any(
                        spec.mirrors[m].mode == "mm2" for m in cycle) else
                        "link-mode mirrors keep names, so at least one of these must be mode: mm2 "
                        "with naming: default")
                    problem(("mirrors", mirror_name, names_key),
                            f"mirror loop {how} on every hop ({loop}): records would circle for ever; {advice}")
            elif target not in trail:
                walk(start, target, [*trail, target], [*names, mirror_name])

    for start in edges:
        walk(start, start, [start], [])


def load_topology(path: Path) -> Topology:
    """Parse and check `path`. Raises TopologyError listing every problem found."""
    file = str(path)
    data, positions = load_yaml(path)
    if not isinstance(data, dict):
        raise TopologyError([Problem(file, 1, 1, "(top level)", "a topology is a mapping with datacenters:, "
                                                                "clusters:, links: and mirrors:")])
    try:
        spec = TopologySpec.model_validate(data)
    except ValidationError as exc:
        raise TopologyError(schema_problems(exc, file, positions)) from None
    problems = _semantic_problems(spec, file, positions)
    name = spec.name or path.stem
    if spec.name is None:
        try:
            check_name(name)
        except ValueError as exc:
            # The name defaults to the file's: it names the state dir (.causeway/<name>) too.
            problems.append(Problem(file, 1, 1, "name", f"no name: given, and the file's name {exc}; add name:"))
    if problems:
        raise TopologyError(problems)
    return Topology(name, path, spec)
