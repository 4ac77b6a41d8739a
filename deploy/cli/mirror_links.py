"""`causeway mirror list | describe | pause | resume`: link operations on a link-mode mirror's
topics (mirror/link_ops.py), as Cluster Linking's `kafka-mirrors --list | --describe | --pause |
--resume`.

    causeway mirror list [TOPOLOGY | --bootstrap HOST:PORT] [--json]
    causeway mirror describe TOPOLOGY --mirror NAME [--topics REGEX] [--json]
    causeway mirror describe --bootstrap TARGET [--source-bootstrap SOURCE] [--mirror NAME] ...
    causeway mirror pause | resume TOPOLOGY --mirror NAME [--topics REGEX]
    causeway mirror pause | resume --bootstrap TARGET --mirror NAME [--topics REGEX]

With a TOPOLOGY the mirror's clusters are found as `causeway mirror promote` finds them, and what
the mirror process last reported (its status file: a FAILED topic and why) is shown too. Exit 0
when done (a pause of a paused topic is done: it says so); 1 when refused (an unknown mirror, a
topic that is not that mirror's mirror topic: nothing is changed); 2 for a bad command line.
"""

from __future__ import annotations

import argparse
import json
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploy.cli.client_config import command_security, file_security
from deploy.cli.command import UsageError, run, say
from deploy.cli.groups import table
from deploy.cli.mirror_promote import check_timeout_and_topics
from security.client import ClientSecurity

if TYPE_CHECKING:
    from deploy.launcher.state_file import MirrorRecord
    from mirror.status import MirrorStatus

__all__ = ["register_links"]


class _Clusters:
    """Where a command finds the mirror: the target (and source) and how to log in to each."""

    def __init__(self, args: argparse.Namespace, *, need_mirror: bool) -> None:
        self.config: Any = None
        self.source: str | None = None
        self.record: MirrorRecord | None = None
        self.state_dir = Path()
        self.target_security: ClientSecurity | None
        self.source_security: ClientSecurity | None = None
        if args.topology is not None:
            if args.bootstrap or getattr(args, "source_bootstrap", None):
                raise UsageError("give a TOPOLOGY (with --mirror) or --bootstrap, not both")
            from deploy.cli.pipeline_common import mirror_config_from_topology, mirror_logins, started_mirror

            record, clusters, state_dir = started_mirror(args)  # Refused (exit 1) for an unknown mirror
            self.record, self.state_dir = record, state_dir
            if record.mode != "link":
                raise UsageError(f"mirror {args.mirror} is an {record.mode} mirror: link operations need a link-mode "
                                 f"mirror")
            self.target, self.source = clusters["target"].bootstrap, clusters["source"].bootstrap
            self.config = mirror_config_from_topology(args)
            logins = {role: file_security(path, "the client file the launcher recorded") if path else None
                      for role, path in mirror_logins(args).items()}
            self.target_security = command_security(args) or logins["target"]
            self.source_security = logins["source"]
        elif args.bootstrap:
            if need_mirror and not args.mirror:
                raise UsageError("--mirror NAME is required: the link-mode mirror whose topics to change")
            self.target, self.source = args.bootstrap, getattr(args, "source_bootstrap", None)
            self.target_security = command_security(args)
        else:
            raise UsageError("give a TOPOLOGY and --mirror NAME, or the target's --bootstrap HOST:PORT")


def _reported(clusters: _Clusters) -> dict[str, Any]:
    """The topic states the mirror process last wrote (empty when there is no status file)."""
    if clusters.record is None:
        return {}
    status = _report(clusters.record, clusters.state_dir)
    return dict(status.topic_states) if status is not None else {}


def _report(record: MirrorRecord, state_dir: Path) -> MirrorStatus | None:
    """What the mirror last wrote to its status file, as `causeway status` reads it; None when
    it wrote nothing (yet) or the file cannot be used."""
    from deploy.launcher.control import read_mirror_report
    from mirror.status import StatusFileError

    try:
        return read_mirror_report(record, state_dir)
    except StatusFileError:
        return None


def _describe(args: argparse.Namespace) -> int:
    import trio

    from mirror.link_ops import describe_links

    check_timeout_and_topics(args)
    clusters = _Clusters(args, need_mirror=False)
    reported = _reported(clusters)
    stopped = sorted(t for t, state in reported.items() if state.state == "STOPPED")
    if clusters.config is not None:
        stopped = sorted(set(stopped) | set(_config_topics(clusters)))
    links = trio.run(partial(describe_links, clusters.target, mirror=args.mirror, topics_regex=args.topics,
                             source_bootstrap=clusters.source, stopped=stopped, reported=reported,
                             target_security=clusters.target_security, source_security=clusters.source_security))
    if args.json:
        print(json.dumps({"target": clusters.target, "source": clusters.source,
                          "topics": [link.to_json() for link in links]}, indent=1))
        return 0
    rows = [(link.topic, link.mirror or "-", link.state.state, _or_dash(link.state.lag),
             _or_dash(link.state.lag_ms), len(link.partitions)) for link in links]
    print(table(("TOPIC", "MIRROR", "STATE", "LAG", "LAG-MS", "PARTITIONS"), rows))
    for link in links:
        if link.state.reason:
            print(f"  {link.topic}: {link.state.state}: {link.state.reason}")
        if args.partitions:
            for p in link.partitions:
                print(f"  {link.topic}-{p.partition}: target end {p.target_end}, source end {_or_dash(p.source_end)}, "
                      f"lag {_or_dash(p.lag)}, lag-ms {_or_dash(p.lag_ms)}")
    if not links:
        say(f"no mirror topics at {clusters.target}" + (f" of mirror {args.mirror}" if args.mirror else ""))
    return 0


def _config_topics(clusters: _Clusters) -> list[str]:
    """The target's normal topics the mirror's config selects (its promoted topics: link mode
    keeps names). Read from the target: one list, under the describe's own client."""
    import trio

    from broker.client.admin import list_topics
    from broker.client.cluster import open_client
    from mirror.config import INTERNAL_TOPICS
    from mirror.naming import ReplicationPolicy

    async def names() -> list[str]:
        async with open_client(clusters.target, client_id="causeway-mirror-link",
                               security=clusters.target_security) as target:
            return sorted(await list_topics(target))

    config = clusters.config
    return [t for t in trio.run(names) if config.topics.matches(t, INTERNAL_TOPICS)
            and not ReplicationPolicy.is_heartbeats(t)]


def _pause(args: argparse.Namespace, *, paused: bool) -> int:
    import trio

    from mirror.link_ops import set_paused

    check_timeout_and_topics(args)
    clusters = _Clusters(args, need_mirror=True)
    report = trio.run(partial(set_paused, clusters.target, args.mirror, paused=paused, topics_regex=args.topics,
                              target_security=clusters.target_security))
    verb = "paused" if paused else "resumed"
    if report.already:
        say(f"{verb} already: {', '.join(report.already)}")
    for topic, brokers in sorted(report.not_applied.items()):
        say(f"note: {topic}: broker(s) {', '.join(map(str, brokers))} did not show it within 10 s yet")
    if report.changed:
        say(f"{verb} {len(report.changed)} mirror topic(s) of mirror {args.mirror} at {clusters.target}: "
            f"{', '.join(report.changed)}")
    for tp, end in sorted(report.ends.items()):
        say(f"  {tp.topic}-{tp.partition}: the copy ends at offset {end}"
            + ("" if paused else "; copying resumes there"))
    return 0


def _list(args: argparse.Namespace) -> int:
    import trio

    from mirror.link_ops import mirror_topics

    if args.topology is not None:
        if args.bootstrap:
            raise UsageError("give a TOPOLOGY or --bootstrap, not both")
        return _list_topology(args)
    if not args.bootstrap:
        raise UsageError("give a TOPOLOGY, or the target's --bootstrap HOST:PORT")

    async def listed() -> dict[str, Any]:
        from broker.client.cluster import open_client

        async with open_client(args.bootstrap, client_id="causeway-mirror-link",
                               security=command_security(args)) as target:
            return await mirror_topics(target)

    topics = trio.run(listed)
    mirrors: dict[str, dict[str, Any]] = {}
    for t in topics.values():
        if t.mirror is not None:
            entry = mirrors.setdefault(t.mirror, {"target": args.bootstrap, "topics": {}})
            entry["topics"][t.name] = t.state
    return _print_mirrors(mirrors, args.json)


def _list_topology(args: argparse.Namespace) -> int:
    from deploy.cli.pipeline_common import started_topology

    state, state_dir = started_topology(args)
    mirrors: dict[str, dict[str, Any]] = {}
    for name, record in sorted(state.mirrors.items()):
        topics: dict[str, str] = {}
        status = _report(record, state_dir)
        if status is not None:
            topics = {t: s.state for t, s in status.topic_states.items()}
        mirrors[name] = {"mode": record.mode, "source": record.source, "target": record.target, "topics": topics}
    return _print_mirrors(mirrors, args.json)


def _print_mirrors(mirrors: dict[str, dict[str, Any]], as_json: bool) -> int:
    if as_json:
        print(json.dumps({"mirrors": mirrors}, indent=1))
        return 0
    rows: list[tuple[object, ...]] = []
    for name, m in mirrors.items():
        counts: dict[str, int] = {}
        for state in m["topics"].values():
            counts[state] = counts.get(state, 0) + 1
        states = ", ".join(f"{state} {n}" for state, n in sorted(counts.items())) or "-"
        rows.append((name, m.get("mode", "link"), m.get("source", "-"), m["target"], len(m["topics"]), states))
    print(table(("MIRROR", "MODE", "SOURCE", "TARGET", "TOPICS", "STATES"), rows))
    if not mirrors:
        say("no mirrors")
    return 0


def _or_dash(value: object) -> object:
    return "-" if value is None else value


def _common(p: argparse.ArgumentParser, *, mirror_help: str, source: bool) -> None:
    p.add_argument("topology", nargs="?", help="the topology file `causeway up` started, or its name")
    p.add_argument("--mirror", help=mirror_help)
    p.add_argument("--state-dir", default=None, help="the launcher's state dir (default .causeway/<topology name>)")
    p.add_argument("--bootstrap", help="without a topology: the target cluster, where the mirror topics are")
    if source:
        p.add_argument("--source-bootstrap", help="without a topology: the source cluster (for the lag)")
    p.add_argument("--command-config", type=Path, metavar="FILE",
                   help="Kafka client properties that log in to the target (security.protocol, ssl.*, sasl.*); "
                        "with a topology, default: the admin's file `causeway up` recorded for a secured cluster")
    p.add_argument("--topics", metavar="REGEX", help="only mirror topics whose whole name matches")
    p.set_defaults(timeout=60.0)


def register_links(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from mirror.link_ops import LinkOpsError

    errors = [(LinkOpsError, 1, lambda exc: f"Error: {exc}")]

    p = commands.add_parser(
        "list", help="list the link-mode mirrors with topics at a target, or a topology's mirrors",
        description="List mirrors: with a TOPOLOGY, the mirrors `causeway up` started, with their topics' states "
                    "as each mirror last reported them; with --bootstrap, the link-mode mirrors that have mirror "
                    "topics at that cluster (their causeway.mirror.name), each topic ACTIVE or PAUSED. "
                    "See docs/operations/mirror-link.md.")
    p.add_argument("topology", nargs="?", help="the topology file `causeway up` started, or its name")
    p.add_argument("--state-dir", default=None, help="the launcher's state dir (default .causeway/<topology name>)")
    p.add_argument("--bootstrap", help="without a topology: the cluster whose mirror topics to list")
    p.add_argument("--command-config", type=Path, metavar="FILE",
                   help="Kafka client properties that log in to the --bootstrap cluster")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=lambda args: run("causeway mirror list", lambda: _list(args),
                                         bootstrap=args.bootstrap or "the topology's clusters", errors=errors))

    p = commands.add_parser(
        "describe", help="each mirror topic's state (ACTIVE, PAUSED, STOPPED, SOURCE_UNAVAILABLE, FAILED) and lag",
        description="Describe mirror topics: each one's state (ACTIVE, PAUSED, STOPPED once promoted, "
                    "SOURCE_UNAVAILABLE when the source does not answer within 5 s, FAILED with the reason the "
                    "mirror reported), its lag in records (the source's log end minus the copy's) and in time (how "
                    "long the oldest record not copied has waited, in ms). The state is read from the target "
                    "topics' configs, so it is the same whichever process restarted. "
                    "See docs/operations/mirror-link.md.")
    _common(p, mirror_help="the mirror (required with a topology; with --bootstrap it narrows to its topics)",
            source=True)
    p.add_argument("--partitions", action="store_true", help="a line per partition too")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=lambda args: run("causeway mirror describe", lambda: _describe(args),
                                         bootstrap=args.bootstrap or "the mirror's clusters", errors=errors))

    for name, paused in (("pause", True), ("resume", False)):
        if paused:
            help_text = "stop copying a mirror's topics, keeping them mirror topics (state PAUSED)"
            description = ("Pause mirror topics: set causeway.mirror.state=PAUSED on the mirror's topics at the "
                           "target (all of them, or those --topics names) and wait until every broker applied it. "
                           "The target then refuses the mirror's appends to them, and the mirror stops copying "
                           "them; the state lives in the topic's config, so restarts of the mirror or the brokers "
                           "keep it. Refused, changing nothing, when a named topic is not that mirror's mirror "
                           "topic (a normal or promoted topic, another mirror's). See docs/operations/mirror-link.md.")
        else:
            help_text = "copy a paused mirror's topics again, from where each copy ends"
            description = ("Resume paused mirror topics: delete causeway.mirror.state from the mirror's topics at "
                           "the target (all of them, or those --topics names); the mirror starts copying them again "
                           "at its next topic discovery, from the copy's end, so nothing is lost or copied twice. "
                           "Refused, changing nothing, as pause is. See docs/operations/mirror-link.md.")
        p = commands.add_parser(name, help=help_text, description=description)
        _common(p, mirror_help="the link-mode mirror whose topics to " + name + " (required)", source=False)
        p.set_defaults(func=lambda args, name=name, paused=paused: run(
            f"causeway mirror {name}", lambda: _pause(args, paused=paused),
            bootstrap=args.bootstrap or "the mirror's target cluster", errors=errors))
