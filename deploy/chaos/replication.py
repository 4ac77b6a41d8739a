"""Kafka's replication matrix on real processes: a ZooKeeper node, three brokers, a real client.

Each scenario starts a one-node ZooKeeper (deploy.zookeeper), three `causeway broker` processes
in ZooKeeper mode (deploy.broker_process, the one way to start a broker) and a topic of
PARTITIONS partitions with replication factor 3 and `min.insync.replicas=2`. A librdkafka
(confluent-kafka) idempotent producer with `acks=all` writes numbered, self-checking records
(deploy.chaos.payload) at a steady rate while the scenario's fault runs, as Apache Kafka's own
system tests do (kafkatest's replication_test.py):

    shutdown      SIGTERM the target (a controlled shutdown); it stays down
    kill          SIGKILL the target; it stays down
    bounce        SIGTERM the target, start it again; ROUNDS times
    kill-bounce   SIGKILL the target, wait until ZooKeeper expired its session, start it again
    freeze        SIGSTOP a partition leader past its session timeout, then SIGCONT
    zk-restart    restart the ZooKeeper node (SIGTERM, same port and data) under load

The target is found at fault time: the leader of a seeded partition from a broker's metadata, or
the controller from `/controller`. After each fault the rig waits (bounded, polling ZooKeeper's
partition state znodes) until every partition has a live leader and every live broker is in its
ISR again. When the faults are done the producer writes a bounded tail and drains; then a
librdkafka consumer reads every partition from its start to the high watermark, and
`deploy.chaos.checker` compares what it read with what the producer saw acknowledged (in
producer order, the order an idempotent producer's partition must keep): nothing acknowledged
lost, nothing duplicated, nothing reordered or damaged, every record acknowledged at the offset
it is read at. The failover time of a fault is how long after it the producer's next write was
acknowledged: per partition, the first acknowledgement of a record handed to the producer after
the fault; the slowest partition counts.

`python -m deploy.chaos --matrix replication` runs MATRIX (and `make chaos` with the mirror's);
tests/chaos/test_replication_matrix.py runs PROFILE.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import signal
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import trio
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient  # type: ignore[import-untyped]
from kazoo.exceptions import KazooException, NoNodeError  # type: ignore[import-untyped]

from broker.clock import now_ms
from broker.protocol.records import Record
from deploy.broker_process import BrokerProcess
from deploy.chaos.checker import Report, check
from deploy.chaos.matrix import failure_kept, table
from deploy.chaos.payload import make_record
from deploy.zookeeper.config import Tuning
from deploy.zookeeper.ensemble import Ensemble, run_ensemble

__all__ = ["FAULTS", "MATRIX", "PROFILE", "ProduceLog", "ReplicationResult", "ReplicationScenario", "Seen",
           "check_acknowledged", "consume_all", "format_table", "produce", "run_scenario"]

log = logging.getLogger(__name__)

TOPIC = "replicated"
PARTITIONS = 3
BROKER_IDS = (1, 2, 3)
SESSION_TIMEOUT_MS = 6000
# Small enough for a fast matrix: a dead follower leaves the ISR after 3 s, so acks=all writes
# stall no longer than that once the fault is seen.
LAG_TIME_MS = 3000
BROKER_OVERRIDES = (
    f"zookeeper.session.timeout.ms={SESSION_TIMEOUT_MS}",
    f"replica.lag.time.max.ms={LAG_TIME_MS}",
    "offsets.topic.num.partitions=3",
    "controlled.shutdown.retry.backoff.ms=500",
)
TOPIC_CONFIG = {"min.insync.replicas": "2"}
# tickTime 500 ms allows sessions as short as 1 s; no fsync (a restarted JVM finds what the kernel holds).
ZK_TUNING = Tuning(tick_time_ms=500, force_sync=False, prealloc_kb=1024)
PRODUCER_CONFIG = {
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 5,
    "message.timeout.ms": 120_000,  # never give up a record within a scenario: unavailability shows as failover time
    "request.timeout.ms": 10_000,  # a frozen leader's requests time out and go to the new leader
    "retry.backoff.ms": 100,
}

FAULTS = ("shutdown", "kill", "bounce", "kill-bounce", "freeze", "zk-restart")
TARGETS = ("leader", "controller")
SETTLE_TIMEOUT_S = 90.0  # a fault healed: leaders elected, followers back in the ISR
EXPIRY_TIMEOUT_S = 3 * SESSION_TIMEOUT_MS / 1000  # ZooKeeper drops a dead broker's registration
ACKS_TIMEOUT_S = 120.0  # the producer's progress between two faults
READ_TIMEOUT_S = 90.0


@dataclass(frozen=True)
class ReplicationScenario:
    """`fault` applied `rounds` times to `target` (None for zk-restart) while records are produced
    at `rate` a second; `warmup` acknowledged records before the first fault, `between` more after
    each healed fault, `tail` more after the last; at most `max_records` in all."""

    name: str
    fault: str
    target: str | None
    rounds: int = 1
    rate: float = 400.0
    warmup: int = 600
    between: int = 400
    tail: int = 600
    max_records: int = 60_000
    deadline_s: float = 600.0

    def __post_init__(self) -> None:
        if self.fault not in FAULTS or (self.target not in TARGETS if self.fault not in ("zk-restart", "freeze")
                                        else self.target not in (None, "leader")):
            raise ValueError(f"bad scenario {self}")


def _matrix() -> tuple[ReplicationScenario, ...]:
    out = []
    for fault in ("shutdown", "kill", "bounce", "kill-bounce"):
        for target in TARGETS:
            rounds = 3 if "bounce" in fault else 1
            out.append(ReplicationScenario(f"{fault}-{target}", fault, target, rounds=rounds))
    out.append(ReplicationScenario("freeze-leader", "freeze", "leader", rounds=2))
    out.append(ReplicationScenario("zk-restart", "zk-restart", None, rounds=2))
    return tuple(out)


# `make chaos`: every fault of Kafka's matrix against the leader and the controller, bounces
# three times, the freeze and the ZooKeeper restart twice.
MATRIX: tuple[ReplicationScenario, ...] = _matrix()
# `make test`: a crash of a leader and a bounce of the controller, few records.
PROFILE: tuple[ReplicationScenario, ...] = (
    ReplicationScenario("profile-kill-leader", "kill", "leader", rate=300, warmup=300, between=0, tail=300),
    ReplicationScenario("profile-bounce-controller", "bounce", "controller", rate=300, warmup=300, between=0,
                        tail=300),
)


class _DebugLog:
    """librdkafka's own log lines (a broker refusing connections while it is down, as the faults
    intend) at debug level: the checker's verdict and error_cb say what matters."""

    def log(self, level: int, msg: str, *args: object) -> None:
        log.debug("librdkafka: " + msg, *args)


_LIBRDKAFKA_LOG = _DebugLog()
# kazoo warns of every dropped connection, which restarting ZooKeeper is meant to cause.
_KAZOO_LOG = logging.getLogger(f"{__name__}.kazoo")
_KAZOO_LOG.setLevel(logging.ERROR)


# -- what the producer saw -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Seen:
    """A record as the checker takes it (deploy.chaos.checker.RecordLike)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


@dataclass
class ProduceLog:
    """Filled by the producer thread, read by the fault task (appends and len() only)."""

    sent: dict[int, dict[int, tuple[Record, float]]] = field(default_factory=dict)  # p -> seq -> (record, when)
    acked: dict[int, list[int]] = field(default_factory=dict)  # p -> seqs in acknowledgement order
    acked_at: dict[int, list[tuple[float, int, int]]] = field(default_factory=dict)  # p -> (when, seq, offset)
    failed: dict[tuple[int, int], str] = field(default_factory=dict)  # (p, seq) -> delivery error
    fatal: str | None = None
    unacknowledged: int = 0  # left in the producer's queue when it stopped
    stop: threading.Event = field(default_factory=threading.Event)  # no new records, drain
    abort: threading.Event = field(default_factory=threading.Event)  # give up at once

    @property
    def acked_count(self) -> int:
        return sum(len(s) for s in self.acked.values())

    @property
    def sent_count(self) -> int:
        return sum(len(s) for s in self.sent.values())

    def first_ack_after(self, t: float) -> dict[int, float | None]:
        """Per partition, when the first record handed over after `t` was acknowledged."""
        out: dict[int, float | None] = {}
        for p, acks in self.acked_at.items():
            sent = self.sent.get(p, {})
            out[p] = next((when for when, seq, _ in acks if sent[seq][1] > t), None)
        return out


def produce(bootstrap: str, run: str, rate: float, max_records: int, deadline: float, plog: ProduceLog) -> None:
    """Blocking (a worker thread): numbered records round-robin over the partitions at `rate` a
    second until `plog.stop` (or `max_records`), then drain; bounded by `deadline`
    (time.monotonic) and `plog.abort`. Errors go to `plog`, never raised."""
    for p in range(PARTITIONS):
        plog.sent[p], plog.acked[p], plog.acked_at[p] = {}, [], []

    def delivered(p: int, seq: int, err: Any, msg: Any) -> None:
        if err is None:
            plog.acked[p].append(seq)
            plog.acked_at[p].append((time.monotonic(), seq, msg.offset()))
        else:
            plog.failed[(p, seq)] = str(err)

    def on_error(err: Any) -> None:
        if err.fatal():
            plog.fatal = str(err)
        else:
            log.debug("producer: %s", err)

    producer = Producer({"bootstrap.servers": bootstrap, "error_cb": on_error, "logger": _LIBRDKAFKA_LOG,
                         **PRODUCER_CONFIG})
    interval = 1.0 / rate
    started = time.monotonic()
    i = 0
    while i < max_records and not plog.stop.is_set() and not plog.abort.is_set() and plog.fatal is None:
        now = time.monotonic()
        if now >= deadline:
            break
        due = started + i * interval
        if now < due:
            producer.poll(min(due - now, 0.05))  # serves delivery reports while pacing
            continue
        p, seq = i % PARTITIONS, i // PARTITIONS
        record = make_record(run, p, seq, timestamp_ms=now_ms())
        try:
            producer.produce(TOPIC, record.value, record.key, partition=p, headers=list(record.headers),
                             timestamp=record.timestamp or 0, on_delivery=partial(delivered, p, seq))
        except BufferError:  # the local queue is full (a long stall): let it drain
            producer.poll(0.05)
            continue
        plog.sent[p][seq] = (record, now)
        i += 1
        producer.poll(0)
    while len(producer) and time.monotonic() < deadline and not plog.abort.is_set() and plog.fatal is None:
        producer.poll(0.1)
    plog.unacknowledged = len(producer)
    producer.purge()
    producer.flush(0)


def consume_all(bootstrap: str) -> tuple[dict[int, list[Seen]], dict[int, int]]:
    """Blocking: every partition from its start to its high watermark (as listed first), read
    with a librdkafka consumer; and the high watermarks. Raises TimeoutError after READ_TIMEOUT_S."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "logger": _LIBRDKAFKA_LOG,
                         "group.id": f"replication-check-{uuid.uuid4()}", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest",
                         "enable.partition.eof": False})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)[1] for p in range(PARTITIONS)}
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        got: dict[int, list[Seen]] = {p: [] for p in range(PARTITIONS)}
        following = dict.fromkeys(range(PARTITIONS), 0)
        deadline = time.monotonic() + READ_TIMEOUT_S
        while any(following[p] < ends[p] for p in ends):
            if time.monotonic() > deadline:
                raise TimeoutError(f"read {following} of {ends} in {READ_TIMEOUT_S:.0f}s")
            for msg in consumer.consume(1000, timeout=0.5):
                p, offset = msg.partition(), msg.offset()
                if msg.error() is not None or p is None or offset is None:
                    continue
                if offset < ends[p]:
                    raw = msg.headers() or []
                    pairs = raw.items() if isinstance(raw, dict) else raw
                    headers = tuple((name, value if isinstance(value, bytes | None) else str(value).encode())
                                    for name, value in pairs)
                    got[p].append(Seen(offset, msg.timestamp()[1], msg.key(), msg.value(), headers))
                following[p] = max(following[p], offset + 1)
        return got, ends
    finally:
        consumer.close()


# -- the cluster -------------------------------------------------------------------------------------


class Stuck(Exception):
    """The cluster did not reach a state within its bound; the message says which and what was."""


@dataclass
class Round:
    """One fault as applied: what, to whom, when (time.monotonic), and how it went."""

    what: str
    broker: int | None
    at: float
    failover_s: float | None = None
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        target = f" broker {self.broker}" if self.broker is not None else ""
        failover = "no acknowledged write after it" if self.failover_s is None else f"failover {self.failover_s:.2f}s"
        return f"{self.what}{target}: {failover}" + "".join(f"; {n}" for n in self.notes)


class Cluster:
    """Three broker processes on one ZooKeeper; ZooKeeper read through kazoo (thread-safe,
    reconnecting by itself), every blocking call in a worker thread."""

    def __init__(self, ensemble: Ensemble, root: Path) -> None:
        self.ensemble = ensemble
        self.root = root
        self.brokers = {b: BrokerProcess(root / f"broker-{b}", overrides=(
            f"zookeeper.connect={ensemble.connect}", f"node.id={b}", *BROKER_OVERRIDES)) for b in BROKER_IDS}
        self.ports: dict[int, int] = {}
        self.frozen: set[int] = set()
        self.zk = KazooClient(hosts=ensemble.connect, timeout=10.0, logger=_KAZOO_LOG,
                              connection_retry={"max_tries": -1, "max_delay": 0.5})

    @property
    def live(self) -> list[int]:
        return [b for b, p in self.brokers.items() if p.proc is not None]

    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{port}" for port in self.ports.values())

    async def start(self) -> None:
        await trio.to_thread.run_sync(partial(self.zk.start, timeout=15))

        def start_all() -> None:
            with ThreadPoolExecutor(len(self.brokers)) as pool:
                list(pool.map(lambda p: p.start(), self.brokers.values()))

        await trio.to_thread.run_sync(start_all)
        self.ports = {b: p.port for b, p in self.brokers.items()}

    async def stop(self) -> None:
        """Every broker killed and reaped (a scenario's end has nothing to flush), kazoo closed."""
        def stop_all() -> None:
            for b, p in self.brokers.items():
                if b in self.frozen and p.proc is not None:
                    os.kill(p.proc.pid, signal.SIGCONT)
                p.kill()
            self.zk.stop()
            self.zk.close()

        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(stop_all)

    async def wait_metadata(self) -> None:
        """Until every live broker's metadata names the controller `/controller` names and every
        live broker. A broker answers Metadata from its ready line on, but learns the controller
        and the other brokers only from the controller's first UpdateMetadata (as Kafka's
        MetadataCache does); librdkafka's CreateTopics asked meanwhile waits for a controller
        without asking again, until its own timeout."""
        def agreed(controller: int | None) -> bool:
            live = set(self.live)
            for broker in live:
                admin = AdminClient({**self._admin_config(), "bootstrap.servers": self.brokers[broker].bootstrap})
                try:
                    md = admin.list_topics(timeout=10)
                except KafkaException:
                    return False
                if md.controller_id != controller or set(md.brokers) != live:
                    return False
            return True

        async def ready() -> bool:
            controller = await self.controller()
            return controller is not None and await trio.to_thread.run_sync(agreed, controller)
        await self.wait(ready, "every broker's metadata naming the controller and every broker", SETTLE_TIMEOUT_S)

    async def create_topic(self) -> None:
        def create() -> None:
            admin = AdminClient(self._admin_config())
            topic = NewTopic(TOPIC, PARTITIONS, len(BROKER_IDS), config=TOPIC_CONFIG)
            admin.create_topics([topic], operation_timeout=30)[TOPIC].result(timeout=60)

        await trio.to_thread.run_sync(create)
        config = await self._read(f"/config/topics/{TOPIC}")
        if config is None or json.loads(config).get("config", {}).get("min.insync.replicas") != "2":
            raise Stuck(f"/config/topics/{TOPIC} does not hold min.insync.replicas=2: {config!r}")

    def _admin_config(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap(), "logger": _LIBRDKAFKA_LOG}

    # -- reading the cluster's state

    async def _read(self, path: str) -> bytes | None:
        """A znode's data; None when absent or ZooKeeper is not answering right now."""
        def get() -> bytes | None:
            try:
                return bytes(self.zk.get(path)[0])
            except NoNodeError:
                return None
            except KazooException:
                return None
        return await trio.to_thread.run_sync(get)

    async def controller(self) -> int | None:
        data = await self._read("/controller")
        return None if data is None else int(json.loads(data)["brokerid"])

    async def registered(self) -> set[int] | None:
        def children() -> set[int] | None:
            try:
                return {int(c) for c in self.zk.get_children("/brokers/ids")}
            except KazooException:
                return None
        return await trio.to_thread.run_sync(children)

    async def states(self) -> dict[int, dict[str, Any] | None]:
        out: dict[int, dict[str, Any] | None] = {}
        for p in range(PARTITIONS):
            data = await self._read(f"/brokers/topics/{TOPIC}/partitions/{p}/state")
            out[p] = None if data is None else json.loads(data)
        return out

    async def metadata_leader(self, partition: int) -> int | None:
        """The partition's leader as a live broker's metadata names it (None: none yet)."""
        def ask() -> int | None:
            admin = AdminClient(self._admin_config())
            try:
                md = admin.list_topics(TOPIC, timeout=10)
            except KafkaException:
                return None
            leader = md.topics[TOPIC].partitions[partition].leader
            return leader if leader in self.live else None
        return await trio.to_thread.run_sync(ask)

    async def describe(self) -> str:
        states = await self.states()
        return (f"live {self.live}, registered {await self.registered()}, controller {await self.controller()}, "
                + ", ".join(f"p{p} {s}" for p, s in states.items()))

    async def settled(self) -> bool:
        live = set(self.live) - self.frozen
        if await self.registered() != live or await self.controller() not in live:
            return False
        for state in (await self.states()).values():
            if state is None or state["leader"] not in live or set(state["isr"]) != live:
                return False
        return True

    async def wait(self, check: Callable[[], Any], what: str, timeout_s: float) -> None:
        """Poll `check` (async, truthy when done) until it holds; Stuck after `timeout_s`."""
        with trio.move_on_after(timeout_s):
            while not await check():  # noqa: ASYNC110 - another process's state: no trio.Event stands for it
                await trio.sleep(0.1)
            return
        raise Stuck(f"{what} not within {timeout_s:.0f}s: {await self.describe()}")

    async def wait_settled(self) -> None:
        await self.wait(self.settled, "every partition led by a live broker with every live broker in its ISR",
                        SETTLE_TIMEOUT_S)

    async def wait_expired(self, broker: int) -> None:
        async def gone() -> bool:
            registered = await self.registered()
            return registered is not None and broker not in registered
        await self.wait(gone, f"broker {broker}'s ZooKeeper session to expire", EXPIRY_TIMEOUT_S)

    # -- acting on it

    async def target(self, kind: str, rng: random.Random) -> int:
        if kind == "controller":
            async def found() -> bool:
                return await self.controller() in self.live
            await self.wait(found, "a controller", SETTLE_TIMEOUT_S)
            controller = await self.controller()
            assert controller is not None
            return controller
        partition = rng.randrange(PARTITIONS)
        leader: list[int] = []

        async def found_leader() -> bool:
            got = await self.metadata_leader(partition)
            if got is not None:
                leader.append(got)
            return got is not None
        await self.wait(found_leader, f"the leader of {TOPIC}-{partition} in the metadata", SETTLE_TIMEOUT_S)
        return leader[0]

    async def sigterm(self, broker: int) -> int:
        """A clean shutdown; the exit code (the broker's SIGKILL after STOP_TIMEOUT_S otherwise)."""
        return await trio.to_thread.run_sync(self.brokers[broker].stop)

    async def sigkill(self, broker: int) -> None:
        await trio.to_thread.run_sync(self.brokers[broker].kill)

    async def restart(self, broker: int) -> None:
        """Start it again on its port (clients and the other brokers know the address)."""
        await trio.to_thread.run_sync(partial(self.brokers[broker].start, port=self.ports[broker]))

    def freeze(self, broker: int, stop: bool) -> None:
        proc = self.brokers[broker].proc
        assert proc is not None
        if stop:
            self.frozen.add(broker)
            os.kill(proc.pid, signal.SIGSTOP)
        else:
            os.kill(proc.pid, signal.SIGCONT)
            self.frozen.discard(broker)

    def log_tails(self, lines: int = 8) -> list[str]:
        """The last lines each broker logged (what it was doing when a wait ran out)."""
        return [f"broker {b} (last): {line[:300]}" for b, p in self.brokers.items()
                for line in p.log_tail(lines).splitlines()]

    def log_evidence(self, lines: int = 12) -> list[str]:
        """The broker logs' lines about errors, elections, truncation and fencing."""
        pattern = re.compile(r"ERROR|Traceback|truncat|fenc|elect|expired|NOT_ENOUGH|OUT_OF_ORDER", re.IGNORECASE)
        out = []
        for b, p in self.brokers.items():
            try:
                text = p.log_path.read_text(errors="replace").splitlines()
            except OSError:
                continue
            hits = [line for line in text if pattern.search(line)]
            out += [f"broker {b}: {line[:300]}" for line in hits[-lines:]]
        return out


# -- one scenario ------------------------------------------------------------------------------------


@dataclass
class ReplicationResult:
    scenario: ReplicationScenario
    seed: int
    rounds: list[Round] = field(default_factory=list)
    plog: ProduceLog = field(default_factory=ProduceLog)
    report: Report | None = None
    consumed: int = 0
    moved: list[str] = field(default_factory=list)  # acknowledged at one offset, read at another
    problems: list[str] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)
    error: str | None = None
    work_dir: Path | None = None

    @property
    def lost(self) -> int:
        return 0 if self.report is None else self.report.total("lost") + self.report.total("tail")

    def count(self, category: str) -> int:
        return 0 if self.report is None else self.report.total(category)

    @property
    def failover_s(self) -> float | None:
        times = [r.failover_s for r in self.rounds]
        return None if not times or None in times else max(t for t in times if t is not None)

    def failures(self) -> list[str]:
        out = [f"error: {self.error}"] if self.error else []
        out += self.problems
        plog = self.plog
        if plog.fatal:
            out.append(f"producer fatal error: {plog.fatal}")
        if plog.failed:
            first = sorted(plog.failed.items())[:3]
            out.append(f"{len(plog.failed)} deliveries failed, e.g. {first}")
        if plog.unacknowledged:
            out.append(f"{plog.unacknowledged} records never acknowledged")
        if self.report is None:
            if not self.error:
                out.append("no report")
            return out
        for category, n in (("lost", self.lost), ("duplicated", self.count("duplicated")),
                            ("reordered", self.count("reordered")), ("corrupted", self.count("corrupted"))):
            if n:
                out.append(f"{n} acknowledged records {category}")
        if self.moved:
            out.append(f"{len(self.moved)} records read at another offset than acknowledged, e.g. {self.moved[:3]}")
        if any(r.failover_s is None for r in self.rounds):
            out.append("no write acknowledged after a fault")
        return out

    @property
    def passed(self) -> bool:
        return not self.failures()

    def describe(self) -> str:
        failover = "-" if self.failover_s is None else f"{self.failover_s:.2f}s"
        line = (f"scenario {self.scenario.name} (seed {self.seed}): {'pass' if self.passed else 'FAIL'}: "
                f"{self.plog.acked_count} acknowledged, {self.consumed} read, lost {self.lost}, "
                f"duplicated {self.count('duplicated')}, reordered {self.count('reordered')}, "
                f"failover {failover}")
        lines = [line] + [f"  fault {r.describe()}" for r in self.rounds]
        if not self.passed:
            lines += [f"  FAILED: {f}" for f in self.failures()]
            if self.report is not None:
                lines += ["  " + s for s in self.report.summary(skip=("unexpected",)).splitlines()]
            lines += ["  " + e for e in self.evidence]
            if self.work_dir is not None:
                lines.append(f"  logs: {self.work_dir}")
        return "\n".join(lines)


async def run_scenario(scenario: ReplicationScenario, *, seed: int, work_dir: Path) -> ReplicationResult:
    """Run one scenario in `work_dir` (ZooKeeper's and the brokers' data and logs); never raises
    for what goes wrong inside it (the result says). Every process it started is reaped when it
    returns."""
    result = ReplicationResult(scenario, seed, work_dir=work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - once, before anything starts
    with failure_kept(result, scenario.name, log):
        with trio.fail_after(scenario.deadline_s):
            async with trio.open_nursery() as nursery:
                ensemble: Ensemble = await nursery.start(partial(run_ensemble, work_dir / "zookeeper",
                                                                 tuning=ZK_TUNING))
                cluster = Cluster(ensemble, work_dir)
                try:
                    await cluster.start()
                    await cluster.wait_metadata()
                    await cluster.create_topic()
                    await cluster.wait_settled()
                    await _exercise(cluster, result)
                except BaseException:
                    with trio.CancelScope(shield=True):
                        result.evidence = cluster.log_evidence() + cluster.log_tails()
                        if cluster.zk.connected:
                            with trio.move_on_after(10):
                                result.evidence.append(f"state: {await cluster.describe()}")
                    raise
                finally:
                    await cluster.stop()
                    nursery.cancel_scope.cancel()
    return result


async def _exercise(cluster: Cluster, result: ReplicationResult) -> None:
    scenario, plog = result.scenario, result.plog
    rng = random.Random(result.seed)
    run = f"{scenario.name}-{result.seed}"
    deadline = time.monotonic() + scenario.deadline_s - 60  # the producer stops itself before the scenario does

    async def faults() -> None:
        try:
            await _acks(plog, scenario.warmup)
            for i in range(scenario.rounds):
                result.rounds.append(await _fault(cluster, scenario, rng))
                await cluster.wait_settled()
                await _acks(plog, scenario.tail if i == scenario.rounds - 1 else scenario.between)
            plog.stop.set()
        except BaseException:
            plog.abort.set()
            raise

    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(trio.to_thread.run_sync, produce, cluster.bootstrap(), run, scenario.rate,
                                   scenario.max_records, deadline, plog))
        nursery.start_soon(faults)
    for r in result.rounds:
        after = plog.first_ack_after(r.at)
        r.failover_s = None if None in after.values() else max(t for t in after.values() if t is not None) - r.at
    live = ",".join(f"127.0.0.1:{cluster.ports[b]}" for b in cluster.live)
    consumed, ends = await trio.to_thread.run_sync(consume_all, live)
    result.consumed = sum(len(c) for c in consumed.values())
    check_result(result, consumed, ends)
    if not result.passed:
        result.evidence = cluster.log_evidence()


async def _acks(plog: ProduceLog, more: int) -> None:
    """Until `more` further records are acknowledged (polling the producer's log)."""
    wanted = plog.acked_count + more
    with trio.move_on_after(ACKS_TIMEOUT_S):
        while plog.acked_count < wanted:  # noqa: ASYNC110 - counted by the producer's thread
            if plog.fatal or plog.abort.is_set():
                raise Stuck(f"the producer stopped: {plog.fatal}")
            await trio.sleep(0.05)
        return
    raise Stuck(f"{more} more acknowledgements not within {ACKS_TIMEOUT_S:.0f}s ({plog.acked_count} of {wanted})")


async def _fault(cluster: Cluster, scenario: ReplicationScenario, rng: random.Random) -> Round:
    """Apply one fault and heal it (restart, SIGCONT) but for shutdown and kill; returns once the
    fault's own waits are done (the caller waits for the cluster to settle)."""
    fault = scenario.fault
    if fault == "zk-restart":
        node = cluster.ensemble.nodes[0].node_id
        applied = Round("ZooKeeper restart", None, time.monotonic())
        await cluster.ensemble.restart(node)
        return applied
    broker = await cluster.target(scenario.target or "leader", rng)
    role = "controller" if scenario.target == "controller" else "leader"
    at = time.monotonic()
    if fault in ("shutdown", "bounce"):
        applied = Round(f"SIGTERM {role}", broker, at)
        code = await cluster.sigterm(broker)
        if code != 0:
            applied.notes.append(f"exit code {code}")
            raise Stuck(f"broker {broker} exited with {code} on SIGTERM, not 0")
        if fault == "bounce":
            await cluster.restart(broker)
    elif fault in ("kill", "kill-bounce"):
        applied = Round(f"SIGKILL {role}", broker, at)
        await cluster.sigkill(broker)
        if fault == "kill-bounce":
            # As kafkatest's hard bounce: ZooKeeper must have seen the crash, or the new process
            # would find its id still registered by the dead one's session.
            await cluster.wait_expired(broker)
            await cluster.restart(broker)
    else:  # freeze
        applied = Round(f"SIGSTOP {role}", broker, at)
        cluster.freeze(broker, True)
        try:
            await cluster.wait_expired(broker)
        finally:
            cluster.freeze(broker, False)
    if fault in ("bounce", "kill-bounce", "freeze"):
        applied.what += " and back"
    return applied


def check_result(result: ReplicationResult, consumed: dict[int, list[Seen]], ends: dict[int, int]) -> None:
    """The checker, with the producer's acknowledged records (in producer order) as the reference."""
    run = f"{result.scenario.name}-{result.seed}"
    result.report, result.moved, problems = check_acknowledged(result.plog, run, consumed)
    result.problems += problems
    log.info("read up to %s", ends)


def check_acknowledged(plog: ProduceLog, run: str, consumed: dict[int, list[Seen]],
                       ) -> tuple[Report, list[str], list[str]]:
    """What `consumed` (per partition, as read back) holds of what `plog` saw acknowledged for
    `run`: the checker's report, the records read at another offset than they were acknowledged
    at, and records the producer never handed over (both as lines to print)."""
    reference: dict[int, list[Seen]] = {}
    acked_offset: dict[int, dict[int, int]] = {}
    for p in range(PARTITIONS):
        acked_offset[p] = {seq: offset for _, seq, offset in plog.acked_at.get(p, [])}
        rows = []
        for seq in sorted(plog.acked.get(p, [])):
            record = plog.sent[p][seq][0]
            rows.append(Seen(acked_offset[p][seq], record.timestamp or 0, record.key, record.value,
                             tuple(record.headers)))
        reference[p] = rows
    report = check(reference, consumed, acked={p: plog.acked.get(p, []) for p in range(PARTITIONS)}, run=run)
    # Every acknowledged record stays where it was acknowledged (librdkafka reports -1 when unknown).
    moved = []
    for p, records in consumed.items():
        for r in records:
            seq = int(dict(r.headers).get("seq") or -1)
            offset = acked_offset[p].get(seq, -1)
            if offset >= 0 and offset != r.offset:
                moved.append(f"p{p} seq {seq}: acknowledged at {offset}, read at {r.offset}")
    # Records in the log that were never acknowledged are allowed (the "unexpected" category):
    # only a record the producer never handed over would be foreign.
    problems = []
    for p, part in report.partitions.items():
        for example in part.examples.get("unexpected", []):
            if example.seq is None or example.seq not in plog.sent.get(p, {}):
                problems.append(f"a record the producer never sent in partition {p}: {example}")
    return report, moved, problems


# -- a matrix ----------------------------------------------------------------------------------------


def format_table(results: Sequence[ReplicationResult]) -> str:
    header = ("scenario", "seed", "faults", "acked", "lost", "dup", "reordered", "failover", "verdict")
    rows = [(r.scenario.name, str(r.seed), str(len(r.rounds)), str(r.plog.acked_count),
             "-" if r.report is None else str(r.lost), "-" if r.report is None else str(r.count("duplicated")),
             "-" if r.report is None else str(r.count("reordered")),
             "-" if r.failover_s is None else f"{r.failover_s:.2f}s", "pass" if r.passed else "FAIL")
            for r in results]
    return table(header, rows)

