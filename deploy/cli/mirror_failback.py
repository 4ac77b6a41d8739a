"""`causeway mirror truncate-and-restore` and `causeway mirror reverse-and-start`: failback of a
link-mode mirror (mirror/failback.py): the old primary's topics become mirror topics of a
reverse mirror from the new primary.

    causeway mirror truncate-and-restore TOPOLOGY --mirror NAME [--reverse-mirror NAME] [--topics REGEX]
    causeway mirror truncate-and-restore --bootstrap OLD --new-primary-bootstrap NEW --reverse-mirror NAME
    causeway mirror reverse-and-start ...   (the same arguments)

With a TOPOLOGY, --mirror names the link-mode mirror that copied the old primary (its source)
to the new one (its target, promoted since); its clusters are found as `causeway mirror
promote` finds them. Exit 0 when every selected partition is restored; 1 when one was refused
(nothing is cut anywhere then) or did not finish (run the command again); 2 for a bad command line.
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path

from deploy.cli.client_config import command_security, file_security
from deploy.cli.command import UsageError, run, say
from deploy.cli.mirror_promote import check_timeout_and_topics

__all__ = ["register_failback"]


def _failback(args: argparse.Namespace, *, truncate: bool) -> int:
    import trio

    from mirror.failback import failback

    check_timeout_and_topics(args)
    topics: list[str] | None = [args.topics] if args.topics is not None else None
    if args.topology is not None:
        if args.bootstrap or args.new_primary_bootstrap:
            raise UsageError("give a TOPOLOGY (with --mirror) or --bootstrap/--new-primary-bootstrap, not both")
        if not args.mirror:
            raise UsageError("--mirror NAME is required with a topology")
        from deploy.cli.pipeline_common import mirror_from_topology, mirror_logins

        spec = mirror_from_topology(args)
        if spec.mode != "link":
            raise UsageError(f"mirror {args.mirror} is an {spec.mode} mirror: failback needs a link-mode mirror")
        old, new = spec.source_bootstrap, spec.target_bootstrap
        logins = {role: file_security(path, "the client file the launcher recorded") if path else None
                  for role, path in mirror_logins(args).items()}
        old_security, new_security = command_security(args) or logins["source"], logins["target"]
        reverse = args.reverse_mirror or f"{args.mirror}-reverse"
        if topics is None and spec.include:
            topics = list(spec.include)
    elif args.bootstrap:
        if not args.new_primary_bootstrap or not args.reverse_mirror:
            raise UsageError("with --bootstrap (the old primary), give --new-primary-bootstrap and --reverse-mirror")
        old, new, reverse = args.bootstrap, args.new_primary_bootstrap, args.reverse_mirror
        old_security = command_security(args)
        new_security = (file_security(args.new_primary_command_config, "--new-primary-command-config")
                        if args.new_primary_command_config else None)
    else:
        raise UsageError("give a TOPOLOGY and --mirror NAME, or the old primary's --bootstrap HOST:PORT")
    report = trio.run(partial(failback, old, new, reverse_mirror=reverse, truncate=truncate, topics=topics,
                              timeout_s=args.timeout, say=say, old_security=old_security, new_security=new_security))
    if report.refused:
        for p in report.partitions:
            assert p.result is not None
            if p.result.error_message:
                print(f"Error: {p.topic}-{p.partition}: {p.result.error_message}", file=sys.stderr, flush=True)
        print("Error: refused: nothing was changed at the old primary", file=sys.stderr, flush=True)
        return 1
    cut = [p for p in report.partitions if p.result is not None and p.result.records]
    if cut:
        say(f"cut {report.cut_records} record(s) acknowledged at the old primary and never copied (the failover's "
            f"RPO) from {len(cut)} partition(s); each partition's are kept in the directory named above")
    if not report.ok:
        print("Error: not every partition is restored (see above): run the command again", file=sys.stderr,
              flush=True)
        return 1
    say(f"restored {len(report.partitions)} partition(s) of {len(report.topics)} topic(s) as mirror topics of mirror "
        f"{reverse}; start it (mode: link, source {new}, target {old}) to copy the new primary's records")
    return 0


def _register_one(commands: argparse._SubParsersAction[argparse.ArgumentParser], name: str, *, truncate: bool,
                  help_text: str, description: str) -> None:
    p = commands.add_parser(name, help=help_text, description=description)
    p.add_argument("topology", nargs="?", help="the topology file `causeway up` started, or its name")
    p.add_argument("--mirror", help="with a topology: the link-mode mirror from the old primary (its source) to the "
                                    "new primary (its target, promoted)")
    p.add_argument("--state-dir", default=None, help="the launcher's state dir (default .causeway/<topology name>)")
    p.add_argument("--reverse-mirror", metavar="NAME",
                   help="the link-mode mirror that will copy the new primary to the old one: the topics' new "
                        "causeway.mirror.name (default with a topology: <mirror>-reverse)")
    p.add_argument("--bootstrap", help="without a topology: the old primary, whose topics become mirror topics")
    p.add_argument("--new-primary-bootstrap", metavar="HOST:PORT", help="without a topology: the new primary")
    p.add_argument("--command-config", type=Path, metavar="FILE",
                   help="Kafka client properties that log in to the old primary")
    p.add_argument("--new-primary-command-config", type=Path, metavar="FILE",
                   help="Kafka client properties that log in to the new primary")
    p.add_argument("--topics", metavar="REGEX", help="only topics whose whole name matches (default: the mirror's "
                                                     "topics, or every topic both clusters have)")
    p.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                   help="how long each leader may take to apply the change and have its replicas follow "
                        "(default 60)")

    def main(args: argparse.Namespace) -> int:
        from mirror.failback import FailbackError

        return run(f"causeway mirror {name}", lambda: _failback(args, truncate=truncate),
                   bootstrap=args.bootstrap or "the mirror's clusters",
                   errors=[(FailbackError, 1, lambda exc: f"Error: {exc}")])

    p.set_defaults(func=main)


def register_failback(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    _register_one(
        commands, "truncate-and-restore", truncate=True,
        help_text="after a failover: cut the old primary's diverged tail (kept in quarantine) and make its topics "
                  "mirror topics of the new primary",
        description="Failback after a failover. Per partition, find where the old primary's log diverges from the "
                    "promoted copy at the new primary (the last batch both hold), check every partition (nothing is "
                    "cut if one is refused: a cluster that was never the copy's source, logs that share nothing), "
                    "make the topics mirror topics of the reverse mirror, and cut each diverged tail at its leader "
                    "into the partition's quarantine directory, named with offsets and counts: the records "
                    "acknowledged at the old primary that never reached the new one. See docs/operations/failback.md.")
    _register_one(
        commands, "reverse-and-start", truncate=False,
        help_text="after a planned promote: make the old primary's topics mirror topics of the new primary, "
                  "cutting nothing",
        description="Failback after a planned promote (switch-over): the old primary's topics become mirror topics "
                    "of the reverse mirror at the same offsets. Refused, changing nothing, when a partition holds "
                    "records the new primary's copy does not (use truncate-and-restore). "
                    "See docs/operations/failback.md.")
