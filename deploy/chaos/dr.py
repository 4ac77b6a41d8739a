"""The DR round-trip matrix (`--matrix dr`): each disaster (planned, kill, partition) x mirror
mode (link, mm2) x source (Causeway here; Apache Kafka elsewhere, see SOURCES) on
examples/dr.yaml's 3-broker sites, as a user runs it: `causeway up -d`, then `causeway drill
failback --third-move` (link: the failover, truncate-and-restore or reverse-and-start, a planned
switch back, then reverse-and-start at the DR site and a planned switch-over to it) or `causeway
drill failover` (mm2 has no failback) with `--json`, `causeway down`.

A scenario passes when its report accounts for every record: nothing duplicated at the DR site,
a planned switch-over loses nothing, the moved group skips nothing, and for a failback the
quarantine's acknowledged records are exactly the RPO (by offset), both sites' logs identical
batch for batch, the group home and at the DR site again re-reads and skips nothing. Losses within the RPO are what a
failover costs and are reported, not failed. The Apache Kafka column is judged by the same
`problems_of`, with no failback (NO_FAILBACK says why).
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

__all__ = ["ELSEWHERE", "KAFKA_COLUMN", "KAFKA_PROFILE", "KAFKA_TEST", "MATRIX", "NO_FAILBACK", "PROFILE", "SOURCES",
           "DrResult", "DrScenario", "format_table", "problems_of", "run_scenario"]

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "dr.yaml"
MIRROR = "primary-to-dr"
DISASTERS = ("planned", "kill", "partition")
MODES = ("link", "mm2")
# The old primary's kind, and whether this module runs its column. An Apache Kafka primary
# ("kafka": its scenarios are KAFKA_COLUMN) is run by tests/compat/test_drill_kafka_source.py,
# which `make chaos` runs after this matrix: this package may not start a Kafka node (bench.peers
# imports deploy, so deploy importing it would close a circle; tests/ is no package a product
# module imports), and a Kafka primary is no `causeway up` cluster the drill command finds: the
# test hands the drill its kill and WAN-cut hooks (DrillPlan.kill_source, DrillPlan.wan_link).
SOURCES = {"causeway": True, "kafka": False}
KAFKA_TEST = "tests/compat/test_drill_kafka_source.py"
ELSEWHERE = {"kafka": f"every disaster x mode as failover drills, by {KAFKA_TEST}: make chaos MATRIX=dr runs "
                      "the six after this table, make test its kill x link (the others are marked chaos)"}
# Why a link-mode drill from such a primary is a failover drill, not a failback one.
NO_FAILBACK = {"kafka": "failback not possible: truncate-and-restore and reverse-and-start need LinkTruncate and "
                        "LinkAppend at the old primary, which Apache Kafka lacks (docs/operations/mirror-link.md, "
                        "Mirroring from Apache Kafka)"}


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

    @property
    def failback(self) -> bool:
        """Whether the drill goes back too: link mode, to an old primary that can be restored."""
        return self.mode == "link" and self.source not in NO_FAILBACK


def _column(source: str) -> list[DrScenario]:
    return [DrScenario(d, m, source) for m in MODES for d in DISASTERS]


MATRIX = [s for source, available in SOURCES.items() if available for s in _column(source)]
PROFILE = [DrScenario("partition", "link")]
KAFKA_COLUMN = _column("kafka")
KAFKA_PROFILE = DrScenario("kill", "link", "kafka")  # the one make test runs


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
        rto = self.report.get("rto") or {}
        line = (f"{self.scenario.name}: {'ok' if self.passed else 'FAILED'} RPO {rpo.get('records')} of "
                f"{rpo.get('acknowledged')} acknowledged, duplicates {rpo.get('duplicates')}, group re-read "
                f"{group.get('reread')} skipped {group.get('skipped')}, RTO {rto.get('first_produce_s')} s to "
                f"produce, {rto.get('first_consume_s')} s to consume")
        if back:
            quarantine, logs = back.get("quarantine") or {}, back.get("logs") or {}
            line += (f"; {back.get('command')}: quarantined {quarantine.get('records')} "
                     f"({quarantine.get('acknowledged')} acknowledged), home re-read "
                     f"{(back.get('group') or {}).get('reread')} skipped {(back.get('group') or {}).get('skipped')}, "
                     f"{logs.get('batches')} batches {'identical' if logs.get('identical') else 'DIFFER'}")
            again = back.get("third_move") or {}
            if again:
                logs = again.get("logs") or {}
                line += (f"; at the DR site again re-read {(again.get('group') or {}).get('reread')} skipped "
                         f"{(again.get('group') or {}).get('skipped')}, {logs.get('batches')} batches "
                         f"{'identical' if logs.get('identical') else 'DIFFER'}")
        elif self.scenario.mode == "link" and not self.scenario.failback:
            line += f"; {NO_FAILBACK[self.scenario.source]}"
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
    if scenario.failback:
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
        again = back.get("third_move")
        if not again:
            return [*found, "no third move in the report"]
        if (again.get("group") or {}) != {"reread": 0, "skipped": 0}:
            found.append(f"the group at the DR site again: {again.get('group')}")
        if not (again.get("logs") or {}).get("identical"):
            found.append(f"logs differ after the third move: {(again.get('logs') or {}).get('differing')}")
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
            # A failback goes the whole round trip: the group moved to the DR site, home, and to
            # the DR site again.
            kind, more = ("failback", ["--third-move"]) if scenario.mode == "link" else ("failover", [])
            done = _causeway("drill", kind, str(topology), "--mirror", MIRROR, "--state-dir", str(state),
                             "--disaster", scenario.disaster, "--rate", f"{scenario.rate:g}", "--duration",
                             f"{scenario.duration_s:g}", *more, "--json")
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
        rpo, group, rto = r.report.get("rpo") or {}, r.report.get("group") or {}, r.report.get("rto") or {}
        back = r.report.get("failback") or {}
        rows.append((r.scenario.name, "ok" if r.passed else "FAILED", str(rpo.get("records", "-")),
                     str(rpo.get("duplicates", "-")), str(group.get("reread", "-")),
                     f"{rto.get('first_produce_s', '-')}/{rto.get('first_consume_s', '-')}",
                     str((back.get("quarantine") or {}).get("records", "-")),
                     str((back.get("logs") or {}).get("batches", "-"))))
    unavailable = [s for s, ok in SOURCES.items() if not ok]
    note = "".join(f"\nnot run here: source {s}: {ELSEWHERE.get(s, 'not available yet')}"
                   + (f"; {NO_FAILBACK[s]}" if s in NO_FAILBACK else "") for s in unavailable)
    return table(("scenario", "result", "RPO", "dup", "re-read", "RTO s produce/consume", "quarantined", "batches"),
                 rows) + note
