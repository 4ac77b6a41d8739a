"""`python -m deploy.chaos [--seed N] [--matrix mirror|replication|hostile|dr|all] [--scenarios NAME ...] [--profile]`:
run chaos scenarios with real processes and print one line per scenario; exit 1 when any fails.
`--matrix replication` is Kafka's replication matrix on a ZooKeeper-mode cluster
(deploy.chaos.replication); `--matrix hostile` forges LinkAppend, controller requests and znodes
beside a link mirror and a 3-broker cluster under load (deploy.chaos.hostile); `--matrix dr` runs
`causeway drill` round trips on examples/dr.yaml (deploy.chaos.dr)."""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
from pathlib import Path

import trio

from deploy.chaos import dr, hostile, replication
from deploy.chaos.matrix import run_matrix
from deploy.chaos.runner import MATRIX, PROFILE, ScenarioResult, format_table, run_scenario

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    known = {s.name: s for s in (*MATRIX, *PROFILE)}
    replicated = {s.name: s for s in (*replication.MATRIX, *replication.PROFILE)}
    forged = {s.name: s for s in (*hostile.MATRIX, *hostile.PROFILE)}
    drilled = {s.name: s for s in (*dr.MATRIX, *dr.PROFILE)}
    parser = argparse.ArgumentParser(
        prog="python -m deploy.chaos",
        description="Fault injection over an emulated WAN link: a source broker, a target broker, the WAN "
                    "emulator and a mirror as real processes; numbered records produced while seeded faults "
                    "run; source and target compared per partition.")
    parser.add_argument("--seed", type=int, default=1, help="seed of the first scenario's schedule; "
                                                             "scenario i uses seed + i (default 1)")
    parser.add_argument("--matrix", choices=["mirror", "replication", "hostile", "dr", "all"], default="mirror",
                        help="the mirror's matrix over the WAN link (default), Kafka's replication matrix on a "
                             "3-broker ZooKeeper cluster, the hostile-bytes matrix, the DR round-trip matrix "
                             "(deploy.chaos.dr), or all four")
    parser.add_argument("--scenarios", nargs="+", metavar="NAME",
                        choices=sorted({*known, *replicated, *forged, *drilled}),
                        help="run only these (default: the whole matrix, or the profile with --profile)")
    parser.add_argument("--profile", action="store_true", help="the short profile that `make test` runs")
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    parser.add_argument("--work-dir", type=Path, help="data and logs (default: a new temporary directory)")
    parser.add_argument("--keep", action="store_true", help="keep passing scenarios' data and logs too")
    parser.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])
    args = parser.parse_args(argv)

    if args.list:
        for s in (*MATRIX, *PROFILE):
            print(f"{s.name:16} {s.steps:2d} faults from {', '.join(s.faults)}; {s.records} records "
                  f"at {s.rate:.0f}/s over {s.partitions} partitions{' (profile)' if s in PROFILE else ''}")
        for r in (*replication.MATRIX, *replication.PROFILE):
            print(f"{r.name:16} {r.rounds:2d} x {r.fault} of the {r.target or 'ZooKeeper node'}; 3 brokers, RF 3, "
                  f"min.insync.replicas=2, {r.rate:.0f} records/s (replication"
                  f"{', profile' if r in replication.PROFILE else ''})")
        for h in (*hostile.MATRIX, *hostile.PROFILE):
            print(f"{h.name:20} {h.attacks} forged requests or znodes from each of {', '.join(h.attackers)}; "
                  f"{h.records} records at {h.rate:.0f}/s (hostile{', profile' if h in hostile.PROFILE else ''})")
        for d in dr.MATRIX:
            print(f"{d.name:28} causeway drill {'failback' if d.mode == 'link' else 'failover'} --disaster "
                  f"{d.disaster} on examples/dr.yaml ({d.mode}), {d.rate:.0f} records/s (dr"
                  f"{', profile' if d in dr.PROFILE else ''})")
        for k in dr.KAFKA_COLUMN:
            print(f"{k.name:28} drill failover --disaster {k.disaster} from an Apache Kafka 4.x primary ({k.mode}), "
                  f"{k.rate:.0f} records/s (dr, run by {dr.KAFKA_TEST} in make chaos"
                  f"{' and make test' if k == dr.KAFKA_PROFILE else ''})")
        return 0
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.scenarios:
        scenarios = [known[name] for name in args.scenarios if name in known]
        replicating = [replicated[name] for name in args.scenarios if name in replicated]
        attacking = [forged[name] for name in args.scenarios if name in forged]
        drilling = [drilled[name] for name in args.scenarios if name in drilled]
    else:
        scenarios = list(PROFILE if args.profile else MATRIX) if args.matrix in ("mirror", "all") else []
        replicating = (list(replication.PROFILE if args.profile else replication.MATRIX)
                       if args.matrix in ("replication", "all") else [])
        attacking = (list(hostile.PROFILE if args.profile else hostile.MATRIX)
                     if args.matrix in ("hostile", "all") else [])
        drilling = list(dr.PROFILE if args.profile else dr.MATRIX) if args.matrix in ("dr", "all") else []
    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="causeway-chaos-"))

    def report(result: ScenarioResult) -> None:
        print(result.describe(), flush=True)

    def report_replication(result: replication.ReplicationResult) -> None:
        print(result.describe(), flush=True)

    results = trio.run(lambda: run_matrix(scenarios, run_scenario, seed=args.seed, work_dir=work_dir,
                                          keep=args.keep, on_result=report)) if scenarios else []
    replicated_results = trio.run(lambda: run_matrix(
        replicating, replication.run_scenario, seed=args.seed, work_dir=work_dir, prefix="replication-",
        keep=args.keep, on_result=report_replication)) if replicating else []
    hostile_results = trio.run(lambda: run_matrix(
        attacking, hostile.run_scenario, seed=args.seed, work_dir=work_dir, prefix="hostile-", keep=args.keep,
        on_result=lambda r: print(r.describe(), flush=True))) if attacking else []
    dr_results = trio.run(lambda: run_matrix(
        drilling, dr.run_scenario, seed=args.seed, work_dir=work_dir, prefix="dr-", keep=args.keep,
        on_result=lambda r: print(r.describe(), flush=True))) if drilling else []
    if results:
        print()
        print(format_table(results))
    if replicated_results:
        print()
        print(replication.format_table(replicated_results))
    failed = [r.scenario.name for r in results if not r.passed]
    if hostile_results:
        print()
        print(hostile.format_table(hostile_results))
    failed += [r.scenario.name for r in replicated_results if not r.passed]
    failed += [r.scenario.name for r in hostile_results if not r.passed]
    if dr_results:
        print()
        print(dr.format_table(dr_results))
    failed += [r.scenario.name for r in dr_results if not r.passed]
    ran = len(results) + len(replicated_results) + len(hostile_results) + len(dr_results)
    if failed:
        print(f"\n{len(failed)} of {ran} scenarios failed: {', '.join(failed)}; logs under {work_dir}")
        return 1
    print(f"\nall {ran} scenarios passed")
    if args.work_dir is None and not args.keep:
        shutil.rmtree(work_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
