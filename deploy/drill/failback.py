"""`drill failback`: the failover drill (run.py), then the way back. Once the old primary
answers again (the drill's disaster undone: its killed brokers restarted by the launcher, or the
cut link put back), truncate-and-restore (after a failover; reverse-and-start after a planned
switch-over) makes its topics mirror topics of the reverse mirror, which the drill runs
(reverse.py) while producers and the group work at the DR site; then a planned switch back
(producers stopped, the group caught up, promote at the old primary, which waits for the copy
and carries the group's offsets), producers and group moved home. Checked on the way: the
quarantine holds exactly the acknowledged records the failover lost (by offset), the group moved
twice re-reads and skips nothing, both sites' logs are identical batch for batch below the DR
site's end (batches.py).

`run_third_move` (`--third-move`) then goes to the DR site once more: reverse-and-start there
with the forward mirror's name (which `causeway up` runs, and which takes its topics up again),
a planned switch-over, the group's third move counted the same way.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

from confluent_kafka import KafkaException

from deploy.drill.batches import compare_logs
from deploy.drill.report import Cut, DrillReport, FailbackOutcome, ThirdMove, committed_text
from deploy.drill.reverse import ReverseMirror, reverse_config
from deploy.drill.run import (
    START_TIMEOUT_S,
    STEP_FAILURES,
    DrillError,
    DrillInterrupted,
    DrillPlan,
    Say,
    caught_up,
    pause,
    run_drill,
    stop_all_fast,
    wait_until,
)
from deploy.drill.verify import committed_offsets, log_ends
from deploy.drill.workload import STOP_COMMIT_S, GroupReader, ProducerLoad, TopicPartition
from deploy.launcher.control import read_state
from mirror.config import MirrorConfig, mirror_config_from_data
from mirror.failback import FailbackError

__all__ = ["run_failback", "run_third_move"]

BACK_TIMEOUT_S = 120.0  # for the old primary to answer again (a killed broker restarts after a backoff)


def _answers(bootstrap: str, partitions: list[TopicPartition]) -> bool:
    try:
        log_ends(bootstrap, partitions, timeout_s=2.0)
        return True
    except KafkaException:
        return False


def _expand(ranges: list[tuple[int, int]]) -> set[int]:
    return {o for first, last in ranges for o in range(first, last + 1)}


def run_failback(plan: DrillPlan, say: Say, stop: threading.Event | None = None,
                 before_restore: Callable[[DrillReport], None] | None = None) -> DrillReport:
    """`before_restore`, when given, is called once the old primary answers again and before
    anything at it is cut or restored: what it held after the failover can be read there (the
    round-trip check, roundtrip.py, reads it to count the failover's losses on its own)."""
    stop = stop if stop is not None else threading.Event()
    report = run_drill(plan, say, stop)
    timeline, outcome = report.timeline, report.outcome
    assert outcome is not None
    reverse = f"{plan.mirror}-reverse"
    back = FailbackOutcome("reverse-and-start" if plan.planned else "truncate-and-restore", reverse)
    report.failback = back
    clients: list[ProducerLoad | GroupReader] = []
    mirror: ReverseMirror | None = None
    try:
        step = timeline.begin("old primary answering again")
        wait_until(lambda: _answers(plan.source_bootstrap, plan.partitions), f"{plan.source} to answer", stop,
              BACK_TIMEOUT_S)
        timeline.end(step, f"{plan.source} ({plan.source_bootstrap})")
        say(f"{step.name}: {step.detail}")
        if before_restore is not None:
            before_restore(report)

        step = timeline.begin(back.command)
        back.cuts = _restore(plan, reverse, truncate=not plan.planned, say=say)
        for cut in back.cuts:
            acked = report.acked_primary.get((cut.topic, cut.partition), {})
            cut.acknowledged = sum(1 for o in acked if cut.first_offset <= o <= cut.last_offset)
        if back.command == "truncate-and-restore":
            back.rpo_matches_quarantine = _same_offsets(report, back.cuts)
        timeline.end(step, f"{back.quarantined} record(s) cut into quarantine, {back.quarantined_acknowledged} of "
                           f"them acknowledged (RPO {outcome.rpo})")
        say(f"{step.name}: {step.detail}")

        step = timeline.begin("reverse mirror started")
        state = read_state(plan.state_dir)
        if state is None:
            raise DrillError(f"{plan.state_dir}: the topology is not running")
        config = reverse_config(state, plan.mirror, reverse)
        mirror = ReverseMirror(plan.state_dir, config).start()
        timeline.end(step, f"mirror {reverse} (pid {mirror.pid}), log {mirror.log}")
        say(f"{step.name}: {step.detail}")

        moved = _planned_switch(
            plan, report, say, stop, clients, Site(plan.target_bootstrap, "the DR site", "dr-back"),
            Site(plan.source_bootstrap, "home", "home"), workload_step="workload at the DR site, copied back",
            promote_step="promote at the old primary", promote=lambda: _promote_back(plan, reverse, config, say),
            moved_step="producers and group moved home")
        back.rto_produce_s, back.rto_consume_s, back.reread, back.skipped = moved

        # Stopped once the applications are home (the RTO is theirs): the topics are promoted, it
        # copies nothing more.
        step = timeline.begin("reverse mirror stopped")
        mirror.stop()
        mirror = None
        timeline.end(step, reverse)

        back.partitions_compared = len(plan.partitions)
        back.batches_compared, back.differing = _compare(plan, report, say, "logs compared batch for batch")
    except (*STEP_FAILURES, FailbackError, RuntimeError, LookupError) as exc:
        raise DrillError(f"{timeline.under_way()}: {exc}", report) from exc
    except KeyboardInterrupt:
        stop_all_fast(clients)
        undone = []
        if mirror is not None:
            mirror.stop()
            mirror = None
            undone.append(f"the reverse mirror {reverse} was stopped")
        undone += _where_back(report, reverse)
        raise DrillInterrupted(report, undone) from None
    finally:
        stop_all_fast(clients)
        if mirror is not None:
            mirror.stop()
    return report


def run_third_move(plan: DrillPlan, report: DrillReport, say: Say, stop: threading.Event | None = None) -> ThirdMove:
    """After `run_failback` (the applications home, the reverse mirror stopped): the DR site's
    topics become mirror topics of the forward mirror again (reverse-and-start: after the planned
    switch back the logs agree), which `causeway up` runs and which takes them up at its next
    discovery round, copying home's new records while the applications work at home; then a
    planned switch-over to the DR site (producers stopped at home, the group caught up and
    committed, promote at the DR site), producers and group moved there. Counted: the group's
    re-reads and skips at this move, and both sites' logs batch for batch below home's end."""
    stop = stop if stop is not None else threading.Event()
    back = report.failback
    assert back is not None
    timeline = report.timeline
    third = back.third = ThirdMove(plan.mirror)
    group = f"causeway-{report.run}"
    clients: list[ProducerLoad | GroupReader] = []
    try:
        step = timeline.begin("reverse-and-start at the DR site")
        _restore(plan, plan.mirror, truncate=False, say=say, again=True)
        timeline.end(step, f"{plan.target}'s topics are mirror topics of {plan.mirror} again")
        say(f"{step.name}: {step.detail}")

        def switch_over() -> str:
            third.committed_home = committed_offsets(plan.source_bootstrap, group, plan.partitions)
            promoted = _planned_promote(plan.target_bootstrap, plan.source_bootstrap, plan.mirror, plan.config, say)
            third.committed_dr = committed_offsets(plan.target_bootstrap, group, plan.partitions)
            return f"{promoted}; the group's offsets there, of home's: " + committed_text(third.committed_dr,
                                                                                         third.committed_home)

        moved = _planned_switch(
            plan, report, say, stop, clients, Site(plan.source_bootstrap, "home", "home-again"),
            Site(plan.target_bootstrap, "the DR site", "dr-again"),
            workload_step="workload at home, copied to the DR site", promote_step="switch-over to the DR site",
            promote=switch_over, moved_step="producers and group moved to the DR site again")
        third.rto_produce_s, third.rto_consume_s, third.reread, third.skipped = moved

        third.batches_compared, third.differing = _compare(plan, report, say, "logs compared batch for batch again",
                                                           again=True)
    except (*STEP_FAILURES, FailbackError, RuntimeError, LookupError) as exc:
        raise DrillError(f"{timeline.under_way()}: {exc}", report) from exc
    except KeyboardInterrupt:
        stop_all_fast(clients)
        raise DrillInterrupted(report, _where_again(report, plan.mirror)) from None
    finally:
        stop_all_fast(clients)
    return third


@dataclass(frozen=True)
class Site:
    bootstrap: str
    name: str  # as the report says it: "home", "the DR site"
    label: str  # its producers' records are named "<run>:<label>:<sequence>"


class Moved(NamedTuple):
    rto_produce_s: float  # from the producers stopping at the site left to the first produce at the other
    rto_consume_s: float  # ... to the group's first read there
    reread: int  # records the group read there that it had read before (anywhere)
    skipped: int  # records produced at either site in this move that the group never read


def _planned_switch(plan: DrillPlan, report: DrillReport, say: Say, stop: threading.Event,
                    clients: list[ProducerLoad | GroupReader], at: Site, to: Site, *, workload_step: str,
                    promote_step: str, promote: Callable[[], str], moved_step: str) -> Moved:
    """The applications at `at` for the drill's duration (its records copied to `to`), then a
    planned switch-over: producers stopped, the group caught up and committed, `promote` (at
    `to`: it waits for the copy and carries the group's offsets), producers and group moved to
    `to`, run until the group read everything. `clients` holds the ones running, for the caller
    to stop when a step fails."""
    timeline, group = report.timeline, f"causeway-{report.run}"
    step = timeline.begin(workload_step)
    reader = GroupReader(at.bootstrap, group, plan.topics, report.run).start()
    load = ProducerLoad(at.bootstrap, plan.topics, plan.rate, report.run, at.label).start()
    clients += [reader, load]
    wait_until(lambda: load.ledger.first_ack is not None, f"the first record acknowledged at {at.name}", stop)
    pause(plan.duration_s, stop)
    timeline.end(step, f"{load.ledger.count()} acknowledged at {at.name}")
    say(f"{step.name}: {step.detail}")

    step = timeline.begin(f"producers stopped at {at.name}")
    stopped_at = time.monotonic()
    load.stop(grace_s=10.0)
    clients.remove(load)
    wait_until(lambda: caught_up(reader, load.ledger.ends()), f"group {group} to read every record", stop)
    reader.stop(commit=True)
    clients.remove(reader)
    timeline.end(step, f"{load.ledger.count()} acknowledged, {load.ledger.failed} failed; the group caught up "
                       + ("and committed" if reader.last_commit_taken else
                          f"but its last commit was refused for {STOP_COMMIT_S:g} s (re-read at {to.name})")
                       + (f" ({reader.commits_refused} commit(s) refused on the way)"
                          if reader.commits_refused else ""))

    step = timeline.begin(promote_step)
    timeline.end(step, promote())
    say(f"{step.name}: {step.detail}")

    step = timeline.begin(moved_step)
    to_reader = GroupReader(to.bootstrap, group, plan.topics, report.run).start()
    to_load = ProducerLoad(to.bootstrap, plan.topics, plan.rate, report.run, to.label).start()
    clients += [to_reader, to_load]
    wait_until(lambda: to_load.ledger.first_ack is not None, f"the first record acknowledged at {to.name}", stop)
    rto_produce = (to_load.ledger.first_ack or 0) - stopped_at
    wait_until(lambda: to_reader.first_read is not None, f"group {group}'s first record at {to.name}", stop)
    rto_consume = (to_reader.first_read or 0) - stopped_at
    to_load.stop(grace_s=10.0)
    clients.remove(to_load)
    wait_until(lambda: caught_up(to_reader, to_load.ledger.ends()), f"group {group} to read every record at {to.name}",
               stop, START_TIMEOUT_S)
    to_reader.stop(commit=True)
    clients.remove(to_reader)
    read_before = {*report.read_names, *reader.names}
    moved = Moved(rto_produce, rto_consume, sum(1 for name in to_reader.names if name in read_before),
                  len((load.ledger.names() | to_load.ledger.names()) - read_before - set(to_reader.names)))
    report.read_names += [*reader.names, *to_reader.names]  # what a later move goes on from
    timeline.end(step, f"first produce {rto_produce:.2f} s, first consume {rto_consume:.2f} s after the producers "
                       f"stopped at {at.name}; re-read {moved.reread}, skipped {moved.skipped}")
    say(f"{step.name}: {step.detail}")
    return moved


def _where_again(report: DrillReport, mirror: str) -> list[str]:
    """What state an interrupted third move left the DR site's topics in, and how to go on."""
    begun = {step.name for step in report.timeline.steps}
    if "switch-over to the DR site" in begun:
        return [f"the switch-over to the DR site began: `causeway mirror promote TOPOLOGY --mirror {mirror}` "
                "completes it"]
    if "reverse-and-start at the DR site" in begun:
        return [f"the DR site's topics are (or are becoming) mirror topics of {mirror} again: rerun "
                f"`causeway mirror reverse-and-start --bootstrap DR --new-primary-bootstrap HOME --reverse-mirror "
                f"{mirror}` to complete it"]
    return []


def _where_back(report: DrillReport, reverse: str) -> list[str]:
    """What state an interrupted way back left the old primary's topics in, and how to go on."""
    begun = {step.name for step in report.timeline.steps}
    if "promote at the old primary" in begun:
        return [f"the switch back began: `causeway mirror promote --bootstrap OLD --source-bootstrap NEW --mirror "
                f"{reverse}` completes it"]
    if begun & {"truncate-and-restore", "reverse-and-start"}:
        return [f"the old primary's topics are (or are becoming) mirror topics of {reverse}: rerun the failback "
                "command to complete it, then run that mirror and promote at the old primary"]
    return []


def _restore(plan: DrillPlan, reverse: str, *, truncate: bool, say: Say, again: bool = False) -> list[Cut]:
    """The old primary's topics made mirror topics of `reverse`; `again`: the DR site's, of the
    forward mirror (the third move), with the applications home."""
    import trio

    from mirror.failback import failback

    old, new = (plan.target_bootstrap, plan.source_bootstrap) if again else (plan.source_bootstrap,
                                                                             plan.target_bootstrap)
    done = trio.run(partial(failback, old, new, reverse_mirror=reverse,
                            truncate=truncate, topics=[re.escape(t) for t in plan.topics], timeout_s=60.0,
                            say=lambda line: say(f"  {line}")))
    if not done.ok:
        why = "; ".join(f"{p.topic}-{p.partition}: {p.result.error_message if p.result else 'not done'}"
                        for p in done.partitions if not p.ok)
        raise DrillError(f"{'refused' if done.refused else 'not finished'}: {why or 'nothing restored'}")
    return [Cut(p.topic, p.partition, p.result.records, p.result.first_offset, p.result.last_offset,
                p.result.quarantine or "", 0)
            for p in done.partitions if p.result is not None and p.result.records]


def _same_offsets(report: DrillReport, cuts: list[Cut]) -> bool:
    """Whether the acknowledged records the failover lost (by partition and offset: link mode
    keeps offsets) are exactly the acknowledged records in the quarantine."""
    assert report.outcome is not None
    lost = {(x.topic, x.partition): _expand(x.ranges) for x in report.outcome.lost}
    kept = {}
    for cut in cuts:
        acked = report.acked_primary.get((cut.topic, cut.partition), {})
        offsets = {o for o in acked if cut.first_offset <= o <= cut.last_offset}
        if offsets:
            kept[(cut.topic, cut.partition)] = offsets
    return lost == kept


def _promote_back(plan: DrillPlan, reverse: str, config: dict[str, object], say: Say) -> str:
    return _planned_promote(plan.source_bootstrap, plan.target_bootstrap, reverse, mirror_config_from_data(config),
                            say)


def _planned_promote(at: str, source: str, mirror: str, config: MirrorConfig | None, say: Say) -> str:
    """A planned promote of `mirror`'s topics at `at`: it waits for the copy of `source`'s log
    ends and carries the groups' offsets a last time."""
    import trio

    from mirror.promote import promote

    done = trio.run(partial(promote, at, source_bootstrap=source, mirror=mirror,
                            timeout_s=60.0, say=lambda line: say(f"  promote: {line}"), config=config))
    if not done.ok:
        why = "; ".join(f"{t}: {w}" for t, w in sorted(done.failed.items())) or "the copy did not catch up"
        raise DrillError(f"the promotion failed: {why}")
    return f"{len(done.promoted)} topic(s) promoted"


def _compare(plan: DrillPlan, report: DrillReport, say: Say, step_name: str, *,
             again: bool = False) -> tuple[int, list[str]]:
    """A step: both sites' logs batch for batch, below the end of the site the applications left
    last (the DR site after the switch back, home after the third move: `again`)."""
    import trio

    step = report.timeline.begin(step_name)
    ahead, behind = (plan.target_bootstrap, plan.source_bootstrap) if again else (plan.source_bootstrap,
                                                                                  plan.target_bootstrap)
    same, differing = trio.run(compare_logs, ahead, behind, plan.partitions)
    report.timeline.end(step, f"{same} batch(es) alike" + (
        f", {len(differing)} partition(s) differ" if differing else ""))
    say(f"{step.name}: {step.detail}")
    return same, differing
