"""RPO and RTO of each drill kind, link mode beside mm2, at a steady rate over examples/dr.yaml's
emulated 40 ms link: what `causeway drill` measures, run for every combination.

    .venv/bin/python -m bench.drill                                   # 1,000 and 10,000 records/s
    .venv/bin/python -m bench.drill --rates 1000 --modes link --disasters planned kill

Each run brings examples/dr.yaml up with `causeway up -d` in a fresh state dir (3+3 brokers with
a ZooKeeper per site; for mm2, the same file with `mode: mm2`), runs `causeway drill failover
--disaster planned|kill|partition --json` on it and takes `causeway down`. From each report:
the rate the workload reached at the primary (a machine that cannot keep up is said so, not
hidden), RPO (acknowledged records the DR site never got), RTO to the first produce and to the
first consume at the DR site, what the moved group re-read and skipped, and duplicates. The
machine's own ceiling is printed first: its cores, and the loopback round trip between two Python
threads (the floor under any request at the DR site). Nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import ceiling

__all__ = ["DrillRow", "main", "row_of"]

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "dr.yaml"
MIRROR = "primary-to-dr"
KEEPS_UP = 0.95  # the workload reached at least this share of the asked rate


@dataclass(frozen=True)
class DrillRow:
    mode: str
    disaster: str
    rate: float
    reached: float  # records/s acknowledged at the primary during the workload
    rpo: int
    acknowledged: int
    rto_produce_s: float | None
    rto_consume_s: float | None
    reread: int
    skipped: int
    duplicates: int

    @property
    def keeps_up(self) -> bool:
        return self.reached >= KEEPS_UP * self.rate

    def cells(self) -> list[str]:
        def seconds(value: float | None) -> str:
            return "-" if value is None else f"{value:.2f}"

        return [self.mode, self.disaster, f"{self.rate:,.0f}", f"{self.reached:,.0f}" + ("" if self.keeps_up else " *"),
                f"{self.rpo}", seconds(self.rto_produce_s), seconds(self.rto_consume_s), f"{self.reread}",
                f"{self.skipped}", f"{self.duplicates}"]


HEADER = ["mode", "disaster", "rate", "reached", "RPO", "RTO produce s", "RTO consume s", "re-read", "skipped",
          "duplicates"]


def row_of(mode: str, rate: float, report: dict[str, Any]) -> DrillRow:
    """A drill's --json report as one row. The workload's reached rate is its acknowledged count
    over its duration (the first step of the timeline: "...; N acknowledged")."""
    workload = report["timeline"][0]
    found = re.search(r"(\d+) acknowledged", workload["detail"])
    acknowledged_then = int(found.group(1)) if found else 0
    reached = acknowledged_then / workload["duration_s"] if workload.get("duration_s") else 0.0
    rpo, group = report["rpo"], report["group"]
    return DrillRow(mode=mode, disaster=report["disaster"], rate=rate, reached=reached, rpo=rpo["records"],
                    acknowledged=rpo["acknowledged"], rto_produce_s=report["rto"]["first_produce_s"],
                    rto_consume_s=report["rto"]["first_consume_s"], reread=group["reread"],
                    skipped=group["skipped"], duplicates=rpo["duplicates"])


def table(rows: list[DrillRow]) -> str:
    cells = [HEADER, *(row.cells() for row in rows)]
    widths = [max(len(line[i]) for line in cells) for i in range(len(HEADER))]
    return "\n".join("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths,
                                                                                                    strict=True)))
                     for line in cells)


def causeway(*args: str, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "deploy.cli", *args], capture_output=True, text=True,
                          timeout=timeout_s, cwd=REPO)


def topology(mode: str, folder: Path) -> Path:
    """examples/dr.yaml as it is (link), or with its mirror in mm2 mode (topology dr-mm2)."""
    text = EXAMPLE.read_text()
    if mode == "link":
        return EXAMPLE
    if "    mode: link " not in text or "name: dr\n" not in text:
        raise RuntimeError(f"{EXAMPLE} no longer says `mode: link` and `name: dr` where this bench expects")
    path = folder / "dr-mm2.yaml"
    path.write_text(text.replace("    mode: link ", "    mode: mm2 #").replace("name: dr\n", "name: dr-mm2\n"))
    return path


def run_once(mode: str, disaster: str, rate: float, duration_s: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-drill-") as tmp:
        state = Path(tmp) / "state"
        path = topology(mode, Path(tmp))
        up = causeway("up", str(path), "-d", "--state-dir", str(state))
        try:
            if up.returncode != 0:
                raise RuntimeError(f"causeway up exited {up.returncode}: {up.stdout}{up.stderr}")
            done = causeway("drill", "failover", str(path), "--mirror", MIRROR, "--state-dir", str(state),
                            "--disaster", disaster, "--rate", f"{rate:g}", "--duration", f"{duration_s:g}", "--json")
            if done.returncode != 0 or not done.stdout.strip().startswith("{"):
                raise RuntimeError(f"causeway drill exited {done.returncode}: {done.stderr[-2000:]}")
            report: dict[str, Any] = json.loads(done.stdout)
            return report
        finally:
            causeway("down", "--state-dir", str(state))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", type=float, nargs="+", default=[1000.0, 10000.0])
    parser.add_argument("--modes", nargs="+", choices=("link", "mm2"), default=["link", "mm2"])
    parser.add_argument("--disasters", nargs="+", choices=("planned", "kill", "partition"),
                        default=["planned", "kill", "partition"])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of workload before the switch")
    args = parser.parse_args(argv)
    print(f"machine: {ceiling.machine_summary()}", flush=True)
    rt50, rt99 = ceiling.loopback_round_trip_us()
    print(f"ceiling: loopback round trip of 100 B between two Python threads p50 {rt50:.0f} µs, p99 {rt99:.0f} µs",
          flush=True)
    rows = []
    for rate in args.rates:
        for disaster in args.disasters:
            for mode in args.modes:
                started = time.monotonic()
                try:
                    report = run_once(mode, disaster, rate, args.duration)
                except (RuntimeError, subprocess.TimeoutExpired) as exc:
                    print(f"{mode} {disaster} {rate:g}/s: FAILED: {exc}", flush=True)
                    continue
                row = row_of(mode, rate, report)
                rows.append(row)
                print(json.dumps({**row.__dict__, "took_s": round(time.monotonic() - started, 1)}), flush=True)
    print()
    print(table(rows))
    if any(not row.keeps_up for row in rows):
        print(f"\n* the workload reached less than {KEEPS_UP:.0%} of the asked rate: this machine did not keep up")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
