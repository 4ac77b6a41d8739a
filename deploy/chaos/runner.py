"""One chaos scenario, end to end, with real processes; and a matrix of them.

A scenario starts a rig with the launcher (`chaos_plan`, as `causeway up` would run it): the WAN
emulator, a source broker with a LOCAL listener and a WAN listener that advertises the link
proxy's address, a target broker, and a mirror that reaches the source only through the proxy,
so faults on the proxy hit its fetches. Then it produces numbered records to the source (locally,
as the source datacenter's applications do) while a seeded schedule of faults runs, heals, waits (bounded, polling the
target's end offsets and last records) until the mirror has caught up, reads both sides whole
and checks them (`deploy.chaos.checker`).

Duplicates are allowed only in a scenario that crashed the mirror, and only as replays that start
right after the position checkpoint the restarted mirror resumed from (read from
`mm2-offsets.<source>.internal` while the mirror was down). Everything else the checker counts
fails the scenario, as do a producer that gave up and a process that died on its own.

An exactly-once scenario runs the mirror with `exactly.once.support: required` and reads the
target as a read_committed consumer does (`read_topic_committed`): there a mirror crash may
abort a transaction but never duplicate or lose a record, so any duplicate fails it.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import trio

from broker.client import Client, ConnectionFailed, KafkaError, admin, init_idempotent_producer, open_client
from broker.protocol.errors import ErrorCode
from broker.protocol.records import DecodedRecord
from deploy.chaos.checker import Report, check
from deploy.chaos.faults import API_TIMEOUT_S, LINK_FAULTS, Applied, Step, make_schedule, run_schedule
from deploy.chaos.matrix import failure_kept, table
from deploy.chaos.payload import read_payload
from deploy.chaos.workload import (
    ProducerStats,
    Workload,
    end_offsets,
    last_records,
    produce_sequenced,
    read_partition,
    read_topic,
    read_topic_committed,
)
from deploy.launcher.launch import LaunchState, run_plan
from deploy.launcher.plan import ClusterPlan, LaunchPlan, LinkPlan, MirrorPlan
from deploy.supervisor import Supervised, hold, release
from deploy.wan.client import WanClient, WanProxy

__all__ = ["MATRIX", "PROFILE", "Rig", "Scenario", "ScenarioResult", "chaos_plan", "format_table", "run_scenario"]

log = logging.getLogger(__name__)

SOURCE_ALIAS = "east"
TARGET_ALIAS = "west"
TOPIC = "orders"
REMOTE_TOPIC = f"{SOURCE_ALIAS}.{TOPIC}"
POSITIONS_TOPIC = f"mm2-offsets.{SOURCE_ALIAS}.internal"


@dataclass(frozen=True)
class Scenario:
    """What one scenario does: `steps` faults drawn from `faults` while `records` records are
    produced over `partitions` partitions at `rate` records/s; the link has `link_latency_ms`
    of latency each way throughout; the mirror checkpoints every `flush_interval_ms`, and with
    `exactly_once` copies in transactions and is read back read_committed."""

    name: str
    faults: tuple[str, ...]
    steps: int
    records: int = 3000
    partitions: int = 3
    rate: float = 300.0
    link_latency_ms: int = 10
    flush_interval_ms: int = 500
    exactly_once: bool = False
    catch_up_timeout_s: float = 120.0
    deadline_s: float = 600.0  # the whole scenario, start to stop

    @property
    def window_s(self) -> float:
        return self.records / self.rate

    @property
    def crashes_mirror(self) -> bool:
        return "mirror-kill" in self.faults


# The short seeded profile of `make test` (tests/chaos): every link fault once, two mirror
# crashes, a restart of each broker; a few thousand records in under a minute of faults.
PROFILE: tuple[Scenario, ...] = (
    Scenario("profile-link", LINK_FAULTS, steps=len(LINK_FAULTS), records=3600),
    Scenario("profile-mirror-kill", ("mirror-kill",), steps=2, records=2400),
    Scenario("profile-mirror-kill-exactly-once", ("mirror-kill",), steps=2, records=2400, exactly_once=True),
    Scenario("profile-restarts", ("source-restart", "target-restart"), steps=2, records=2400),
)

# `make chaos`: each fault alone, repeated, then mixtures; more records, a 20 ms link.
MATRIX: tuple[Scenario, ...] = (
    *(Scenario(f, (f,), steps=3, records=9000, rate=600, link_latency_ms=20) for f in LINK_FAULTS),
    Scenario("mirror-kill", ("mirror-kill",), steps=3, records=9000, rate=600, link_latency_ms=20),
    Scenario("mirror-kill-exactly-once", ("mirror-kill",), steps=3, records=9000, rate=600, link_latency_ms=20,
             exactly_once=True),
    Scenario("source-restart", ("source-restart",), steps=2, records=9000, rate=600, link_latency_ms=20),
    Scenario("target-restart", ("target-restart",), steps=2, records=9000, rate=600, link_latency_ms=20),
    Scenario("source-kill", ("source-kill",), steps=2, records=9000, rate=600, link_latency_ms=20),
    Scenario("target-kill", ("target-kill",), steps=2, records=9000, rate=600, link_latency_ms=20),
    Scenario("mixed-link", LINK_FAULTS, steps=10, records=15000, rate=600, link_latency_ms=20),
    Scenario("mixed-all", (*LINK_FAULTS, "mirror-kill", "source-restart", "target-restart"), steps=12,
             records=18000, rate=600, link_latency_ms=20),
)


MIRROR = "chaos"
LINK = f"{SOURCE_ALIAS}-to-{TARGET_ALIAS}"  # the launcher's proxy for the source's WAN listener
START_TIMEOUT_S = 120.0  # a process fault's restart, retried with the supervisor's backoff


def chaos_plan(scenario: Scenario) -> LaunchPlan:
    """The rig as a launch plan: the source cluster in one datacenter, the target in the other,
    the link between them, and the mirror in the target's datacenter reading the source through
    the link (the launcher gives the source a WAN listener advertising the link proxy)."""
    return LaunchPlan(
        name="chaos",
        clusters=(
            ClusterPlan(SOURCE_ALIAS, SOURCE_ALIAS, topics={TOPIC: scenario.partitions},
                        remote_datacenters=(TARGET_ALIAS,)),
            ClusterPlan(TARGET_ALIAS, TARGET_ALIAS),
        ),
        links=(LinkPlan(SOURCE_ALIAS, TARGET_ALIAS, latency_ms=scenario.link_latency_ms),),
        mirrors=(MirrorPlan(MIRROR, SOURCE_ALIAS, TARGET_ALIAS, {
            "topics": {"include": [re.escape(TOPIC)]},
            "refresh.topics.interval.seconds": 0.5,
            "offset.flush.interval.ms": scenario.flush_interval_ms,
            "emit.heartbeats.interval.seconds": 1,
            **({"exactly.once.support": "required"} if scenario.exactly_once else {}),
        }),),
    )


@dataclass
class Rig:
    """The processes of one scenario and the link between the datacenters: `chaos_plan` run by
    the launcher (deploy.launcher.launch.run_plan) in `work_dir`. Process faults stop a child
    through the supervisor's `hold` and start it through `release`, so the supervisor never
    undoes a fault by restarting the child behind the rig's back; any other restart is a
    process that died on its own (`unexpected_restarts`)."""

    scenario: Scenario
    work_dir: Path
    nursery: trio.Nursery
    launched: LaunchState | None = None
    # Per mirror crash, per partition: the source offset the restarted mirror resumes from.
    resume_points: list[dict[int, int]] = field(default_factory=list)
    _crashed: bool = False
    _scope: trio.CancelScope | None = None
    _stopped: trio.Event = field(default_factory=trio.Event)

    @property
    def state(self) -> LaunchState:
        assert self.launched is not None, "the rig is not up"
        return self.launched

    @property
    def link(self) -> WanProxy:
        return WanClient(self.state.wan_api, timeout_s=API_TIMEOUT_S).proxy(LINK)

    @property
    def source_local(self) -> str:
        return self.state.clusters[SOURCE_ALIAS].bootstrap

    @property
    def source_via_link(self) -> str:
        return self.state.clusters[SOURCE_ALIAS].wan[TARGET_ALIAS]

    @property
    def target_local(self) -> str:
        return self.state.clusters[TARGET_ALIAS].bootstrap

    def processes(self) -> dict[str, Supervised]:
        state = self.state
        out = {"source": state.clusters[SOURCE_ALIAS].broker, "target": state.clusters[TARGET_ALIAS].broker,
               "mirror": state.mirrors[MIRROR].process}
        if state.wan is not None:
            out["wan"] = state.wan
        return out

    async def up(self) -> None:
        """Start everything (the launcher's order). Raises StartFailed naming what did not start."""
        self.launched = await self.nursery.start(self._launch)

    async def _launch(self, *, task_status: trio.TaskStatus[LaunchState]) -> None:
        try:
            with trio.CancelScope() as self._scope:
                await run_plan(chaos_plan(self.scenario), self.work_dir, task_status=task_status)
        finally:
            self._stopped.set()

    async def down(self) -> None:
        """Stop everything and wait until it has stopped; safe whatever state the rig is in."""
        if self._scope is not None:
            self._scope.cancel()
            with trio.CancelScope(shield=True):
                await self._stopped.wait()

    # -- what faults act on (deploy.chaos.faults.FaultTarget) ------------------------------------

    async def crash_mirror(self) -> None:
        await hold(self.processes()["mirror"], hard=True)
        self._crashed = True

    async def start_mirror(self) -> None:
        if self._crashed:
            # The mirror is down, so its positions cannot move: the restart resumes from these.
            self.resume_points.append(await self.stored_positions())
            self._crashed = False
        with trio.fail_after(START_TIMEOUT_S):
            await release(self.processes()["mirror"])

    async def stop_broker(self, side: str, *, hard: bool) -> None:
        await hold(self.processes()[side], hard=hard)

    async def start_broker(self, side: str) -> None:
        with trio.fail_after(START_TIMEOUT_S):
            await release(self.processes()[side])

    async def stored_positions(self) -> dict[int, int]:
        """Where a mirror starting now resumes, per partition: just after its checkpointed
        position in `mm2-offsets.<source>.internal` (Kafka Connect's JSON offset records), or at
        the source's log start (0 here) when it has none."""
        async with open_client(self.target_local, client_id="chaos-positions", request_timeout_s=10) as client:
            with trio.fail_after(10):  # not the whole scenario's deadline: a dead target says so soon
                described = await admin.describe_topics(client, [POSITIONS_TOPIC])
            records = []
            if POSITIONS_TOPIC in described:
                for p in range(described[POSITIONS_TOPIC].partition_count):
                    with trio.fail_after(30):
                        records += await read_partition(client, POSITIONS_TOPIC, p)
        stored: dict[int, int] = {}
        for r in records:
            position = decode_position(r.key, r.value)
            if position is not None:
                stored[position[0]] = position[1]
        return {p: stored[p] + 1 if p in stored else 0 for p in range(self.scenario.partitions)}

    def unexpected_restarts(self) -> dict[str, int]:
        if self.launched is None:
            return {}
        return {name: p.restarts for name, p in self.processes().items() if p.restarts}


def decode_position(key: bytes | None, value: bytes | None) -> tuple[int, int] | None:
    """(partition, last mirrored offset) of one of our topic's position records, else None."""
    try:
        connector, where = json.loads(key or b"")
        offset = json.loads(value)["offset"] if value is not None else None
    except (ValueError, TypeError, KeyError):
        return None
    if not isinstance(where, dict) or where.get("cluster") != SOURCE_ALIAS or where.get("topic") != TOPIC:
        return None
    partition = where.get("partition")
    if not isinstance(partition, int) or not isinstance(offset, int):
        return None
    return partition, offset


@dataclass
class ScenarioResult:
    scenario: Scenario
    seed: int
    schedule: list[Step]
    applied: list[Applied] = field(default_factory=list)
    producer: ProducerStats = field(default_factory=ProducerStats)
    report: Report | None = None
    catch_up_s: float | None = None
    mirror_crashes: int = 0
    unexpected_restarts: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    work_dir: Path | None = None

    def failures(self) -> list[str]:
        """Why the scenario fails; empty when it passes."""
        out = []
        if self.error is not None:
            out.append(f"error: {self.error}")
        if self.producer.failed:
            out.append(f"producer gave up: {self.producer.failed}")
        if self.unexpected_restarts:
            out.append(f"processes died on their own and were restarted: {self.unexpected_restarts}")
        if self.report is None:
            if self.error is None:
                out.append("no report")
            return out
        for category in ("lost", "tail", "reordered", "corrupted", "unexpected", "source_anomalies"):
            if self.report.total(category):
                out.append(f"{self.report.total(category)} {category}")
        if self.report.total("duplicated") and self.scenario.exactly_once:
            out.append(f"{self.report.total('duplicated')} duplicated by an exactly-once mirror")
        elif self.report.total("duplicated") and not self.mirror_crashes:
            out.append(f"{self.report.total('duplicated')} duplicated without a mirror crash")
        elif self.report.total("unexplained_duplicates"):
            out.append(f"{self.report.total('unexplained_duplicates')} duplicated outside a replay from a checkpoint")
        replays = {p: r.duplicate_runs for p, r in self.report.partitions.items()
                   if r.duplicate_runs > self.mirror_crashes}
        if replays and self.mirror_crashes:
            out.append(f"more replays than mirror crashes ({self.mirror_crashes}) in partitions {replays}")
        if self.catch_up_s is None:
            out.append(f"the mirror did not catch up within {self.scenario.catch_up_timeout_s:.0f}s")
        return out

    @property
    def passed(self) -> bool:
        return not self.failures()

    def describe(self) -> str:
        """The schedule, the figures, and on failure the reasons and the checker's examples."""
        lines = [f"scenario {self.scenario.name} (seed {self.seed}): {'pass' if self.passed else 'FAIL'}"]
        lines += [f"  fault {a.step.describe()}" + (f" [error {a.error}]" if a.error else "") for a in self.applied]
        lines.append(f"  produced {self.producer.acked_count} acknowledged records "
                     f"({self.producer.attempts} sends, {self.producer.retries} retried); "
                     f"mirror crashes {self.mirror_crashes}; catch-up "
                     + (f"{self.catch_up_s:.1f}s" if self.catch_up_s is not None else "timed out"))
        if self.report is not None:
            explained = (self.mirror_crashes and not self.scenario.exactly_once
                         and not self.report.total("unexplained_duplicates"))
            summary = self.report.summary(skip=("duplicated",) if explained else ())
            lines += ["  " + line for line in summary.splitlines()]
        lines += [f"  FAILED: {f}" for f in self.failures()]
        if self.work_dir is not None and not self.passed:
            lines.append(f"  logs: {self.work_dir / 'logs'}")
        return "\n".join(lines)


async def run_scenario(scenario: Scenario, *, seed: int, work_dir: Path) -> ScenarioResult:
    """Run one scenario in `work_dir` (data, logs, the mirror's config); never raises for what
    goes wrong inside it: the result says (`error`, `failures()`). Every process it started
    has stopped when it returns."""
    schedule = make_schedule(seed, scenario.faults, scenario.steps, scenario.window_s)
    result = ScenarioResult(scenario, seed, schedule, work_dir=work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - once, before anything starts
    with failure_kept(result, scenario.name, log):
        with trio.fail_after(scenario.deadline_s):
            async with trio.open_nursery() as nursery:
                rig = Rig(scenario, work_dir, nursery)
                try:
                    await rig.up()
                    await _exercise(rig, result)
                finally:
                    with trio.CancelScope(shield=True), trio.move_on_after(120):
                        await rig.down()
                    result.unexpected_restarts = rig.unexpected_restarts()
                    nursery.cancel_scope.cancel()
    return result


async def _exercise(rig: Rig, result: ScenarioResult) -> None:
    scenario = rig.scenario
    run = f"{scenario.name}-{result.seed}"
    workload = Workload(TOPIC, scenario.partitions, scenario.records, scenario.rate, run)
    async with open_client(rig.source_local, client_id="chaos-producer", request_timeout_s=10) as source:
        with trio.fail_after(30):
            producer = await init_idempotent_producer(source)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(produce_sequenced, producer, workload, result.producer)
            nursery.start_soon(run_schedule, result.schedule, rig, result.applied)
        result.mirror_crashes = len(rig.resume_points)
        healed = trio.current_time()
        caught_up = await _wait_caught_up(rig, source, scenario)
        result.catch_up_s = None if caught_up is None else caught_up - healed
        source_records = await read_topic(source, TOPIC, scenario.partitions)
    async with open_client(rig.target_local, client_id="chaos-reader", request_timeout_s=10) as target:
        target_records = await _read_target(target, rig)
    # Where a replay may start: after a crash, the resume point of each partition.
    replay_starts: dict[int, set[int]] = {p: set() for p in range(scenario.partitions)}
    for points in rig.resume_points:
        for p, offset in points.items():
            replay_starts[p].add(offset)
    result.report = check(source_records, target_records, acked=result.producer.acked, run=run,
                          replay_starts=replay_starts)


async def _read_target(target: Client, rig: Rig) -> dict[int, list[DecodedRecord]]:
    """The remote topic whole: raw, or as a read_committed consumer sees it (exactly-once)."""
    if rig.scenario.exactly_once:
        return await read_topic_committed(target, rig.target_local, REMOTE_TOPIC, rig.scenario.partitions)
    return await read_topic(target, REMOTE_TOPIC, rig.scenario.partitions)


async def _wait_caught_up(rig: Rig, source: Client, scenario: Scenario) -> float | None:
    """Poll the target until every partition of the remote topic ends with the source's last
    record (its end offset at least the source's, its last record the same one); returns when
    that happened (trio time), or None after `catch_up_timeout_s`. Order is kept by a correct
    mirror, so the last record arriving means the mirror has reached the source's end."""
    with trio.fail_after(30):
        source_ends = await end_offsets(source, TOPIC, scenario.partitions)
    with trio.fail_after(30):
        source_last = await last_records(source, TOPIC, source_ends)

    def identity(record: DecodedRecord | None) -> tuple[str, int, int] | None:
        if record is None:
            return None
        p = read_payload(record.key, record.value, record.headers, record.timestamp)
        return None if p is None else (p.run, p.partition, p.seq)

    wanted = {p: identity(r) for p, r in source_last.items()}
    async with open_client(rig.target_local, client_id="chaos-catch-up", request_timeout_s=5) as target:
        with trio.move_on_after(scenario.catch_up_timeout_s):
            while True:
                try:
                    with trio.fail_after(5):
                        ends = await end_offsets(target, REMOTE_TOPIC, scenario.partitions)
                    if all(ends[p] >= source_ends[p] for p in source_ends):
                        last = await _last_target_records(target, rig, ends)
                        if all(identity(last[p]) == wanted[p] for p in wanted):
                            return trio.current_time()
                except (KafkaError, ConnectionFailed) as exc:  # e.g. the remote topic not made yet
                    if not (isinstance(exc, KafkaError) and exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
                        log.debug("catch-up poll: %s", exc)
                await trio.sleep(0.2)
    return None


async def _last_target_records(target: Client, rig: Rig, ends: dict[int, int]) -> dict[int, DecodedRecord | None]:
    """Each partition's last record below `ends`; exactly-once, the last committed one (the log
    ends with a transaction marker, so it is read back read_committed, whole)."""
    if not rig.scenario.exactly_once:
        with trio.fail_after(5):
            return await last_records(target, REMOTE_TOPIC, ends)
    committed = await _read_target(target, rig)
    return {p: records[-1] if records else None for p, records in committed.items()}


def format_table(results: Sequence[ScenarioResult]) -> str:
    """One line per scenario: what `python -m deploy.chaos` prints."""
    header = ("scenario", "seed", "faults", "records", "lost", "dup", "reordered", "corrupted", "unexpected",
              "catch-up", "verdict")
    rows = []
    for r in results:
        rep = r.report

        def n(category: str, rep: Report | None = rep) -> str:
            return "-" if rep is None else str(rep.total(category))

        lost = "-" if rep is None else str(rep.total("lost") + rep.total("tail"))
        rows.append((
            r.scenario.name, str(r.seed), str(len(r.applied)), "-" if rep is None else str(rep.source_records),
            lost, n("duplicated"), n("reordered"), n("corrupted"), n("unexpected"),
            "-" if r.catch_up_s is None else f"{r.catch_up_s:.1f}s", "pass" if r.passed else "FAIL",
        ))
    return table(header, rows)

