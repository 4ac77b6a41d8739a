"""`python -m deploy.chaos [--seed N] [--scenarios NAME ...] [--profile]`: run chaos scenarios
with real processes and print one line per scenario; exit 1 when any fails."""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
from pathlib import Path

import trio

from deploy.chaos.runner import MATRIX, PROFILE, ScenarioResult, format_table, run_matrix

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    known = {s.name: s for s in (*MATRIX, *PROFILE)}
    parser = argparse.ArgumentParser(
        prog="python -m deploy.chaos",
        description="Fault injection over an emulated WAN link: a source broker, a target broker, the WAN "
                    "emulator and a mirror as real processes; numbered records produced while seeded faults "
                    "run; source and target compared per partition.")
    parser.add_argument("--seed", type=int, default=1, help="seed of the first scenario's schedule; "
                                                             "scenario i uses seed + i (default 1)")
    parser.add_argument("--scenarios", nargs="+", metavar="NAME", choices=sorted(known),
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
        return 0
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.scenarios:
        scenarios = [known[name] for name in args.scenarios]
    else:
        scenarios = list(PROFILE if args.profile else MATRIX)
    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="causeway-chaos-"))

    def report(result: ScenarioResult) -> None:
        print(result.describe(), flush=True)

    results = trio.run(lambda: run_matrix(scenarios, seed=args.seed, work_dir=work_dir, keep=args.keep,
                                          on_result=report))
    print()
    print(format_table(results))
    failed = [r.scenario.name for r in results if not r.passed]
    if failed:
        print(f"\n{len(failed)} of {len(results)} scenarios failed: {', '.join(failed)}; logs under {work_dir}")
        return 1
    print(f"\nall {len(results)} scenarios passed")
    if args.work_dir is None and not args.keep:
        shutil.rmtree(work_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
