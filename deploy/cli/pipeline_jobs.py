"""`causeway pipeline copy` and `causeway pipeline lag` (pipeline/copy.py, pipeline/lag.py).

    causeway pipeline lag TOPOLOGY --mirror NAME [--state-dir DIR] [--topics REGEX] [--window SECONDS]
                          [--chart FILE.svg] [--json FILE] [--master local[2]] [--option KEY=VALUE]...
    causeway pipeline copy --from H:P --to H:P --topic T [--target-topic T2]
                           [--starting-offsets earliest|JSON] [--ending-offsets latest|JSON]
                           [--allow-duplicates] [--step-records N] [--master local[2]] [--option K=V]...

Exit 0 when the range was copied; 1 with one line for a missing topic, an unreachable cluster,
a target with fewer partitions, or a target that already holds records of the range (unless
--allow-duplicates); lag exits 0 with its report, 1 when a cluster or the topology cannot be
found; 2 for a bad command line.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from deploy.cli.command import UsageError, progress_output, run, say
from deploy.cli.pipeline_common import add_spark_options, mirror_from_topology, on_spark, option_flags

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["register_jobs"]


def _copy(args: argparse.Namespace) -> int:
    from pipeline.copy import copy

    if args.step_records <= 0:
        raise UsageError("--step-records must be positive")
    options = option_flags(args.option)

    def checks() -> None:
        from pipeline.copy import check_copy

        check_copy(args.source, args.target, args.topic, starting_offsets=args.starting_offsets,
                   ending_offsets=args.ending_offsets, options=options)

    def job(spark: SparkSession) -> int:
        result = copy(spark, args.source, args.target, args.topic,
                      target_topic=args.target_topic, starting_offsets=args.starting_offsets,
                      ending_offsets=args.ending_offsets, allow_duplicates=args.allow_duplicates,
                      step_records=args.step_records, say=progress_output(args), options=options)
        say(f"copy {args.topic} -> {result.target_topic}: done: {result.copied} records in {result.steps} step(s)")
        return 0

    return on_spark(args.master, job, verbose=args.verbose, checks=checks)


def _lag(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from pipeline.lag import lag, render_svg

    if args.window <= 0:
        raise UsageError("--window must be a positive number of seconds")
    chart = Path(args.chart) if args.chart else None
    if chart is not None and chart.suffix.lower() != ".svg":
        # No plotting library is installed with pyspark; the chart is drawn by hand as SVG.
        raise UsageError(f"--chart writes SVG: name the file *.svg, not {chart.name!r}")
    spec = mirror_from_topology(args)
    options = option_flags(args.option)

    def checks() -> None:
        from pipeline.audit import check_mirror
        from pipeline.paths import check_writable

        if chart is not None:
            check_writable(chart, "cannot write the chart to", directory=False)
        if args.json is not None:
            check_writable(Path(args.json), "cannot write the JSON report to", directory=False)
        check_mirror(spec, args.topics, options)

    def job(spark: SparkSession) -> int:
        report = lag(spark, spec, topics_regex=args.topics, window_s=args.window,
                     say=progress_output(args, on_stderr=True), options=options)
        print(f"replication latency of mirror {report.mirror} ({report.mode}): {report.source} -> {report.target}")
        if report.partitions:
            print(report.table())
        for note in report.notes:
            print(f"note: {note}")
        if chart is not None:
            chart.write_text(render_svg(report))
            print(f"chart: {chart}")
        if args.json is not None:
            Path(args.json).write_text(json.dumps(report.to_dict(), indent=1, sort_keys=True))
        return 0

    return on_spark(args.master, job, verbose=args.verbose, checks=checks)


def register_jobs(jobs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = jobs.add_parser("copy", help="backfill a topic range from one cluster to another, partition p to p, in order")
    p.add_argument("--from", dest="source", required=True, help="the source cluster, host:port[,host:port...]")
    p.add_argument("--to", dest="target", required=True, help="the target cluster, host:port[,host:port...]")
    p.add_argument("--topic", required=True, help="the source topic")
    p.add_argument("--target-topic", help="the target topic (default: the same name; created when missing)")
    p.add_argument("--starting-offsets", default="earliest",
                   help='earliest (default) or per-partition JSON, as Spark\'s startingOffsets: {"t":{"0":23}}')
    p.add_argument("--ending-offsets", default="latest",
                   help="latest (default) or per-partition JSON, as Spark's endingOffsets")
    p.add_argument("--allow-duplicates", action="store_true",
                   help="copy even when the target already holds records of the range (they are written again)")
    p.add_argument("--step-records", type=int, default=1_000_000,
                   help="offsets per partition per Spark job (default 1000000)")
    add_spark_options(p)
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="a read option of the data source, e.g. failOnDataLoss=false (repeatable); "
                        "kafka.security.protocol, kafka.sasl.* and kafka.ssl.* log in to both clusters")

    def main(args: argparse.Namespace) -> int:
        return run("causeway pipeline copy", lambda: _copy(args))

    p.set_defaults(func=main)

    q = jobs.add_parser("lag", help="a mirror's replication latency: percentiles per partition and per time window")
    q.add_argument("topology", help="the topology file `causeway up` started, or its name")
    q.add_argument("--mirror", required=True, help="the mirror's name in the topology")
    q.add_argument("--state-dir", default=None, help="the launcher's state dir (default .causeway/<topology name>)")
    q.add_argument("--topics", help="only source topics matching this regex (whole name)")
    q.add_argument("--window", type=int, default=60, help="seconds per time window (default 60)")
    q.add_argument("--chart", metavar="FILE.svg", help="also draw p50, p99 and max per window as an SVG chart")
    q.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    add_spark_options(q)
    q.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="a read option of the data source for both sides, e.g. kafka.request.timeout.ms=5000")

    def lag_main(args: argparse.Namespace) -> int:
        return run("causeway pipeline lag", lambda: _lag(args))

    q.set_defaults(func=lag_main)
