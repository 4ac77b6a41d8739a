"""`causeway mirror promote`: a mirror's topics become normal writable topics at its target.

    causeway mirror promote TOPOLOGY --mirror NAME [--state-dir DIR] [--topics REGEX] [--failover]
                            [--timeout SECONDS] [--quiet]
    causeway mirror promote --bootstrap HOST:PORT [--source-bootstrap HOST:PORT] [--mirror NAME]
                            [--command-config FILE] ...

TOPOLOGY is the topology file `causeway up` started, or its name; the mirror's clusters are
found as `causeway status` finds them (deploy/cli/pipeline_common.py), and a secured cluster is
logged in to as the launcher does (its admin's client file, which the state file names). Without --failover the
command refuses a source that does not answer (use --failover), waits (progress every few
seconds, records left, rate and ETA, or a bar when stderr is a terminal; at most --timeout, 60 s
by default) until the target holds the source's log end on
every partition, copies the groups' offsets one last time, then promotes topic by topic; with
--failover it promotes at once and never waits on the source (its ends, the groups' offsets):
left at once when it refuses connections, after 1 s without an answer, after 2 s in all; each
partition's records not copied and the groups not copied at the end are printed, "unknown"
(report deferred) where the source did not answer. An mm2-mode mirror (a topology names its mode) is promoted by
creating its topics at the target under their source names, with the source's partition counts
and configs (mirror/promote_mm2.py). Exit 0 when every selected topic was promoted, or all were
already (a second run); 1 on a timeout, a refusal, or nothing to promote (each topic not
promoted is named with why); 2 for a bad command line.
"""

from __future__ import annotations

import argparse
import re
import sys
from functools import partial
from pathlib import Path

from deploy.cli.client_config import command_security, file_security
from deploy.cli.command import UsageError, add_quiet, progress_output, run, say
from deploy.progress import Progress

__all__ = ["check_timeout_and_topics", "register_promote"]


def check_timeout_and_topics(args: argparse.Namespace) -> None:
    """The options `promote` and the failback commands share: --timeout above 0, --topics a
    regular expression. Raises UsageError (exit 2) naming the option."""
    if args.timeout <= 0:
        raise UsageError("--timeout must be positive")
    if args.topics is not None:
        try:
            re.compile(args.topics)
        except re.error as exc:
            raise UsageError(f"--topics {args.topics!r} is not a regular expression: {exc}") from None


def _promote(args: argparse.Namespace) -> int:
    import trio

    from mirror.promote import promote

    check_timeout_and_topics(args)
    if args.topology is not None:
        if args.bootstrap or args.source_bootstrap:
            raise UsageError("give a TOPOLOGY (with --mirror) or --bootstrap/--source-bootstrap, not both")
        from deploy.cli.pipeline_common import mirror_config_from_topology, mirror_from_topology, mirror_logins

        spec = mirror_from_topology(args)  # the way `causeway status` finds the running clusters
        target, source = spec.target_bootstrap, spec.source_bootstrap
        config = mirror_config_from_topology(args)  # its mode, topic and group patterns
        # A secured cluster's LOCAL listener: log in as the launcher does (its admin's file).
        logins = {role: file_security(path, "the client file the launcher recorded") if path else None
                  for role, path in mirror_logins(args).items()}
        target_security, source_security = command_security(args) or logins["target"], logins["source"]
    elif args.bootstrap:
        target, source = args.bootstrap, args.source_bootstrap
        target_security, source_security = command_security(args), None
        config = None
    else:
        raise UsageError("give a TOPOLOGY and --mirror NAME, or the target's --bootstrap HOST:PORT")
    # The wait for the copy: a bar on a terminal (stderr), else a line every few seconds; with
    # --quiet neither, nor the lines of the work meanwhile: the report's lines and errors only.
    progress = progress_output(args)
    with Progress("copy catching up", progress) as catching_up:
        report = trio.run(partial(promote, target, source_bootstrap=source, mirror=args.mirror,
                                  topics_regex=args.topics, failover=args.failover, timeout_s=args.timeout, say=say,
                                  progress=progress, on_behind=catching_up.left, target_security=target_security,
                                  source_security=source_security, config=config))
    if report.promoted:
        say(f"promoted {len(report.promoted)} topic(s) at {report.target}: {', '.join(report.promoted)}")
    elif report.already and not report.failed:
        say(f"nothing left to promote at {report.target}: {', '.join(report.already)} promoted already")
    for topic, why in sorted(report.failed.items()):
        print(f"Error: {topic}: {why}", file=sys.stderr, flush=True)
    if report.timed_out:
        print("Error: nothing was promoted; stop the source's producers and try again with a longer --timeout, "
              "or promote at once with --failover", file=sys.stderr, flush=True)
    return 0 if report.ok else 1


def register_promote(commands: argparse._SubParsersAction[argparse.ArgumentParser], *, name: str = "promote"
                     ) -> None:
    """`promote`, or (`name` "failover") `failover`: the same command with --failover implied,
    by its Cluster Linking name (`kafka-mirrors --failover`)."""
    failover = name == "failover"
    if failover:
        p = commands.add_parser(
            "failover", help="promote a mirror's topics at once, without waiting for the source (promote --failover)",
            description="Fail over: promote mirror topics (those with causeway.mirror.name set) to normal topics at "
                        "once, as `causeway mirror promote --failover` does, without waiting for the source (it may "
                        "be down or frozen); the source is asked for its log ends and the groups' offsets beside the "
                        "promotion and never waited for (left at once when it refuses connections, after 1 s "
                        "without an answer, after 2 s in all), and the records not copied per partition are "
                        "reported (unknown and deferred when it did not answer). Running it again reports "
                        "the topics promoted already. See docs/operations/mirror-link.md.")
    else:
        p = commands.add_parser(
            "promote", help="make a mirror's topics normal writable topics at its target (switch-over or failover)",
            description="Promote mirror topics (those with causeway.mirror.name set) to normal topics by deleting "
                        "that config, after copying the groups' committed offsets one last time. Without "
                        "--failover, the source must answer, and the target must first hold the source's log end "
                        "on every partition. For an mm2-mode mirror (with a topology), create its topics at the "
                        "target under their source names with the source's partition counts and configs. "
                        "Running it again reports the topics promoted already. See docs/operations/mirror-link.md.")
    p.add_argument("topology", nargs="?", help="the topology file `causeway up` started, or its name")
    p.add_argument("--mirror", help="the mirror (required with a topology; with --bootstrap it "
                                    "narrows to that link-mode mirror's topics)")
    p.add_argument("--state-dir", default=None, help="the launcher's state dir (default .causeway/<topology name>)")
    p.add_argument("--bootstrap", help="without a topology: the target cluster, where the mirror topics are")
    p.add_argument("--source-bootstrap", help="without a topology: the source cluster (needed unless --failover)")
    p.add_argument("--command-config", type=Path, metavar="FILE",
                   help="Kafka client properties that log in to the target (security.protocol, ssl.*, sasl.*); "
                        "with a topology, default: the admin's file `causeway up` recorded for a secured cluster")
    p.add_argument("--topics", metavar="REGEX", help="promote only mirror topics whose whole name matches")
    if failover:
        p.set_defaults(failover=True)
    else:
        p.add_argument("--failover", action="store_true",
                       help="promote at once, without waiting for the source (it may be down or frozen); report "
                            "records not copied per partition and groups not copied at the end (the same as "
                            "`causeway mirror failover`)")
    p.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                   help="how long to wait for the copy to catch up (default 60); with --failover, the source "
                        "is given at most 2 s or this, whichever is shorter")
    add_quiet(p)

    def main(args: argparse.Namespace) -> int:
        from mirror.promote import PromotionError

        return run(f"causeway mirror {name}", lambda: _promote(args),
                   bootstrap=args.bootstrap or "the mirror's target cluster",
                   errors=[(PromotionError, 1, lambda exc: f"Error: {exc}")])

    p.set_defaults(func=main)
