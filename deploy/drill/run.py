"""The drill's steps in order: workload at the primary, the disaster (or the producers stopped
for a planned switch-over), the promotion, the workload moved to the DR site, the count.

Link mode and mm2 mode run the same steps; what differs is where the copies are at the DR site
(the same names and offsets, or the remote topics `<alias>.<topic>` at offsets of their own), so
an mm2 switch-over waits for every acknowledged record to be copied before promoting (link mode's
promotion waits for the source's log ends itself), and the moved group reads the remote topics
from the offsets the mirror translated for it beside the new local topics its producers write.

Runs in the calling thread (the clients run in threads of their own; the promotion in trio.run).
An interrupt (Ctrl-C) stops the clients, puts a cut WAN link back, and is raised again with the
timeline so far in `DrillInterrupted`, so the caller can say what was done.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Literal

from confluent_kafka import KafkaException

from broker.client.connection import ClientError
from deploy.drill.chart import Sampler
from deploy.drill.disaster import DisasterError, kill_brokers, link_proxies, set_link
from deploy.drill.report import DrillReport, Sample, Timeline, committed_text
from deploy.drill.verify import EndsProbe, committed_offsets, log_ends, outcome, read_logs, wait_copied
from deploy.drill.workload import GroupReader, ProducerLoad, TopicPartition
from deploy.launcher.control import read_state
from deploy.progress import Progress
from deploy.wan.client import WanApiError
from mirror.config import MirrorConfig
from mirror.promote import PromotionError

__all__ = ["DrillError", "DrillInterrupted", "DrillPlan", "caught_up", "pause", "run_drill", "stop_all_fast",
           "wait_until"]

Say = Callable[[str], None]
START_TIMEOUT_S = 60.0  # for a first acknowledgement or a first read, and for the group to catch up
PROGRESS_EVERY_S = 2.0


class DrillError(RuntimeError):
    """The drill could not go on; `report` holds its timeline up to the step that failed."""

    def __init__(self, message: str, report: DrillReport | None = None) -> None:
        super().__init__(message)
        self.report = report


# What a step can fail with when a cluster, the emulator or the launcher's state does not answer
# as the drill needs: the drill stops there (its clients stopped, a cut link put back) and says so.
STEP_FAILURES = (DrillError, DisasterError, PromotionError, ClientError, KafkaException, WanApiError, TimeoutError,
                 OSError)


class DrillInterrupted(KeyboardInterrupt):
    def __init__(self, report: DrillReport, undone: list[str]) -> None:
        super().__init__("interrupted")
        self.report, self.undone = report, undone


@dataclass(frozen=True)
class DrillPlan:
    kind: Literal["switchover", "failover", "failback"]
    disaster: Literal["kill", "partition", "planned"] | None  # None: a switchover (planned too)
    state_dir: Path
    mirror: str
    source: str  # the clusters' names in the topology
    target: str
    source_bootstrap: str
    target_bootstrap: str
    topics: list[str]
    partitions: list[TopicPartition]
    config: MirrorConfig | None
    rate: float
    duration_s: float
    # Each topic's name at the DR site (topics.dr_names): itself in link mode, mm2's remote topic.
    dr_topics: dict[str, str] = field(default_factory=dict)
    # How `--disaster kill` SIGKILLs a primary the launcher did not start (an Apache Kafka source
    # a test runs): the pids killed. None: the primary's brokers from the launcher's state file.
    kill_source: Callable[[], list[int]] | None = None
    # What `--disaster partition` cuts for such a primary: the Toxiproxy API (HOST:PORT) and the
    # proxies the mirror reaches the primary through. None: the link between the two clusters in
    # the launcher's state file.
    wan_link: tuple[str, tuple[str, ...]] | None = None

    @property
    def mode(self) -> str:
        return self.config.mode if self.config is not None else "link"

    def dr_name(self, topic: str) -> str:
        return self.dr_topics.get(topic, topic)

    def dr_partitions(self) -> list[TopicPartition]:
        return [(self.dr_name(t), p) for t, p in self.partitions]

    @property
    def planned(self) -> bool:
        """A planned switch-over: `drill switchover`, or `drill failover --disaster planned`."""
        return self.disaster in (None, "planned")


def pause(seconds: float, stop: threading.Event) -> None:
    """Sleep, or raise KeyboardInterrupt once `stop` is set (Ctrl-C or SIGTERM asked the drill to
    stop). The interruption is raised here, between steps of the drill's own code, never inside
    whatever the main thread happened to run when the signal came (a lock the clients' threads
    share, taken and never given back, would hang the stop)."""
    if stop.wait(seconds):
        raise KeyboardInterrupt


def wait_until(check: Callable[[], bool], what: str, stop: threading.Event, timeout_s: float = START_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise DrillError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        pause(0.05, stop)


def caught_up(reader: GroupReader, ends: dict[TopicPartition, int], progress: Progress | None = None) -> bool:
    positions = reader.positions()
    if progress is not None:
        progress.left(sum(max(0, end - positions.get(tp, 0)) for tp, end in ends.items() if end > 0))
    return all(positions.get(tp, 0) >= end for tp, end in ends.items() if end > 0)


def _promote(plan: DrillPlan, say: Say) -> str:
    import trio

    from mirror.promote import promote

    with Progress("  promote: copy catching up", say) as catching_up:
        report = trio.run(partial(promote, plan.target_bootstrap, source_bootstrap=plan.source_bootstrap,
                                  mirror=plan.mirror, failover=not plan.planned, timeout_s=60.0,
                                  say=lambda line: say(f"  promote: {line}"), on_behind=catching_up.left,
                                  config=plan.config))
    if not report.ok:
        why = "; ".join(f"{t}: {w}" for t, w in sorted(report.failed.items())) or "the copy did not catch up"
        raise DrillError(f"the promotion failed: {why}")
    return f"{len(report.promoted)} topic(s) promoted"


def run_drill(plan: DrillPlan, say: Say, stop: threading.Event | None = None) -> DrillReport:
    """Run the drill; `stop`, once set (the command's Ctrl-C and SIGTERM handlers set it), ends
    it at the next pause: its clients stopped, a cut link put back, DrillInterrupted raised."""
    stop = stop if stop is not None else threading.Event()
    run = f"drill-{secrets.token_hex(4)}"
    group = f"causeway-{run}"
    report = DrillReport(plan.kind, plan.disaster, plan.mirror, plan.topics, plan.rate, timeline=Timeline(), run=run,
                         mode=plan.mode)
    timeline = report.timeline
    clients: list[ProducerLoad | GroupReader] = []
    cut: list[str] = []
    api = ""
    primary_stop: threading.Thread | None = None
    live: dict[str, ProducerLoad | GroupReader] = {}  # the clients the chart's samples count
    promoted = threading.Event()  # after it, lag is no longer measured: the DR site is the primary
    ends_probe = EndsProbe(plan.target_bootstrap, plan.dr_partitions())
    sampler = Sampler(timeline.started, partial(_sample, plan, live, promoted, ends_probe))
    try:
        step = timeline.begin("workload at the primary")
        reader = GroupReader(plan.source_bootstrap, group, plan.topics, run).start()
        load = ProducerLoad(plan.source_bootstrap, plan.topics, plan.rate, run, "primary").start()
        clients += [reader, load]
        live.update(load=load, reader=reader)
        sampler.start()
        wait_until(lambda: load.ledger.first_ack is not None, "the first record acknowledged at the primary", stop)
        # The workload's progress: records acknowledged of those its rate and duration ask for.
        with Progress("  acknowledged at the primary", say, total=round(plan.rate * plan.duration_s),
                      every_s=PROGRESS_EVERY_S) as workload:
            while time.monotonic() - timeline.started - step.start_s < plan.duration_s:
                pause(0.1, stop)
                workload.update(load.ledger.count(), bytes_done=load.ledger.acked_bytes())
        timeline.end(step, f"group {group}; {load.ledger.count()} acknowledged")
        say(f"workload at the primary for {plan.duration_s:g} s: {load.ledger.count()} acknowledged")

        if plan.planned:
            step = timeline.begin("producers stopped")
            disaster_at = time.monotonic()
            load.stop(grace_s=10.0)
            clients.remove(load)
            timeline.end(step, f"{load.ledger.count()} acknowledged, {load.ledger.failed} failed")
            step = timeline.begin("group caught up at the primary")
            with Progress(f"  group {group} catching up", say, every_s=PROGRESS_EVERY_S) as catching_up:
                wait_until(lambda: caught_up(reader, load.ledger.ends(), catching_up),
                      f"group {group} to read every record", stop)
            reader.stop(commit=True)
            clients.remove(reader)
            timeline.end(step, f"read {len(reader.names)}, committed")
            say(f"{step.name}: {step.detail}")
            if plan.mode == "mm2":
                # An mm2 promotion does not wait for the copy (its offsets are not the source's to
                # compare): the drill waits, as an operator would, until the remote topics hold
                # every acknowledged record.
                step = timeline.begin("copy caught up at the DR site")
                copied = wait_copied(plan.target_bootstrap, plan.dr_partitions(), load.ledger.names(), run,
                                     timeout_s=START_TIMEOUT_S, stop=stop)
                timeline.end(step, f"{copied} record(s) of the primary in {', '.join(plan.dr_topics.values())}")
                say(f"{step.name}: {step.detail}")
        else:
            step = timeline.begin(f"disaster: {plan.disaster}")
            disaster_at = time.monotonic()
            if plan.disaster == "kill":
                pids = plan.kill_source() if plan.kill_source is not None else kill_brokers(plan.state_dir,
                                                                                             plan.source)
                timeline.end(step, f"SIGKILL to {plan.source}'s brokers (pids {', '.join(map(str, pids))})")
            else:
                api, proxies = _wan_link(plan)
                set_link(api, proxies, enabled=False)
                cut = proxies
                timeline.end(step, f"WAN link cut (proxies {', '.join(proxies)})")
            say(timeline.steps[-1].name + ": " + timeline.steps[-1].detail)
            # The applications at the primary stop as they notice (acknowledgements in flight
            # get 2 s); the failover does not wait for them: it is what an operator starts now.
            stopping = timeline.begin("primary clients stopping")
            clients.clear()
            primary_stop = threading.Thread(target=_stop_primary, args=(load, reader), daemon=True)
            primary_stop.start()
        step = timeline.begin("promote" + ("" if plan.planned else " --failover"))
        timeline.end(step, _promote(plan, say))
        say(f"{step.name}: {step.detail}")
        promoted_ends = log_ends(plan.target_bootstrap, plan.dr_partitions())
        promoted.set()
        # The re-reads' baseline: what the DR site holds for the group before it moves there (the
        # mirror's last copy of its offsets, or the promotion's), from one OffsetFetch.
        step = timeline.begin("group offsets at the DR site")
        committed = committed_offsets(plan.target_bootstrap, group, plan.dr_partitions())
        timeline.end(step, "committed, of the log end: " + committed_text(committed, promoted_ends))
        say(f"{step.name}: {step.detail}")

        step = timeline.begin("producers and group moved to the DR site")
        # In mm2 mode the group reads the copies (the remote topics, from its translated offsets)
        # and the local topics the DR site's producers now write.
        dr_reader = GroupReader(plan.target_bootstrap, group, sorted({*plan.topics, *plan.dr_topics.values()}),
                                run).start()
        dr_load = ProducerLoad(plan.target_bootstrap, plan.topics, plan.rate, run, "dr").start()
        clients += [dr_reader, dr_load]
        live.update(dr_load=dr_load, dr_reader=dr_reader)
        wait_until(lambda: dr_load.ledger.first_ack is not None, "the first record acknowledged at the DR site", stop)
        report.rto_produce_s = (dr_load.ledger.first_ack or 0) - disaster_at
        say(f"first record acknowledged at the DR site, {report.rto_produce_s:.2f} s after the "
            f"{'producers stopped' if plan.planned else 'disaster'}")
        wait_until(lambda: dr_reader.first_read is not None, f"group {group}'s first record at the DR site", stop)
        report.rto_consume_s = (dr_reader.first_read or 0) - disaster_at
        say(f"group {group} read its first record at the DR site, {report.rto_consume_s:.2f} s after")
        since = "the producers stopped" if plan.planned else "the disaster"
        timeline.end(step, f"first produce {report.rto_produce_s:.2f} s, first consume {report.rto_consume_s:.2f} s "
                           f"after {since}")

        step = timeline.begin("group caught up at the DR site")
        dr_load.stop(grace_s=10.0)
        clients.remove(dr_load)
        expected = dict(promoted_ends)
        for tp, end in dr_load.ledger.ends().items():
            expected[tp] = max(expected.get(tp, 0), end)
        with Progress(f"  group {group} catching up at the DR site", say, every_s=PROGRESS_EVERY_S) as catching_up:
            wait_until(lambda: caught_up(dr_reader, expected, catching_up),
                  f"group {group} to read every record at the DR site", stop)
        dr_reader.stop(commit=True)
        clients.remove(dr_reader)
        timeline.end(step, f"{dr_load.ledger.count()} produced there, the group read {len(dr_reader.names)}")

        if primary_stop is not None:
            primary_stop.join()
            timeline.end(stopping, f"{load.ledger.count()} acknowledged at the primary, "
                                   f"{load.ledger.failed} failed or dropped")
        step = timeline.begin("records counted at the DR site")
        copy = read_logs(plan.target_bootstrap, promoted_ends)
        report.outcome = outcome(load.ledger.acked, copy, dr_load.ledger.names(), reader.names, dr_reader.names, run,
                                 committed=committed, log_end=promoted_ends, read_dr_at=dr_reader.read)
        # What a failback drill goes on from: the primary's acknowledgements (its RPO is checked
        # against the quarantine) and every record the group read so far (at the DR site by
        # offset too, for checks against the offsets it resumed from).
        report.acked_primary = {tp: dict(records) for tp, records in load.ledger.acked.items()}
        report.read_names = [*reader.names, *dr_reader.names]
        report.read_at_dr = {tp: dict(records) for tp, records in dr_reader.read.items()}
        timeline.end(step, f"{sum(len(r) for r in copy.values())} record(s) below the ends at the promotion")
        sampler.stop()
        report.samples = list(sampler.samples)
    except STEP_FAILURES as exc:
        raise DrillError(f"{timeline.under_way()}: {exc}", report) from exc
    except KeyboardInterrupt:
        stop_all_fast(clients)
        undone = _restore(api, cut, report)
        raise DrillInterrupted(report, undone) from None
    finally:
        sampler.stop()
        report.samples = report.samples or list(sampler.samples)
        ends_probe.close()
        stop_all_fast(clients)
        if cut:
            _restore(api, cut, report)
    return report


def _wan_link(plan: DrillPlan) -> tuple[str, list[str]]:
    """The emulator's API and the proxies a partition cuts: the plan's, or the launcher's link
    between the primary and the DR site."""
    if plan.wan_link is not None:
        return plan.wan_link[0], list(plan.wan_link[1])
    state = read_state(plan.state_dir)
    if state is None:
        raise DrillError(f"{plan.state_dir}: the topology is not running")
    return state.wan.api, link_proxies(state, plan.source, plan.target)


def _sample(plan: DrillPlan, live: dict[str, ProducerLoad | GroupReader], promoted: threading.Event,
            ends: EndsProbe, at_s: float) -> Sample:
    """What the drill's clients had done by now, and (until the promotion) how many records the
    primary acknowledged that the DR site's logs lack: per partition in link mode (the same
    offsets), over all partitions in mm2 mode (the remote topics' offsets are their own)."""
    counts = {key: (c.ledger.count() if isinstance(c, ProducerLoad) else c.read_count()) for key, c in live.items()}
    lag = None
    load = live.get("load")
    if not promoted.is_set() and isinstance(load, ProducerLoad):
        acked = load.ledger.ends()
        held = ends.ends()
        if plan.mode == "link":
            lag = sum(max(0, end - held.get(tp, end)) for tp, end in acked.items())
        else:
            lag = max(0, sum(acked.values()) - sum(held.values()))
    return Sample(at_s, counts.get("load", 0), counts.get("dr_load", 0),
                  counts.get("reader", 0) + counts.get("dr_reader", 0), lag)


def _stop_primary(load: ProducerLoad, reader: GroupReader) -> None:
    load.stop(grace_s=2.0)
    reader.stop(commit=True, timeout_s=5.0)


def stop_fast(client: ProducerLoad | GroupReader) -> None:
    if isinstance(client, ProducerLoad):
        client.stop(grace_s=0)
    else:
        client.stop(commit=False, timeout_s=2.0)


def stop_all_fast(clients: list[ProducerLoad | GroupReader]) -> None:
    """Stop every client still running, without waiting for their in-flight work, and forget them."""
    for client in clients:
        stop_fast(client)
    clients.clear()


def _restore(api: str, cut: list[str], report: DrillReport) -> list[str]:
    """Put a cut link back (once): what was done, for the report."""
    if not cut:
        return []
    step = report.timeline.begin("WAN link restored")
    set_link(api, cut, enabled=True)
    report.timeline.end(step, f"proxies {', '.join(cut)} enabled again")
    done = [f"the WAN link was put back (proxies {', '.join(cut)})"]
    cut.clear()
    return done
