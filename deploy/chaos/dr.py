"""The DR round-trip matrix (`--matrix dr`): each disaster (planned, kill, partition) x mirror
mode (link, mm2) x source (Causeway; Apache Kafka's failover runs elsewhere, see SOURCES) on
examples/dr.yaml's 3-broker sites, as a user runs it: `causeway up -d`, then `causeway drill
failback` (link: the failover, truncate-and-restore or reverse-and-start, a planned switch back)
or `causeway drill failover` (mm2 has no failback) with `--json`, `causeway down`.

A scenario passes when its report accounts for every record: nothing duplicated at the DR site,
a planned switch-over loses nothing, the moved group skips nothing, and for a failback the
quarantine's acknowledged records are exactly the RPO (by offset), both sites' logs identical
batch for batch, the group home re-reads and skips nothing. Losses within the RPO are what a
failover costs and are reported, not failed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from deploy.chaos.matrix import table

__all__ = ["ELSEWHERE", "MATRIX", "PROFILE", "SOURCES", "DrResult", "DrScenario", "format_table", "run_scenario"]

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "dr.yaml"
MIRROR = "primary-to-dr"
# The old primary's kind. "kafka" (an Apache Kafka primary, link mode reading it) is not run
# here: this package may not start a Kafka node (bench.peers and tests/ are outside its
# imports), and a Kafka primary is no `causeway up` cluster the drill command finds. Its failover
# (the primary SIGKILLed) runs where the Kafka hook is, in `make test`; listed so that the
# matrix says what it does not run, and where it does.
SOURCES = {"causeway": True, "kafka": False}
ELSEWHERE = {"kafka": "failover --disaster kill, link mode: tests/compat/test_drill_kafka_source.py (make test)"}


@dataclass(frozen=True)
class DrScenario:
    disaster: str  # planned, kill, partition
    mode: str  # link, mm2
    source: str = "causeway"
    rate: float = 300.0
    duration_s: float = 3.0

    @property
    def name(self) -> str:
        return f"dr-{self.disaster}-{self.mode}-{self.source}"


MATRIX = [DrScenario(d, m, s) for s, available in SOURCES.items() if available
          for m in ("link", "mm2") for d in ("planned", "kill", "partition")]
PROFILE = [DrScenario("partition", "link")]


@dataclass
class DrResult:
    scenario: DrScenario
    work_dir: Path | None
    report: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def passed(self) -> bool:
        return self.error is None and not self.problems

    def describe(self) -> str:
        if self.error is not None:
            return f"{self.scenario.name}: FAILED {self.error}"
        rpo = self.report.get("rpo") or {}
        group = self.report.get("group") or {}
        back = self.report.get("failback") or {}
        line = (f"{self.scenario.name}: {'ok' if self.passed else 'FAILED'} RPO {rpo.get('records')} of "
                f"{rpo.get('acknowledged')} acknowledged, duplicates {rpo.get('duplicates')}, group re-read "
                f"{group.get('reread')} skipped {group.get('skipped')}")
        if back:
            quarantine, logs = back.get("quarantine") or {}, back.get("logs") or {}
            line += (f"; {back.get('command')}: quarantined {quarantine.get('records')} "
                     f"({quarantine.get('acknowledged')} acknowledged), home re-read "
                     f"{(back.get('group') or {}).get('reread')} skipped {(back.get('group') or {}).get('skipped')}, "
                     f"{logs.get('batches')} batches {'identical' if logs.get('identical') else 'DIFFER'}")
        return line + "".join(f"; {p}" for p in self.problems)


def _topology(scenario: DrScenario, directory: Path) -> Path:
    doc = yaml.safe_load(EXAMPLE.read_text())
    for cluster in doc["clusters"].values():
        cluster.setdefault("configs", {})["group.initial.rebalance.delay.ms"] = 0
    doc["mirrors"][MIRROR]["mode"] = scenario.mode
    path = directory / "dr.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _causeway(*args: str, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "deploy.cli", *args], capture_output=True, text=True,
                          timeout=timeout_s, cwd=REPO)


def problems_of(scenario: DrScenario, report: dict[str, Any]) -> list[str]:
    """What the drill's report does not account for (empty: every record accounted for)."""
    found = []
    rpo, group = report.get("rpo") or {}, report.get("group") or {}
    if rpo.get("duplicates"):
        found.append(f"{rpo['duplicates']} acknowledged record(s) duplicated at the DR site")
    if scenario.disaster == "planned" and rpo.get("records"):
        found.append(f"a planned switch-over lost {rpo['records']} record(s)")
    if group.get("skipped"):
        found.append(f"the group skipped {group['skipped']} record(s) at the DR site")
    if scenario.mode == "link" and scenario.disaster == "planned" and group.get("reread"):
        found.append(f"the group re-read {group['reread']} record(s) after a planned link switch-over")
    # Against the offsets the DR site held for the group at the promotion: it resumes there, so
    # it re-reads exactly what it had read at the primary past them, and nothing below them.
    if group.get("reread_below_committed"):
        found.append(f"the group re-read {group['reread_below_committed']} record(s) below the offsets the DR site "
                     "held for it at the promotion")
    if "reread_expected" in group and group.get("reread") != group["reread_expected"]:
        found.append(f"the group re-read {group.get('reread')} record(s) where its offsets at the DR site at the "
                     f"promotion account for {group['reread_expected']}")
    back = report.get("failback")
    if scenario.mode == "link":
        if not back:
            return [*found, "no failback in the report"]
        quarantine = back.get("quarantine") or {}
        if quarantine.get("acknowledged") != rpo.get("records"):
            found.append(f"quarantined {quarantine.get('acknowledged')} acknowledged record(s), "
                         f"RPO {rpo.get('records')}")
        if scenario.disaster != "planned" and quarantine.get("matches_rpo") is not True:
            found.append("the quarantine's acknowledged offsets are not the RPO's")
        if (back.get("group") or {}) != {"reread": 0, "skipped": 0}:
            found.append(f"the group home: {back.get('group')}")
        if not (back.get("logs") or {}).get("identical"):
            found.append(f"logs differ: {(back.get('logs') or {}).get('differing')}")
    return found


async def run_scenario(scenario: DrScenario, /, *, seed: int, work_dir: Path) -> DrResult:
    """One scenario on a topology of its own (`seed` plays no part: the drill's disaster is not drawn)."""
    import trio

    del seed
    result = DrResult(scenario, work_dir)
    if not SOURCES.get(scenario.source):
        result.error = f"source {scenario.source} not run here: {ELSEWHERE.get(scenario.source, 'not available')}"
        return result
    state = work_dir / "state"

    def run() -> None:
        work_dir.mkdir(parents=True, exist_ok=True)
        topology = _topology(scenario, work_dir)
        up = _causeway("up", str(topology), "-d", "--state-dir", str(state))
        try:
            if up.returncode != 0:
                result.error = f"causeway up exited {up.returncode}: {up.stderr.strip()[-300:]}"
                return
            kind = "failback" if scenario.mode == "link" else "failover"
            done = _causeway("drill", kind, str(topology), "--mirror", MIRROR, "--state-dir", str(state),
                             "--disaster", scenario.disaster, "--rate", f"{scenario.rate:g}", "--duration",
                             f"{scenario.duration_s:g}", "--json")
            (work_dir / "drill.log").write_text(done.stdout + done.stderr)
            if done.returncode != 0 or not done.stdout.strip().startswith("{"):
                result.error = f"causeway drill {kind} exited {done.returncode}: {done.stderr.strip()[-300:]}"
                return
            result.report = json.loads(done.stdout)
            result.problems = problems_of(scenario, result.report)
        finally:
            _causeway("down", "--state-dir", str(state))

    await trio.to_thread.run_sync(run)
    return result


def format_table(results: list[DrResult]) -> str:
    rows = []
    for r in results:
        rpo, back = r.report.get("rpo") or {}, r.report.get("failback") or {}
        rows.append((r.scenario.name, "ok" if r.passed else "FAILED", str(rpo.get("records", "-")),
                     str(rpo.get("duplicates", "-")), str((back.get("quarantine") or {}).get("records", "-")),
                     str((back.get("logs") or {}).get("batches", "-"))))
    unavailable = [s for s, ok in SOURCES.items() if not ok]
    note = "".join(f"\nnot run here: source {s}: {ELSEWHERE.get(s, 'not available yet')}" for s in unavailable)
    return table(("scenario", "result", "RPO", "dup", "quarantined", "batches"), rows) + note
