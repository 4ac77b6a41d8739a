"""The hostile-bytes profile: forged requests and znodes beside a real link mirror and a real
3-broker cluster under an idempotent acks=all load.

A bug in the mirror or the controller can send the same bytes an attacker can, so each scenario
runs, through the launcher (deploy.launcher.launch.run_plan), a source cluster of three brokers
on its own ZooKeeper (a topic with replication factor 3 and min.insync.replicas=2), a standalone
target in another datacenter, the WAN link between them and a `causeway mirror` in link mode
copying the topic to a mirror topic at the target. librdkafka's idempotent acks=all producer
writes numbered records at the source (deploy.chaos.replication.produce) while attackers run:

    link          LinkAppend to the target's mirror topic as the mirror's name: a batch far past
                  the log end, at base offset 2**62, a log start of 2**63-1 or past the log end,
                  a claimed gap the source does not have, version 0 (which cannot say where the
                  previous batch ended), appends to a source topic that is no mirror topic; all
                  must be refused. Then one forged batch exactly at the copy's log end, which no
                  broker can tell from the mirror's own: the mirror must see the target ahead of
                  what it sent and report the partition FAILED, never skip its own batches.
    inter-broker  LeaderAndIsr, UpdateMetadata and StopReplica to every source broker with a stale
                  or future controller epoch, another controller id, a stale broker epoch: all
                  must be refused (the controller's real requests carry ZooKeeper's values).
    znode         ZooKeeper writes anyone with access can make: deleting __consumer_offsets
                  through /admin/delete_topics (refused, the request removed), garbage and
                  oversized /config/changes notifications, garbage reassignments, preferred
                  elections, ISR change and log dir event notifications.

Then the verdict: every acknowledged record is read back from the source at the offset it was
acknowledged at, none duplicated or reordered (deploy.chaos.checker); no process restarted; every
forged request the brokers must refuse was refused; and each partition of the mirror topic either
holds exactly the source's records at the source's offsets or is reported FAILED in the mirror's
status file, FAILED only where a forged batch really was accepted.

`python -m deploy.chaos --matrix hostile` runs MATRIX (`make chaos` too);
tests/chaos/test_hostile_profile.py runs PROFILE in `make test`.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import trio
from kazoo.client import KazooClient  # type: ignore[import-untyped]
from kazoo.exceptions import KazooException, NodeExistsError  # type: ignore[import-untyped]

from broker.client import Client, ConnectionFailed, KafkaError, TopicPartition, admin, open_client
from broker.client.admin import LATEST
from broker.client.link import MIRROR_NAME_CONFIG, link_append
from broker.protocol.errors import ErrorCode
from broker.protocol.messages import (
    LeaderAndIsrRequest,
    LinkAppendRequest,
    StopReplicaRequest,
    UpdateMetadataRequest,
)
from broker.protocol.records import DecodedRecord, Record, build_batch
from deploy.chaos.checker import Report
from deploy.chaos.matrix import failure_kept, table
from deploy.chaos.replication import PARTITIONS, TOPIC, ProduceLog, Seen, check_acknowledged, produce
from deploy.chaos.workload import read_topic
from deploy.kafka_socket import ask
from deploy.launcher.launch import LaunchState, run_plan
from deploy.launcher.plan import ClusterPlan, LaunchPlan, LinkPlan, MirrorPlan, TopicPlan
from mirror.status import MirrorStatus, StatusFileError, read_status

__all__ = ["ATTACKERS", "MATRIX", "PROFILE", "HostileResult", "HostileScenario", "format_table", "hostile_plan",
           "run_scenario"]

log = logging.getLogger(__name__)

SOURCE, TARGET = "east", "west"
MIRROR = "hostile"
ATTACKERS = ("link", "inter-broker", "znode")
BROKER_CONFIGS = {
    "zookeeper.session.timeout.ms": "6000",
    "replica.lag.time.max.ms": "3000",
    "offsets.topic.num.partitions": "3",
}
FORGED_PARTITION = 0  # the one partition the link attacker writes a forged batch into
FORGED_RECORDS = 3
FORGE_ATTEMPTS = 20
OVERSIZED_ZNODES = 5  # 1 MB notifications: each broker reads each one
WARMUP_TIMEOUT_S = 120.0
CATCH_UP_TIMEOUT_S = 120.0
REQUEST_TIMEOUT_S = 15.0
INT63 = 2**63 - 1


@dataclass(frozen=True)
class HostileScenario:
    """`attacks` forged requests or znodes from each attacker, paced over the load; `records`
    numbered records at `rate` a second; `forge` writes one forged batch at the copy's log end."""

    name: str
    attackers: tuple[str, ...] = ATTACKERS
    attacks: int = 60
    records: int = 1800
    rate: float = 300.0
    forge: bool = True
    deadline_s: float = 600.0

    def __post_init__(self) -> None:
        if not self.attackers or set(self.attackers) - set(ATTACKERS):
            raise ValueError(f"bad scenario {self}: attackers are {ATTACKERS}")


# `make test`: every attacker at once, briefly. `make chaos`: each alone, then all of them longer.
PROFILE: tuple[HostileScenario, ...] = (HostileScenario("profile-hostile", attacks=30, records=1500),)
MATRIX: tuple[HostileScenario, ...] = (
    HostileScenario("hostile-link", ("link",), attacks=200, records=6000),
    HostileScenario("hostile-inter-broker", ("inter-broker",), attacks=300, records=6000, forge=False),
    HostileScenario("hostile-znode", ("znode",), attacks=150, records=6000, forge=False),
    HostileScenario("hostile-all", attacks=300, records=12000),
)


def hostile_plan() -> LaunchPlan:
    """The rig: the source cluster and its topic, the target, the link, the link-mode mirror."""
    topic = TopicPlan(PARTITIONS, 3, {"min.insync.replicas": "2"})
    return LaunchPlan(
        name="hostile",
        clusters=(
            ClusterPlan(SOURCE, SOURCE, topics={TOPIC: topic}, broker_configs=dict(BROKER_CONFIGS),
                        remote_datacenters=(TARGET,), coordination="zookeeper", brokers=3),
            ClusterPlan(TARGET, TARGET),
        ),
        links=(LinkPlan(SOURCE, TARGET),),
        mirrors=(MirrorPlan(MIRROR, SOURCE, TARGET, {
            "mode": "link",
            "topics": {"include": [TOPIC]},
            "refresh.topics.interval.seconds": 0.5,
        }),),
    )


# -- what happened ---------------------------------------------------------------------------------


@dataclass
class Tally:
    """What one attacker sent and how the cluster answered: kind -> answers, and what it must
    never have had accepted."""

    sent: Counter[str] = field(default_factory=Counter)
    accepted: list[str] = field(default_factory=list)  # forged requests a broker took: each a failure
    notes: list[str] = field(default_factory=list)

    def refused(self, kind: str, answer: object) -> None:
        self.sent[kind] += 1
        log.debug("%s: %s", kind, answer)

    def took(self, kind: str, detail: str) -> None:
        self.sent[kind] += 1
        self.accepted.append(f"{kind}: {detail}")


@dataclass
class HostileResult:
    scenario: HostileScenario
    seed: int
    plog: ProduceLog = field(default_factory=ProduceLog)
    tallies: dict[str, Tally] = field(default_factory=dict)
    report: Report | None = None
    consumed: int = 0
    moved: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    forged: set[int] = field(default_factory=set)  # partitions where a forged batch was accepted
    failed: dict[int, str] = field(default_factory=dict)  # partitions the mirror reports FAILED: why
    copied: set[int] = field(default_factory=set)  # partitions whose copy equals the source's
    restarts: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    work_dir: Path | None = None

    @property
    def lost(self) -> int:
        return 0 if self.report is None else self.report.total("lost") + self.report.total("tail")

    def failures(self) -> list[str]:
        out = [f"error: {self.error}"] if self.error else []
        out += self.problems
        if self.plog.fatal:
            out.append(f"producer fatal error: {self.plog.fatal}")
        if self.plog.failed:
            out.append(f"{len(self.plog.failed)} deliveries failed, e.g. {sorted(self.plog.failed.items())[:3]}")
        if self.plog.unacknowledged:
            out.append(f"{self.plog.unacknowledged} records never acknowledged")
        for name, tally in self.tallies.items():
            out += [f"{name} attacker: a broker accepted {a}" for a in tally.accepted]
        if self.report is None:
            if not self.error:
                out.append("no report")
        else:
            for category in ("lost", "duplicated", "reordered", "corrupted"):
                n = self.lost if category == "lost" else self.report.total(category)
                if n:
                    out.append(f"{n} acknowledged records {category} at the source")
        if self.moved:
            out.append(f"{len(self.moved)} records read at another offset than acknowledged, e.g. {self.moved[:3]}")
        if self.restarts:
            out.append(f"processes restarted (they died): {self.restarts}")
        return out

    @property
    def passed(self) -> bool:
        return not self.failures()

    def describe(self) -> str:
        sent = sum(sum(t.sent.values()) for t in self.tallies.values())
        line = (f"scenario {self.scenario.name} (seed {self.seed}): {'pass' if self.passed else 'FAIL'}: "
                f"{self.plog.acked_count} acknowledged, {self.consumed} read, lost {self.lost}; {sent} forged "
                f"requests and znodes; mirror copied {sorted(self.copied)}, FAILED {sorted(self.failed)} "
                f"(forged into {sorted(self.forged)})")
        lines = [line]
        for name, tally in self.tallies.items():
            lines.append(f"  {name}: " + ", ".join(f"{kind} {n}" for kind, n in sorted(tally.sent.items())))
            lines += [f"    {note}" for note in tally.notes]
        lines += [f"  FAILED p{p}: {why}" for p, why in sorted(self.failed.items())]
        if not self.passed:
            lines += [f"  FAILED: {f}" for f in self.failures()]
            if self.report is not None:
                lines += ["  " + s for s in self.report.summary(skip=("unexpected",)).splitlines()]
            if self.work_dir is not None:
                lines.append(f"  logs: {self.work_dir}")
        return "\n".join(lines)


# -- the attackers ---------------------------------------------------------------------------------


class _Pacer:
    """`attacks` steps spread over the producer's run, each after a seeded random pause."""

    def __init__(self, scenario: HostileScenario, rng: random.Random) -> None:
        run_s = scenario.records / scenario.rate
        self.mean_pause_s = max(0.01, 0.8 * run_s / max(1, scenario.attacks))
        self.rng = rng

    async def pause(self) -> None:
        await trio.sleep(self.rng.uniform(0, 2 * self.mean_pause_s))


def _forged_batch(base_offset: int) -> bytes:
    records = [Record(b"forged", b"not the source's record %d" % i, timestamp=1_000 + i)
               for i in range(FORGED_RECORDS)]
    return build_batch(records, base_offset=base_offset, base_timestamp=1_000)


async def _link_attacker(state: LaunchState, scenario: HostileScenario, rng: random.Random, tally: Tally,
                         result: HostileResult) -> None:
    target = state.clusters[TARGET].bootstrap
    source = state.clusters[SOURCE].bootstrap
    pacer = _Pacer(scenario, rng)
    async with open_client(target, client_id="hostile-link", request_timeout_s=REQUEST_TIMEOUT_S) as client, \
            open_client(source, client_id="hostile-link-source", request_timeout_s=REQUEST_TIMEOUT_S) as src:
        link_name = await _mirror_name(client)
        kinds = ("skip-ahead", "offset-2^62", "log-start-max", "log-start-past-end", "claimed-gap", "version-0",
                 "not-a-mirror-topic", "wrong-link-name")
        forge_at = rng.randrange(scenario.attacks // 3, max(scenario.attacks // 3 + 1, scenario.attacks * 2 // 3))
        for step in range(scenario.attacks):
            await pacer.pause()
            if scenario.forge and step == forge_at:
                await _forge(client, link_name, tally, result)
                continue
            kind = rng.choice(kinds)
            tp = TopicPartition(TOPIC, rng.randrange(PARTITIONS))
            try:
                end = (await admin.list_offsets(client, {tp: LATEST}))[tp].offset
            except (KafkaError, ConnectionFailed) as exc:
                tally.notes.append(f"could not read the copy's end before {kind}: {exc}")
                continue
            if kind == "version-0":
                await _version_zero(state, link_name, tp, end, tally)
                continue
            batches: dict[TopicPartition, bytes] = {tp: _forged_batch(end + 1_000_000)}
            starts: dict[TopicPartition, int] = {}
            previous: dict[TopicPartition, int] = {}
            name, via = link_name, client
            if kind == "offset-2^62":
                batches = {tp: _forged_batch(2**62)}
            elif kind == "log-start-max":
                batches, starts = {tp: b""}, {tp: INT63}
            elif kind == "log-start-past-end":
                batches, starts = {tp: b""}, {tp: end + rng.randrange(1, 1000)}
            elif kind == "claimed-gap":
                gap = rng.randrange(1, 1000)
                batches, previous = {tp: _forged_batch(end + gap)}, {tp: end + gap}
            elif kind == "not-a-mirror-topic":
                via = src
                src_end = (await admin.list_offsets(src, {tp: LATEST}))[tp].offset
                batches, previous = {tp: _forged_batch(src_end)}, {tp: src_end}
            elif kind == "wrong-link-name":
                name = f"{link_name}-impostor"
                batches, previous = {tp: _forged_batch(end)}, {tp: end}
            answer = (await link_append(via, name, batches, log_start_offsets=starts, previous_ends=previous,
                                        timeout_ms=5000))[tp]
            if answer.error == ErrorCode.NONE:
                tally.took(kind, f"{tp} at end {end}: {answer}")
            else:
                tally.refused(kind, answer)


async def _mirror_name(client: Client) -> str:
    """The mirror's name as the target's mirror topic carries it (what an attacker reads too)."""
    with trio.fail_after(WARMUP_TIMEOUT_S):
        while True:
            try:
                entry = (await admin.describe_configs(client, TOPIC, keys=[MIRROR_NAME_CONFIG])).get(MIRROR_NAME_CONFIG)
            except (KafkaError, ConnectionFailed):
                entry = None
            if entry is not None and entry.value:
                return str(entry.value)
            await trio.sleep(0.2)  # the mirror makes the mirror topic once it has seen the source's


async def _forge(client: Client, link_name: str, tally: Tally, result: HostileResult) -> None:
    """One forged batch exactly at the copy's log end, claiming no gap: indistinguishable from the
    mirror's own at the broker. Accepted, the copy is no longer the source's: the mirror must say
    so. The mirror may append between reading the end and the forgery (then the forgery is refused
    or skipped as a batch the copy has): tried a few times."""
    tp = TopicPartition(TOPIC, FORGED_PARTITION)
    for _ in range(FORGE_ATTEMPTS):
        end = (await admin.list_offsets(client, {tp: LATEST}))[tp].offset
        answer = (await link_append(client, link_name, {tp: _forged_batch(end)}, previous_ends={tp: end},
                                    timeout_ms=5000))[tp]
        tally.sent["forged-at-end"] += 1
        if answer.error == ErrorCode.NONE and answer.log_end_offset >= end + FORGED_RECORDS:
            result.forged.add(FORGED_PARTITION)
            tally.notes.append(f"forged batch taken at {tp} offsets {end}..{end + FORGED_RECORDS - 1} "
                               "(the mirror must report FAILED)")
            return
    tally.notes.append(f"no forged batch taken at {tp} in {FORGE_ATTEMPTS} attempts (the mirror was first)")


async def _version_zero(state: LaunchState, link_name: str, tp: TopicPartition, end: int, tally: Tally) -> None:
    """LinkAppend v0 by hand (the client only speaks v1): it cannot say where the source's
    previous batch ended, so a broker must refuse it."""
    request = LinkAppendRequest(link_name=link_name, timeout_ms=5000, topics=[LinkAppendRequest.LinkAppendTopic(
        name=tp.topic, partitions=[LinkAppendRequest.LinkAppendPartition(
            index=tp.partition, records=_forged_batch(end + 10), log_start_offset=-1)])])
    address = next(iter(state.clusters[TARGET].brokers.values())).local
    try:
        answer = await trio.to_thread.run_sync(partial(ask, address, request, 0, timeout_s=REQUEST_TIMEOUT_S))
    except OSError as exc:  # a closed connection refuses too
        tally.refused("version-0", exc)
        return
    codes = [p.error_code for t in answer.topics for p in t.partitions]
    if codes and all(c != ErrorCode.NONE for c in codes):
        tally.refused("version-0", codes)
    else:
        tally.took("version-0", f"{tp}: {answer}")


@asynccontextmanager
async def _zookeeper(state: LaunchState) -> AsyncIterator[KazooClient]:
    """A kazoo client of the source cluster's ZooKeeper (its chroot), started, closed after."""
    quiet = logging.getLogger(f"{__name__}.kazoo")
    quiet.setLevel(logging.ERROR)
    zk = KazooClient(hosts=state.clusters[SOURCE].zookeeper_connect, timeout=10.0, logger=quiet,
                     connection_retry={"max_tries": 20, "max_delay": 1.0})
    await trio.to_thread.run_sync(partial(zk.start, timeout=15))
    try:
        yield zk
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(_close, zk)


async def _inter_broker_attacker(state: LaunchState, scenario: HostileScenario, rng: random.Random,
                                 tally: Tally) -> None:
    brokers = state.clusters[SOURCE].brokers
    pacer = _Pacer(scenario, rng)
    async with _zookeeper(state) as zk:
        for _ in range(scenario.attacks):
            await pacer.pause()
            broker_id = rng.choice(list(brokers))
            try:
                controller, epoch, broker_epoch = await trio.to_thread.run_sync(_controller_facts, zk, broker_id)
            except (KazooException, ValueError, KeyError) as exc:  # e.g. a moment without a controller
                tally.notes.append(f"could not read the controller's epochs from ZooKeeper: {exc!r}")
                continue
            lie = rng.choice(("stale-epoch", "future-epoch", "other-controller", "stale-broker-epoch"))
            c_id, c_epoch, b_epoch = controller, epoch, broker_epoch
            if lie == "stale-epoch":
                c_epoch = rng.randrange(0, epoch) if epoch > 0 else -1
            elif lie == "future-epoch":
                c_epoch = epoch + rng.randrange(1, 1000)
            elif lie == "other-controller":
                c_id = rng.choice([b for b in brokers if b != controller] or [99])
            else:
                b_epoch = broker_epoch - rng.randrange(1, 1000)
            api = rng.choice(("LeaderAndIsr", "UpdateMetadata", "StopReplica"))
            request, version = _controller_request(api, c_id, c_epoch, b_epoch, rng, brokers)
            kind = f"{api} {lie}"
            try:
                answer = await trio.to_thread.run_sync(partial(ask, brokers[broker_id].local, request, version,
                                                               timeout_s=REQUEST_TIMEOUT_S))
            except OSError as exc:
                tally.refused(kind, exc)
                continue
            if answer.error_code in (ErrorCode.STALE_CONTROLLER_EPOCH, ErrorCode.STALE_BROKER_EPOCH):
                tally.refused(kind, answer.error_code)
            else:
                tally.took(kind, f"broker {broker_id} answered {ErrorCode(answer.error_code).name} to controller "
                                 f"{c_id} epoch {c_epoch} broker epoch {b_epoch} (ZooKeeper: controller {controller}"
                                 f" epoch {epoch}, broker epoch {broker_epoch})")


def _controller_facts(zk: KazooClient, broker_id: int) -> tuple[int, int, int]:
    """ZooKeeper's controller id and epoch and the broker's epoch (its registration's czxid)."""
    controller = int(json.loads(zk.get("/controller")[0])["brokerid"])
    epoch = int(zk.get("/controller_epoch")[0])
    broker_epoch = int(zk.get(f"/brokers/ids/{broker_id}")[1].czxid)
    return controller, epoch, broker_epoch


def _controller_request(api: str, controller: int, epoch: int, broker_epoch: int, rng: random.Random,
                        brokers: dict[int, Any]) -> tuple[Any, int]:
    """A forged controller request about the real topic that would do harm if it were taken:
    a leader moved with a jumped leader epoch, brokers said gone, replicas deleted."""
    ids = list(brokers)
    if api == "LeaderAndIsr":
        leader = rng.choice(ids)
        states = [LeaderAndIsrRequest.LeaderAndIsrPartitionState(
            partition_index=p, controller_epoch=epoch, leader=leader, leader_epoch=rng.randrange(1, 2**31 - 1),
            isr=[leader], partition_epoch=rng.randrange(0, 2**31 - 1), replicas=ids) for p in range(PARTITIONS)]
        return LeaderAndIsrRequest(
            controller_id=controller, controller_epoch=epoch, broker_epoch=broker_epoch, type=1,
            topic_states=[LeaderAndIsrRequest.LeaderAndIsrTopicState(topic_name=TOPIC, partition_states=states)],
            live_leaders=[LeaderAndIsrRequest.LeaderAndIsrLiveLeader(broker_id=leader, host_name="127.0.0.1",
                                                                     port=1)]), 5
    if api == "UpdateMetadata":
        metadata = [UpdateMetadataRequest.UpdateMetadataPartitionState(
            partition_index=p, controller_epoch=epoch, leader=-1, leader_epoch=rng.randrange(1, 2**31 - 1),
            isr=[], zk_version=0, replicas=ids, offline_replicas=ids) for p in range(PARTITIONS)]
        return UpdateMetadataRequest(
            controller_id=controller, controller_epoch=epoch, broker_epoch=broker_epoch,
            topic_states=[UpdateMetadataRequest.UpdateMetadataTopicState(topic_name=TOPIC, partition_states=metadata)],
            live_brokers=[]), 7
    states_stop = [StopReplicaRequest.StopReplicaPartitionState(
        partition_index=p, leader_epoch=-2, delete_partition=True) for p in range(PARTITIONS)]
    return StopReplicaRequest(
        controller_id=controller, controller_epoch=epoch, broker_epoch=broker_epoch,
        topic_states=[StopReplicaRequest.StopReplicaTopicState(topic_name=TOPIC, partition_states=states_stop)]), 3


async def _znode_attacker(state: LaunchState, scenario: HostileScenario, rng: random.Random, tally: Tally) -> None:
    pacer = _Pacer(scenario, rng)
    async with _zookeeper(state) as zk:
        for _ in range(scenario.attacks):
            await pacer.pause()
            kind = rng.choice(("delete-internal-topic", "config-change-garbage", "config-change-oversized",
                               "config-change-unknown-entity", "reassign-garbage", "preferred-election-garbage",
                               "isr-change-garbage", "log-dir-event-garbage"))
            if kind == "config-change-oversized" and tally.sent[kind] >= OVERSIZED_ZNODES:
                kind = "config-change-garbage"  # ZooKeeper holds every znode in memory: a few make the point
            try:
                await trio.to_thread.run_sync(_write_znode, zk, kind, rng)
            except KazooException as exc:
                tally.notes.append(f"{kind}: ZooKeeper refused the write: {exc!r}")
                continue
            tally.refused(kind, "written")
        # The controller must have refused (and removed) every deletion of an internal topic.
        with trio.move_on_after(60):
            while await trio.to_thread.run_sync(zk.exists, "/admin/delete_topics/__consumer_offsets"):  # noqa: ASYNC110
                await trio.sleep(0.2)
        if await trio.to_thread.run_sync(zk.exists, "/admin/delete_topics/__consumer_offsets"):
            tally.accepted.append("delete-internal-topic: /admin/delete_topics/__consumer_offsets still there "
                                  "after 60 s")
        if tally.sent["delete-internal-topic"] and not await trio.to_thread.run_sync(
                zk.exists, "/brokers/topics/__consumer_offsets"):
            tally.accepted.append("delete-internal-topic: __consumer_offsets was deleted")


def _write_znode(zk: KazooClient, kind: str, rng: random.Random) -> None:
    garbage = rng.randbytes(rng.randrange(0, 512))
    if kind == "delete-internal-topic":
        try:
            zk.create("/admin/delete_topics/__consumer_offsets", b"", makepath=True)
        except NodeExistsError:
            pass
    elif kind.startswith("config-change"):
        data = {"config-change-garbage": garbage,
                "config-change-oversized": b"{" + b" " * (1024 * 1024 - 100) + b"}",
                "config-change-unknown-entity": json.dumps({"version": 2, "entity_path": "topics/no-such-topic"
                                                            }).encode()}[kind]
        zk.create("/config/changes/config_change_", data, sequence=True, makepath=True)
    elif kind == "reassign-garbage":
        try:
            zk.create("/admin/reassign_partitions", garbage, makepath=True)
        except NodeExistsError:
            pass
    elif kind == "preferred-election-garbage":
        try:
            zk.create("/admin/preferred_replica_election", garbage, makepath=True)
        except NodeExistsError:
            pass
    elif kind == "isr-change-garbage":
        zk.create("/isr_change_notification/isr_change_", garbage, sequence=True, makepath=True)
    else:
        zk.create("/log_dir_event_notification/log_dir_event_", rng.choice((garbage, json.dumps(
            {"version": 1, "broker": 99, "event": 1}).encode())), sequence=True, makepath=True)


def _close(zk: KazooClient) -> None:
    try:
        zk.stop()
        zk.close()
    except KazooException:
        pass


# -- one scenario ------------------------------------------------------------------------------------


async def run_scenario(scenario: HostileScenario, *, seed: int, work_dir: Path) -> HostileResult:
    """Run one scenario in `work_dir`; never raises for what goes wrong inside it (the result
    says). Every process it started has stopped when it returns."""
    result = HostileResult(scenario, seed, work_dir=work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - once, before anything starts
    with failure_kept(result, scenario.name, log):
        with trio.fail_after(scenario.deadline_s):
            async with trio.open_nursery() as nursery:
                state: LaunchState = await nursery.start(run_plan, hostile_plan(), work_dir)
                try:
                    await _exercise(state, result)
                finally:
                    result.restarts = {name: p.restarts for name, p in _processes(state).items() if p.restarts}
                    nursery.cancel_scope.cancel()
    return result


def _processes(state: LaunchState) -> dict[str, Any]:
    out: dict[str, Any] = {f"{name} broker {b}": broker.process for name, c in state.clusters.items()
                           for b, broker in c.brokers.items()}
    out.update({f"mirror {name}": m.process for name, m in state.mirrors.items()})
    return out


async def _exercise(state: LaunchState, result: HostileResult) -> None:
    scenario, plog = result.scenario, result.plog
    run = f"{scenario.name}-{result.seed}"
    source = state.clusters[SOURCE].bootstrap
    deadline = time.monotonic() + scenario.deadline_s - 120  # the producer stops before the scenario does
    attackers: dict[str, Callable[..., Any]] = {
        "link": partial(_link_attacker, result=result),
        "inter-broker": _inter_broker_attacker,
        "znode": _znode_attacker,
    }

    async def attack() -> None:
        try:
            await _acked(plog, min(300, scenario.records // 5))
            async with trio.open_nursery() as nursery:
                for i, name in enumerate(scenario.attackers):
                    result.tallies[name] = Tally()
                    nursery.start_soon(attackers[name], state, scenario, random.Random(result.seed * 10 + i),
                                       result.tallies[name])
        finally:
            plog.stop.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(trio.to_thread.run_sync, produce, source, run, scenario.rate, scenario.records,
                                   deadline, plog))
        nursery.start_soon(attack)
    # The source: every acknowledged record where it was acknowledged.
    async with open_client(source, client_id="hostile-check", request_timeout_s=REQUEST_TIMEOUT_S) as client:
        with trio.fail_after(120):
            source_records = await read_topic(client, TOPIC, PARTITIONS)
    consumed = {p: [_seen(r) for r in rs] for p, rs in source_records.items()}
    result.consumed = sum(len(c) for c in consumed.values())
    result.report, result.moved, result.problems = check_acknowledged(plog, run, consumed)
    # The copy: each partition the source's, or FAILED where a forged batch was taken.
    await _judge_copy(state, result, source_records)


def _seen(r: DecodedRecord) -> Seen:
    return Seen(r.offset, r.timestamp, r.key, r.value, tuple(r.headers))


async def _acked(plog: ProduceLog, count: int) -> None:
    with trio.fail_after(WARMUP_TIMEOUT_S):
        while plog.acked_count < count:  # noqa: ASYNC110 - counted by the producer's thread
            if plog.fatal or plog.abort.is_set():
                raise RuntimeError(f"the producer stopped: {plog.fatal}")
            await trio.sleep(0.05)


async def _judge_copy(state: LaunchState, result: HostileResult,
                      source_records: dict[int, list[DecodedRecord]]) -> None:
    """Wait (bounded) until each partition is copied to the source's end or reported FAILED,
    then compare record by record."""
    status_file = state.mirrors[MIRROR].status_file
    source_ends = {p: (rs[-1].offset + 1 if rs else 0) for p, rs in source_records.items()}
    async with open_client(state.clusters[TARGET].bootstrap, client_id="hostile-judge",
                           request_timeout_s=REQUEST_TIMEOUT_S) as target:
        tps = {p: TopicPartition(TOPIC, p) for p in range(PARTITIONS)}
        with trio.move_on_after(CATCH_UP_TIMEOUT_S):
            while True:
                result.failed = await _failed_partitions(status_file)
                try:
                    ends = await admin.list_offsets(target, {tp: LATEST for tp in tps.values()})
                except (KafkaError, ConnectionFailed):
                    ends = {}
                done = [p for p in range(PARTITIONS)
                        if p in result.failed or (tps[p] in ends and ends[tps[p]].offset >= source_ends[p])]
                if len(done) == PARTITIONS:
                    break
                await trio.sleep(0.5)
        with trio.fail_after(120):
            copy = await read_topic(target, TOPIC, PARTITIONS)
    for p in range(PARTITIONS):
        mine, theirs = [_row(r) for r in source_records[p]], [_row(r) for r in copy.get(p, [])]
        if mine == theirs:
            result.copied.add(p)
        if p in result.failed:
            if p not in result.forged:
                result.problems.append(f"p{p} reported FAILED with no forged batch taken there: "
                                       f"{result.failed[p]}")
        elif p in result.forged:
            result.problems.append(f"p{p}: a forged batch was taken at the target and the mirror did not "
                                   f"report the partition FAILED")
        elif mine != theirs:
            first = next((i for i, (a, b) in enumerate(zip(mine, theirs, strict=False)) if a != b),
                         min(len(mine), len(theirs)))
            result.problems.append(f"p{p}: the copy is not the source's and the mirror did not say so: "
                                   f"{len(theirs)} records at the target, {len(mine)} at the source, first "
                                   f"difference at record {first}")


def _row(r: DecodedRecord) -> tuple[Any, ...]:
    return r.offset, r.timestamp, r.key, r.value, tuple(r.headers)


async def _failed_partitions(status_file: Path) -> dict[int, str]:
    try:
        status: MirrorStatus | None = await trio.to_thread.run_sync(read_status, status_file)
    except StatusFileError as exc:
        log.debug("mirror status: %s", exc)
        return {}
    if status is None:
        return {}
    return {ps.partition: ps.failed for ps in status.partitions if ps.topic == TOPIC and ps.failed is not None}


# -- a matrix ----------------------------------------------------------------------------------------


def format_table(results: Sequence[HostileResult]) -> str:
    header = ("scenario", "seed", "forged", "acked", "lost", "accepted", "copied", "FAILED", "verdict")
    rows = [(r.scenario.name, str(r.seed), str(sum(sum(t.sent.values()) for t in r.tallies.values())),
             str(r.plog.acked_count), "-" if r.report is None else str(r.lost),
             str(sum(len(t.accepted) for t in r.tallies.values())), str(len(r.copied)), str(len(r.failed)),
             "pass" if r.passed else "FAIL") for r in results]
    return table(header, rows)

