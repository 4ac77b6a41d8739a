"""`causeway pipeline`: jobs on Spark over Kafka-compatible clusters (see pipeline/).

    causeway pipeline export --bootstrap HOST:PORT --topic T --to DIR [--master local[2]] [--verbose]
                             [--step-records N] [--min-partitions N] [--option KEY=VALUE]... [--quiet]
    causeway pipeline audit TOPOLOGY --mirror NAME ...   (deploy/cli/pipeline_audit.py)
    causeway pipeline copy --from H:P --to H:P --topic T ...   (deploy/cli/pipeline_jobs.py)
    causeway pipeline lag TOPOLOGY --mirror NAME ...          (deploy/cli/pipeline_jobs.py)

Local mode by default; any Spark master with --master. Exit 1 with one line for a missing
topic, an unreachable cluster, an output directory it cannot write or data no longer in the log;
2 for a bad command line. Options, paths and clusters are checked before Spark starts (a cluster
gets a few seconds to answer); Spark's own output stays off the terminal unless --verbose. Each
job says its progress (its steps, Spark's stages) unless --quiet; its result and errors always.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from deploy.cli.command import UsageError, progress_output, run, say
from deploy.cli.pipeline_common import add_spark_options, on_spark, option_flags

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["register"]


def _export(args: argparse.Namespace) -> int:
    if args.step_records <= 0:
        raise UsageError("--step-records must be positive")
    if args.min_partitions is not None and args.min_partitions <= 0:
        raise UsageError("--min-partitions must be positive")
    options = option_flags(args.option)

    def checks() -> None:
        from pipeline.export import check_export

        check_export(args.bootstrap, args.topic, args.to, min_partitions=args.min_partitions, options=options)

    def job(spark: SparkSession) -> int:
        from pipeline.export import export_topic

        result = export_topic(spark, args.bootstrap, args.topic, args.to, step_records=args.step_records,
                              min_partitions=args.min_partitions, say=progress_output(args), options=options)
        say(f"export {args.topic}: done: {result.exported} records in {result.steps} step(s); offsets now "
             + ", ".join(f"{p}:{o}" for p, o in sorted(result.offsets.items())))
        return 0

    return on_spark(args.master, job, verbose=args.verbose, checks=checks)


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser("pipeline", help="Spark jobs: audit a mirror, its lag, copy or export a topic")
    jobs = parser.add_subparsers(dest="job", required=True)
    export = jobs.add_parser("export", help="a topic to Parquet by date/hour; a rerun continues where it stopped")
    export.add_argument("--bootstrap", required=True, help="host:port[,host:port...] of the cluster")
    export.add_argument("--topic", required=True)
    export.add_argument("--to", required=True, help="the output directory (offsets reached are kept in it)")
    add_spark_options(export)
    export.add_argument("--step-records", type=int, default=1_000_000,
                        help="offsets per partition per Spark job; each step commits (default 1000000)")
    export.add_argument("--min-partitions", type=int, default=None, help="Spark's minPartitions for the reads")
    export.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="a read option of the data source, e.g. failOnDataLoss=false (repeatable)")

    def main(args: argparse.Namespace) -> int:
        return run("causeway pipeline export", lambda: _export(args), bootstrap=args.bootstrap)

    export.set_defaults(func=main)

    from deploy.cli.pipeline_audit import register_audit

    register_audit(jobs)

    from deploy.cli.pipeline_jobs import register_jobs

    register_jobs(jobs)

