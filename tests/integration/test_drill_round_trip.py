"""The whole DR round trip on examples/dr.yaml (3-broker ZooKeeper sites over the emulated 40 ms
link; groups formed at once, as in the other drill tests): a failover under load with the WAN link
cut, truncate-and-restore, the reverse mirror, a planned switch back (deploy/drill/roundtrip.py).
The first failover's losses are counted by the chaos checker on the old primary's logs before
any cut, and the quarantine read from disk holds exactly those records; the group moved there
reads the copy exactly from the offsets the DR site held for it at the promotion (so it re-reads
exactly what it read at the primary past them), and home skips and re-reads nothing; both sites'
logs end identical batch for batch, on every replica read from its files on disk. Then the third
move (run_third_move): reverse-and-start at the DR site, the forward mirror `causeway up` runs
copying home's new records, a planned switch-over to the DR site: the group re-reads and skips
nothing there, and both sites' logs are identical again, on every replica."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import yaml

from deploy.chaos.checker import Report, check
from deploy.chaos.payload import make_record
from deploy.drill.failback import run_failback, run_third_move
from deploy.drill.report import DrillReport
from deploy.drill.roundtrip import drill_plan, primary_records, quarantined_records, record_seq, replica_batches
from deploy.drill.run import DrillPlan
from tests.integration.test_link_mode_launcher import REPO, causeway
from tests.support.polling import wait_until

MIRROR = "primary-to-dr"


@dataclass(frozen=True)
class Checked:
    """A drill record as the chaos checker reads one (its RecordLike)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


def as_checked(partition: int, offset: int, name: str) -> Checked:
    """The drill's record `<run>:<site>:<seq>` as the chaos payload of (run.site, partition, seq):
    the checker knows each record by its sequence, as it knows its own producer's (the bytes are
    the batch comparison's to check)."""
    run, site, seq = name.split(":")
    record = make_record(f"{run}.{site}", partition, int(seq), timestamp_ms=0)
    return Checked(offset, record.timestamp or 0, record.key, record.value, tuple(record.headers))


def check_failover(plan: DrillPlan, report: DrillReport) -> dict[str, Report]:
    """The chaos checker's verdict on the failover, per topic: the old primary's logs (read before
    any cut) as the source, the DR site's copies of its records as the target, the producer's
    acknowledgements as `acked`."""
    source = primary_records(plan.source_bootstrap, plan.partitions, report.run)
    target = primary_records(plan.target_bootstrap, plan.partitions, report.run)
    verdicts = {}
    for topic in plan.topics:
        ours = [p for t, p in plan.partitions if t == topic]
        verdicts[topic] = check(
            {p: [as_checked(p, o, n) for o, n in sorted(source[(topic, p)].items())] for p in ours},
            {p: [as_checked(p, o, n) for o, n in sorted(target[(topic, p)].items())] for p in ours},
            acked={p: [record_seq(n) for n in report.acked_primary.get((topic, p), {}).values()] for p in ours},
            run=f"{report.run}.primary", max_examples=1 << 30)
    return verdicts


def replicas_alike(state: Path, tp: tuple[str, int], ahead: str, behind: str) -> bool:
    """Every replica of `tp`, read from its files on disk: the three at each site alike, and
    `ahead`'s alike `behind`'s below `behind`'s end (past it: what was written at `ahead` since
    the applications left `behind`)."""
    at_ahead, at_behind = replica_batches(state, ahead, tp), replica_batches(state, behind, tp)
    if len(at_ahead) != 3 or len(at_behind) != 3:
        return False
    if len({tuple(b) for b in at_ahead.values()}) != 1 or len({tuple(b) for b in at_behind.values()}) != 1:
        return False
    longer, shorter = next(iter(at_ahead.values())), next(iter(at_behind.values()))
    end = shorter[-1][1] + 1 if shorter else 0
    return bool(shorter) and [b for b in longer if b[0] < end] == shorter


def test_a_round_trip_quarantines_exactly_what_the_checker_counts_lost(tmp_path: Path) -> None:
    doc = yaml.safe_load((REPO / "examples/dr.yaml").read_text())
    for cluster in doc["clusters"].values():
        cluster.setdefault("configs", {})["group.initial.rebalance.delay.ms"] = 0
    topology = tmp_path / "dr.yaml"
    topology.write_text(yaml.safe_dump(doc))
    state = tmp_path / "state"
    up = causeway("up", str(topology), "-d", "--state-dir", str(state), timeout_s=300)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        said: list[str] = []
        plan = drill_plan(state, MIRROR, disaster="partition", rate=300, duration_s=3)
        checked: dict[str, Report] = {}
        copies: dict[tuple[str, int], dict[int, str]] = {}

        def before_restore(report: DrillReport) -> None:
            checked.update(check_failover(plan, report))
            copies.update(primary_records(plan.target_bootstrap, plan.partitions, report.run))

        report = run_failback(plan, said.append, before_restore=before_restore)
        output = "\n".join(said)
        assert checked, output  # the old primary was read before the truncate-and-restore
        lost = [(topic, e.partition, e.seq) for topic, verdict in checked.items() for e in verdict.examples()
                if e.kind in ("lost", "tail")]
        quarantined = quarantined_records(report)
        back = report.failback
        assert report.outcome is not None and back is not None
        assert back.command == "truncate-and-restore", output
        # The checker, on its own: the copy lost records at its tail only, none duplicated,
        # reordered, corrupted or foreign; and it counts as many as the drill's RPO or more (records
        # the primary held whose acknowledgement never came are lost to the copy too).
        for verdict in checked.values():
            for category in ("duplicated", "reordered", "corrupted", "unexpected", "source_anomalies"):
                assert verdict.total(category) == 0, verdict.summary()
        assert len(lost) >= report.outcome.rpo > 0, output
        # The quarantine holds exactly the records the checker counts lost, each once.
        assert Counter(quarantined) == Counter(lost), (sorted(quarantined), sorted(lost))
        assert back.quarantined == len(lost) and back.rpo_matches_quarantine is True, output
        # The group at the DR site, against the offsets the DR site held for it at the promotion
        # (one OffsetFetch right after it): it read the copy of the primary's records exactly
        # from those offsets on, offset for offset (no re-read below them, nothing skipped past
        # them), so what it re-read is exactly what it had read at the primary past them.
        done = report.outcome
        assert {tp for tp in done.committed} == set(plan.partitions), output
        for tp in plan.partitions:
            start, end = max(done.committed[tp], 0), done.log_end[tp]
            assert start <= end, (tp, start, end)
            copied = {o: n for o, n in copies[tp].items() if start <= o < end}
            read = {o: n for o, n in report.read_at_dr.get(tp, {}).items() if n.startswith(f"{report.run}:primary:")}
            assert read == copied, (tp, start, sorted(set(read) ^ set(copied))[:10])
        assert done.reread_below_committed == 0, output
        assert done.reread == done.reread_expected, output
        # Skipped nothing at the DR site, nothing and re-read nothing on the way home.
        assert report.outcome.skipped == 0, output
        assert (back.reread, back.skipped) == (0, 0), output
        # Both sites' logs alike batch for batch, on every partition.
        assert back.differing == [] and back.batches_compared > 0, output
        assert back.partitions_compared == len(plan.partitions) == 5, output
        # Every replica, read from its files on disk: the three at each site alike, and the old
        # primary's alike the DR site's below the DR site's end (past it: what was written home).
        for tp in plan.partitions:
            wait_until(partial(replicas_alike, state, tp, plan.source, plan.target),
                       what=f"{tp}: every replica alike at both sites", timeout_s=30)

        # The third move: home -> the DR site again, with the forward mirror.
        third = run_third_move(plan, report, said.append)
        output = "\n".join(said)
        assert back.third is third and third.mirror == MIRROR, output
        assert any("reverse-and-start at the DR site" == step.name for step in report.timeline.steps), output
        assert third.committed_home and third.committed_dr == third.committed_home, output
        assert (third.reread, third.skipped) == (0, 0), output
        assert third.differing == [] and third.batches_compared > back.batches_compared, output
        assert report.to_json()["failback"]["third_move"]["group"] == {"reread": 0, "skipped": 0}
        for tp in plan.partitions:
            wait_until(partial(replicas_alike, state, tp, plan.target, plan.source),
                       what=f"{tp}: every replica alike at both sites after the third move", timeout_s=30)
    finally:
        down = causeway("down", "--state-dir", str(state))
    assert down.returncode == 0, down.stdout + down.stderr
