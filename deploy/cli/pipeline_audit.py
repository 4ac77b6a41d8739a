"""`causeway pipeline audit`: compare a mirror's source and target (pipeline/audit.py).

    causeway pipeline audit TOPOLOGY --mirror NAME [--topics REGEX] [--state-dir DIR]
                            [--json FILE] [--parquet DIR] [--master local[2]] [--option KEY=VALUE]...
    causeway pipeline audit --source-bootstrap H:P --target-bootstrap H:P [--mode mm2|link]
                            [--source-alias A] [--target-alias B] [--identity] ...

TOPOLOGY is the topology file `causeway up` started, or its name; the clusters and the mirror
are found as `causeway status` finds them: in the launcher's state file under --state-dir
(default .causeway/<topology name>). Exit 0 on a clean copy, 1 when anything is missing,
extra, duplicated, reordered or different (or a cluster is out of reach), 2 for a bad command line.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from deploy.cli.command import UsageError, progress_output, run
from deploy.cli.pipeline_common import add_spark_options, mirror_from_topology, on_spark, option_flags

if TYPE_CHECKING:
    from pipeline.audit import MirrorSpec

__all__ = ["register_audit"]


def _from_flags(args: argparse.Namespace) -> MirrorSpec:
    from pipeline.audit import MirrorSpec

    if not (args.source_bootstrap and args.target_bootstrap):
        raise UsageError("give both --source-bootstrap and --target-bootstrap (or a TOPOLOGY and --mirror)")
    if args.mode == "mm2" and not args.source_alias and not args.identity:
        raise UsageError("--mode mm2 needs --source-alias (remote topics are named ALIAS.topic) or --identity")
    return MirrorSpec(args.source_bootstrap, args.target_bootstrap, mode=args.mode,
                      source_alias=args.source_alias or "source", target_alias=args.target_alias,
                      identity=args.identity, separator=args.separator,
                      name=args.mirror or f"{args.source_bootstrap}->{args.target_bootstrap}")


def _audit(args: argparse.Namespace) -> int:
    if args.max_ranges <= 0:
        raise UsageError("--max-ranges must be positive")
    if args.topology is not None and (args.source_bootstrap or args.target_bootstrap):
        raise UsageError("give a TOPOLOGY or --source-bootstrap/--target-bootstrap, not both")
    spec = mirror_from_topology(args) if args.topology is not None else _from_flags(args)
    from pipeline.audit import audit, write_json, write_parquet

    options = option_flags(args.option)

    def checks() -> None:
        from pipeline.audit import check_mirror
        from pipeline.paths import check_writable

        if args.json is not None:
            check_writable(Path(args.json), "cannot write the JSON report to", directory=False)
        if args.parquet is not None:
            check_writable(Path(args.parquet), "cannot write the Parquet history to", directory=True)
        check_mirror(spec, args.topics, options)

    report = on_spark(args.master, lambda spark: audit(spark, spec, topics_regex=args.topics, options=options,
                                                       max_ranges=args.max_ranges,
                                                       say=progress_output(args, on_stderr=True)),
                      verbose=args.verbose, checks=checks)
    print(f"audit of mirror {report.mirror} ({report.mode}): {report.source} -> {report.target}")
    if report.partitions:
        print(report.table())
    for line in report.findings():
        print(line)
    for note in report.notes:
        print(f"note: {note}")
    if args.json is not None:
        write_json(report, Path(args.json))
    if args.parquet is not None:
        write_parquet(report, Path(args.parquet))
    kinds = ", ".join(f"{k} {report.total(k)}" for k in ("missing", "extra", "duplicated", "reordered",
                                                         "mismatched", "shifted") if report.total(k))
    print("clean: every record copied once, in order, unchanged" if report.clean else f"NOT CLEAN: {kinds}",
          flush=True)
    return 0 if report.clean else 1


def register_audit(jobs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = jobs.add_parser("audit", help="compare a mirror's source and target, partition by partition; "
                                      "exit 1 on anything missing or different")
    p.add_argument("topology", nargs="?", help="the topology file `causeway up` started, or its name")
    p.add_argument("--mirror", help="the mirror's name in the topology")
    p.add_argument("--topics", help="audit only source topics matching this regex (whole name)")
    p.add_argument("--state-dir", default=None, help="the launcher's state dir (default .causeway/<topology name>)")
    p.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    p.add_argument("--parquet", metavar="DIR", help="append the report to a Parquet history (one file per run)")
    add_spark_options(p)
    p.add_argument("--max-ranges", type=int, default=20, help="offset ranges listed per kind and partition")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="a read option of the data source for both sides, e.g. kafka.request.timeout.ms=5000")
    p.add_argument("--source-bootstrap", help="without a topology: the source cluster")
    p.add_argument("--target-bootstrap", help="without a topology: the target cluster")
    p.add_argument("--mode", choices=["mm2", "link"], default="mm2", help="without a topology: the mirror's mode")
    p.add_argument("--source-alias", help="without a topology: the source's alias (mm2 remote topics ALIAS.topic)")
    p.add_argument("--target-alias", help="without a topology: the target's alias (names the offset-syncs topic)")
    p.add_argument("--identity", action="store_true", help="without a topology: identity naming (same names)")
    p.add_argument("--separator", default=".", help="without a topology: replication.policy.separator")

    def main(args: argparse.Namespace) -> int:
        return run("causeway pipeline audit", lambda: _audit(args))

    p.set_defaults(func=main)
