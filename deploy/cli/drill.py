"""`causeway drill`: a disaster-recovery drill on a topology `causeway up` started.

    causeway drill switchover|failover|failback TOPOLOGY --mirror NAME [--state-dir DIR] [--rate N]
                   [--duration S] [--disaster kill|partition|planned] [--third-move] [--json]
                   [--chart FILE.svg] [--max-rpo N] [--max-rto S] [--quiet]

The steps are deploy/drill/run.py's (and deploy/drill/failback.py's for the way back); this
module finds the mirror as `causeway mirror promote` does, checks the command line, prints the
report and maps it to the exit code: 0, 1 when a limit is exceeded or the drill fails, 2 for a
bad command line, 130 when interrupted (after saying what was done and what state the topology
is in).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from deploy.cli.command import Refused, UsageError, add_quiet, progress_output, run, say, say_on_stderr

if TYPE_CHECKING:
    from deploy.drill.report import DrillReport
    from deploy.drill.run import DrillInterrupted

__all__ = ["limits_exceeded", "register"]


def _check(args: argparse.Namespace) -> None:
    if args.rate <= 0:
        raise UsageError("--rate must be positive")
    if args.duration < 0:
        raise UsageError("--duration must not be negative")
    if args.max_rpo is not None and args.max_rpo < 0:
        raise UsageError("--max-rpo must not be negative")
    if args.max_rto is not None and args.max_rto <= 0:
        raise UsageError("--max-rto must be positive")
    if args.chart is not None and args.chart.suffix.lower() != ".svg":
        raise UsageError(f"--chart writes SVG: name the file *.svg, not {args.chart.name!r}")
    if args.kind == "switchover" and args.disaster is not None:
        raise UsageError("a switchover is planned: --disaster goes with failover")
    if args.third_move and args.kind != "failback":
        raise UsageError("--third-move goes with failback: it moves to the DR site again after the way back")


def _drill(args: argparse.Namespace) -> int:
    _check(args)
    from deploy.cli.pipeline_common import mirror_config_from_topology, mirror_logins, started_mirror
    from deploy.drill.failback import run_failback, run_third_move
    from deploy.drill.run import DrillError, DrillInterrupted, DrillPlan, run_drill
    from deploy.drill.topics import dr_names, mirrored_topics, partitions_of

    record, clusters, state_dir = started_mirror(args)
    if any(mirror_logins(args).values()):
        raise Refused("drills on a secured topology are not supported yet")
    config = mirror_config_from_topology(args)
    if config is None:
        raise Refused(f"mirror {args.mirror}: its config could not be read from the topology")
    if args.kind == "failback" and config.mode != "link":
        raise UsageError(f"mirror {args.mirror} is an {config.mode} mirror: a failback drill needs a link-mode mirror")
    progress = progress_output(args, on_stderr=args.json)  # --json: stdout is the report's
    source, target = clusters["source"].bootstrap, clusters["target"].bootstrap
    try:
        topics = mirrored_topics(source, target, config, args.mirror)
    except (LookupError, TimeoutError) as exc:
        raise Refused(str(exc)) from None
    disaster: Literal["kill", "partition", "planned"] | None = None
    if args.kind in ("failover", "failback"):
        disaster = args.disaster or "kill"
    plan = DrillPlan(kind=args.kind, disaster=disaster, state_dir=state_dir, mirror=args.mirror,
                     source=record.source, target=record.target, source_bootstrap=source, target_bootstrap=target,
                     topics=list(topics), partitions=partitions_of(topics), config=config, rate=args.rate,
                     duration_s=args.duration, dr_topics=dr_names(config, list(topics)))
    progress(f"drill {args.kind} on mirror {args.mirror} ({config.mode}): {record.source} ({source}) -> "
             f"{record.target} ({target}), {args.rate:g} records/s over {', '.join(topics)}")
    # Ctrl-C and SIGTERM ask the drill to stop, at its next pause: its clients stopped, a cut
    # link put back, and said. A second one stops it at once.
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, on_signal)
    try:
        report = (run_failback if args.kind == "failback" else run_drill)(plan, progress, stop)
        if args.third_move:
            run_third_move(plan, report, progress, stop)
    except DrillInterrupted as stop:
        print(stop.report.table(), file=sys.stderr)
        _say_interrupted(stop, args, state_dir)
        return 130
    except DrillError as exc:
        if exc.report is not None:
            print(exc.report.table(), file=sys.stderr)
        raise Refused(f"the drill stopped in step {exc}") from None
    report.limits_exceeded += limits_exceeded(report, args.max_rpo, args.max_rto)
    if args.chart is not None:
        from deploy.drill.chart import render_svg

        try:
            args.chart.write_text(render_svg(report, report.samples))
        except OSError as exc:
            raise Refused(f"--chart: cannot write {args.chart}: {exc.strerror or exc}") from None
        (say_on_stderr if args.json else say)(f"chart of throughput and lag over the drill: {args.chart}")
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(report.table())
    return 1 if report.limits_exceeded else 0


def limits_exceeded(report: DrillReport, max_rpo: int | None, max_rto: float | None) -> list[str]:
    """What the drill's report exceeds of --max-rpo (records lost) and --max-rto (seconds to the
    first produce or the first consume at the DR site, the later of the two; for a failback, also
    back home, and with --third-move at the DR site again)."""
    exceeded = []
    outcome = report.outcome
    if max_rpo is not None and outcome is not None and outcome.rpo > max_rpo:
        exceeded.append(f"RPO {outcome.rpo} record(s) > --max-rpo {max_rpo}")
    rto = max(report.rto_produce_s or 0.0, report.rto_consume_s or 0.0)
    if max_rto is not None and rto > max_rto:
        exceeded.append(f"RTO {rto:.2f} s > --max-rto {max_rto:g} s")
    back = report.failback
    if back is not None:
        rto_back = max(back.rto_produce_s or 0.0, back.rto_consume_s or 0.0)
        if max_rto is not None and rto_back > max_rto:
            exceeded.append(f"RTO back home {rto_back:.2f} s > --max-rto {max_rto:g} s")
    third = back.third if back is not None else None
    if third is not None:
        rto_again = max(third.rto_produce_s or 0.0, third.rto_consume_s or 0.0)
        if max_rto is not None and rto_again > max_rto:
            exceeded.append(f"RTO to the DR site again {rto_again:.2f} s > --max-rto {max_rto:g} s")
    return exceeded


def _say_interrupted(stop: DrillInterrupted, args: argparse.Namespace, state_dir: Path) -> None:
    steps = stop.report.timeline.steps
    names = [step.name for step in steps]
    during = next((step.name for step in reversed(steps) if step.duration_s is None), None)
    lines = [f"Interrupted{f' during {during!r}' if during else ''}; steps begun: {', '.join(names) or 'none'}."]
    lines += [f"  {line}" for line in stop.undone]
    lines.append("  The drill's producers and consumers are stopped; its records stay in the topics.")
    if any(n.startswith("disaster: kill") for n in names):
        lines.append("  The primary's brokers were killed; the launcher restarts them.")
    forward = next((step for step in steps if step.name.startswith("promote") and "old primary" not in step.name),
                   None)
    if forward is not None and forward.duration_s is not None:
        lines.append("  The mirror's topics were promoted at the DR site.")
    elif forward is not None:
        failover = " --failover" if args.kind != "switchover" and args.disaster != "planned" else ""
        lines.append(f"  The promotion began: `causeway mirror promote {args.topology} --mirror {args.mirror}"
                     f"{failover}` completes it (a second run reports the topics promoted already).")
    else:
        lines.append("  Nothing was promoted: the mirror still copies to the DR site.")
    lines.append(f"  `causeway status --state-dir {state_dir}` shows the topology as it is now.")
    print("\n".join(lines), file=sys.stderr, flush=True)


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = commands.add_parser(
        "drill", help="a disaster-recovery drill: switch-over or failover under load, with its RPO and RTO",
        description="Run a disaster-recovery drill on a topology `causeway up` started, with a link-mode or "
                    "mm2-mode mirror: idempotent acks=all producers at --rate records/s over the mirror's topics at "
                    "the primary and a consumer group reading and committing; then a planned switch-over "
                    "(producers stopped, the group caught up, `mirror promote`) or a failover (the disaster: the "
                    "primary's brokers SIGKILLed, or the WAN link cut; then `mirror promote --failover`); then "
                    "producers and group moved to the DR site (in mm2 mode the group reads the remote topics from "
                    "the offsets the mirror translated for it, and the new local topics). Reports RPO "
                    "(acknowledged records the DR site never got, per partition), RTO (to the first record "
                    "produced and consumed at the DR site), what the group re-read and skipped (against its "
                    "committed offsets at the DR site, fetched right after the promotion), and a timeline. "
                    "failback (link mode) goes on: once the old primary answers again (killed brokers restarted "
                    "by the launcher, the cut link put back), truncate-and-restore (reverse-and-start after a "
                    "planned switch-over), the reverse mirror <mirror>-reverse run by the drill while producers "
                    "and group work at the DR site, then a planned switch back (promote at the old primary) and "
                    "producers and group moved home; it also reports the quarantine against the RPO, RTO back home, "
                    "the group's re-reads and skips on the way back, and both sites' logs compared batch for "
                    "batch. --third-move then moves to the DR site once more: reverse-and-start there (its topics "
                    "mirror topics of the forward mirror again, which copies home's new records), a planned "
                    "switch-over, producers and group moved; reported as the AGAIN part. "
                    "The topology is promoted afterwards: bring it up again (or fail back, "
                    "docs/operations/failback.md) before the next drill. See docs/operations/disaster-recovery.md.")
    p.add_argument("kind", choices=("switchover", "failover", "failback"),
                   help="a planned switch-over, a failover, or a failover and the way back (link mode)")
    p.add_argument("topology", help="the topology file `causeway up` started, or its name")
    p.add_argument("--mirror", required=True, help="the mirror (link or mm2 mode) from the primary to the DR site")
    p.add_argument("--state-dir", default=None, help="the launcher's state dir (default .causeway/<topology name>)")
    p.add_argument("--rate", type=float, default=200.0, metavar="N",
                   help="records per second, over all the mirror's topics (default 200)")
    p.add_argument("--duration", type=float, default=10.0, metavar="S",
                   help="seconds of workload at the primary before the switch (default 10)")
    p.add_argument("--disaster", choices=("kill", "partition", "planned"), default=None,
                   help="failover and failback: SIGKILL the primary's brokers (default), cut the WAN link between the "
                        "sites through the emulator's API (put back when the drill ends), or none: a planned "
                        "switch-over (the producers stopped first, the same steps as `drill switchover`)")
    p.add_argument("--third-move", action="store_true",
                   help="failback: after the way back, move to the DR site again (reverse-and-start at the DR site, "
                        "the forward mirror copying, a planned switch-over): the group's third move")
    p.add_argument("--json", action="store_true", help="print the report as JSON on stdout (progress on stderr)")
    p.add_argument("--chart", type=Path, default=None, metavar="FILE.svg",
                   help="also draw throughput (records/s at each site, read by the group) and the DR site's lag "
                        "over the drill, its steps marked, as an SVG chart")
    p.add_argument("--max-rpo", type=int, default=None, metavar="N",
                   help="exit 1 when more than N acknowledged records were lost")
    p.add_argument("--max-rto", type=float, default=None, metavar="S",
                   help="exit 1 when the first produce or the first consume at the DR site (or, for failback, back "
                        "home, and with --third-move at the DR site again) took more than S seconds")
    add_quiet(p)
    p.set_defaults(func=lambda args: run("causeway drill", lambda: _drill(args)))
