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
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from functools import partial

from confluent_kafka import KafkaException

from deploy.drill.batches import compare_logs
from deploy.drill.report import Cut, DrillReport, FailbackOutcome
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
from deploy.drill.verify import log_ends
from deploy.drill.workload import GroupReader, ProducerLoad, TopicPartition
from deploy.launcher.control import read_state
from mirror.config import mirror_config_from_data
from mirror.failback import FailbackError

__all__ = ["run_failback"]

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
    group = f"causeway-{report.run}"
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

        step = timeline.begin("workload at the DR site, copied back")
        reader = GroupReader(plan.target_bootstrap, group, plan.topics, report.run).start()
        load = ProducerLoad(plan.target_bootstrap, plan.topics, plan.rate, report.run, "dr-back").start()
        clients += [reader, load]
        wait_until(lambda: load.ledger.first_ack is not None, "the first record acknowledged at the DR site", stop)
        pause(plan.duration_s, stop)
        timeline.end(step, f"{load.ledger.count()} acknowledged at the DR site")
        say(f"{step.name}: {step.detail}")

        step = timeline.begin("producers stopped at the DR site")
        stopped_at = time.monotonic()
        load.stop(grace_s=10.0)
        clients.remove(load)
        wait_until(lambda: caught_up(reader, load.ledger.ends()), f"group {group} to read every record", stop)
        reader.stop(commit=True)
        clients.remove(reader)
        timeline.end(step, f"{load.ledger.count()} acknowledged, {load.ledger.failed} failed; the group caught up "
                           "and committed")

        step = timeline.begin("promote at the old primary")
        timeline.end(step, _promote_back(plan, reverse, config, say))
        say(f"{step.name}: {step.detail}")

        step = timeline.begin("producers and group moved home")
        home_reader = GroupReader(plan.source_bootstrap, group, plan.topics, report.run).start()
        home = ProducerLoad(plan.source_bootstrap, plan.topics, plan.rate, report.run, "home").start()
        clients += [home_reader, home]
        wait_until(lambda: home.ledger.first_ack is not None, "the first record acknowledged back home", stop)
        back.rto_produce_s = (home.ledger.first_ack or 0) - stopped_at
        wait_until(lambda: home_reader.first_read is not None, f"group {group}'s first record back home", stop)
        back.rto_consume_s = (home_reader.first_read or 0) - stopped_at
        home.stop(grace_s=10.0)
        clients.remove(home)
        wait_until(lambda: caught_up(home_reader, home.ledger.ends()), f"group {group} to read every record back home",
              stop, START_TIMEOUT_S)
        home_reader.stop(commit=True)
        clients.remove(home_reader)
        read_before = {*report.read_names, *reader.names}
        back.reread = sum(1 for name in home_reader.names if name in read_before)
        back.skipped = len((load.ledger.names() | home.ledger.names()) - read_before - set(home_reader.names))
        timeline.end(step, f"first produce {back.rto_produce_s:.2f} s, first consume {back.rto_consume_s:.2f} s "
                           f"after the producers stopped at the DR site; re-read {back.reread}, skipped {back.skipped}")
        say(f"{step.name}: {step.detail}")

        # Stopped once the applications are home (the RTO is theirs): the topics are promoted, it
        # copies nothing more.
        step = timeline.begin("reverse mirror stopped")
        mirror.stop()
        mirror = None
        timeline.end(step, reverse)

        step = timeline.begin("logs compared batch for batch")
        back.partitions_compared = len(plan.partitions)
        back.batches_compared, back.differing = _compare(plan)
        timeline.end(step, f"{back.batches_compared} batch(es) alike" + (
            f", {len(back.differing)} partition(s) differ" if back.differing else ""))
        say(f"{step.name}: {step.detail}")
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


def _restore(plan: DrillPlan, reverse: str, *, truncate: bool, say: Say) -> list[Cut]:
    import trio

    from mirror.failback import failback

    done = trio.run(partial(failback, plan.source_bootstrap, plan.target_bootstrap, reverse_mirror=reverse,
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
    import trio

    from mirror.promote import promote

    done = trio.run(partial(promote, plan.source_bootstrap, source_bootstrap=plan.target_bootstrap, mirror=reverse,
                            timeout_s=60.0, say=lambda line: say(f"  promote: {line}"),
                            config=mirror_config_from_data(config)))
    if not done.ok:
        why = "; ".join(f"{t}: {w}" for t, w in sorted(done.failed.items())) or "the copy did not catch up"
        raise DrillError(f"the promotion failed: {why}")
    return f"{len(done.promoted)} topic(s) promoted"


def _compare(plan: DrillPlan) -> tuple[int, list[str]]:
    import trio

    return trio.run(compare_logs, plan.source_bootstrap, plan.target_bootstrap, plan.partitions)
