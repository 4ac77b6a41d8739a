"""Leader-routed requests across a SIGKILLed partition leader, on a three-broker ZooKeeper
cluster with replication factor 3.

A produce, a fetch, a list offsets and a LinkAppend run in loops, each with its own client,
while the broker leading their partitions is killed with SIGKILL. Each call to the dead leader
must fail at once (one connect at most, none while the node backs off) and mark metadata stale,
so the next call goes to the new leader, as Apache Kafka's NetworkClient fails a node's requests
on disconnect and asks for a metadata update. Without that, one call keeps reconnecting to the
dead broker until its deadline (40 s for a LinkAppend, measured). The test counts connects to
the dead broker per call (never a duration), checks that metadata was fetched again and names a
new leader, and that nothing acknowledged was lost or duplicated.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trio

from broker.client import (
    MIRROR_NAME_CONFIG,
    Backoff,
    Client,
    ErrorCode,
    TopicPartition,
    admin,
    decode_records,
    fetch,
    init_idempotent_producer,
    link_append,
    open_client,
    produce_batches,
)
from broker.client.admin import NewTopic
from broker.protocol.records import Record, build_batch, split_batches
from tests.integration.started_clusters import started
from tests.support.cluster import ZkCluster
from tests.support.polling import wait_for
from tests.support.zookeeper import ZooKeeperServer

OVERRIDES = ("zookeeper.session.timeout.ms=4000", "offsets.topic.num.partitions=1", "replica.lag.time.max.ms=4000",
             "min.insync.replicas=2", "leader.imbalance.check.interval.seconds=3600")
LINK = "east-to-west"
PARTITIONS = 3  # on three brokers: each broker leads one partition of each topic
REQUEST_TIMEOUT_S = 30.0  # the old behaviour kept one call on the dead leader this long and more
LOOP_PAUSE = Backoff(initial_s=0.05, max_s=0.5)  # the callers' own backoff between failed calls
SUCCESSES_AFTER = 5  # each loop goes on until it succeeded this often against the new leader
# Errors a call may meet while the leader moves; anything else fails the test. A broker the
# client's metadata names before the controller's LeaderAndIsr reached it answers
# UNKNOWN_TOPIC_OR_PARTITION ("does not host"), retriable as in Kafka's clients.
MOVING = frozenset({ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_LEADER_OR_FOLLOWER,
                    ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.NOT_ENOUGH_REPLICAS,
                    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.FENCED_LEADER_EPOCH,
                    ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION})


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[ZkCluster]:
    with started(ZkCluster(zookeeper, tmp_path, OVERRIDES)) as running:
        yield running


@dataclass
class Loop:
    """One caller's loop: its client, the partition it works on, what it saw."""

    name: str
    client: Client
    tp: TopicPartition
    dead: str = ""  # the killed leader's address, once chosen
    calls: int = 0
    failures: int = 0
    successes_after_kill: int = 0
    per_call_attempts: list[int] = field(default_factory=list)  # connects to the dead broker, per call
    metadata_requests_at_kill: int = 0

    def attempts(self) -> int:
        return self.client.statistics().connect_attempts_by_peer.get(self.dead, 0) if self.dead else 0

    async def call(self, operation: Callable[[], Awaitable[bool]], killed: trio.Event) -> bool:
        """Run one call, counting the connects it made to the dead broker; after a failure,
        pause as a real caller does (the loop must not spin)."""
        before = self.attempts()
        ok = await operation()
        self.per_call_attempts.append(self.attempts() - before)
        self.calls += 1
        if ok and killed.is_set():
            self.successes_after_kill += 1
        if not ok:
            self.failures += 1
            await trio.sleep(LOOP_PAUSE.delay(self.failures))
        else:
            self.failures = 0
        return ok


async def run_loops(cluster: ZkCluster) -> dict[str, object]:
    bootstrap = cluster.bootstrap()
    async with open_client(bootstrap, request_timeout_s=REQUEST_TIMEOUT_S) as setup:
        await admin.create_topics(setup, {"orders": NewTopic(PARTITIONS, 3),
                                          "copy": NewTopic(PARTITIONS, 3, {MIRROR_NAME_CONFIG: LINK})})

        leaders: dict[TopicPartition, int] = {}

        async def full_isr() -> bool:
            setup.invalidate_metadata()
            meta = await setup.refresh_metadata(["orders", "copy"])
            parts = [(TopicPartition(t, p), part) for t in ("orders", "copy")
                     for p, part in meta.topics[t].partitions.items()]
            if len(parts) == 2 * PARTITIONS and all(len(part.isr) == 3 and part.leader >= 0 for _, part in parts):
                leaders.update({tp: part.leader for tp, part in parts})
                return True
            return False

        await wait_for(full_isr, what="every partition of both topics to have a leader and a full ISR",
                       interval_s=0.1)
    victim = leaders[TopicPartition("orders", 0)]
    copy_tp = next(tp for tp, leader in leaders.items() if tp.topic == "copy" and leader == victim)
    orders_tp = TopicPartition("orders", 0)
    killed = trio.Event()
    loops: dict[str, Loop] = {}
    out: dict[str, object] = {"victim": victim, "loops": loops}

    async def with_client(name: str, tp: TopicPartition, body: Callable[[Loop], Awaitable[None]]) -> None:
        async with open_client(bootstrap, request_timeout_s=REQUEST_TIMEOUT_S) as client:
            await client.refresh_metadata([tp.topic])
            loop = Loop(name, client, tp, dead=client.metadata.brokers[victim].address)
            loops[name] = loop
            with trio.fail_after(120):  # generous: the loops end by themselves long before
                await body(loop)

    # -- the four callers ---------------------------------------------------------------

    acked: list[int] = []  # the producer's acknowledged record numbers, in order

    async def producer(loop: Loop) -> None:
        identity = await init_idempotent_producer(loop.client)
        number = 0
        while loop.successes_after_kill < SUCCESSES_AFTER and loop.calls < 2000:
            batch = build_batch([Record(str(number).encode(), b"v" * 100)], producer_id=identity.producer_id,
                                producer_epoch=identity.producer_epoch, base_sequence=number)

            async def send(batch: bytes = batch) -> bool:
                result = (await produce_batches(loop.client, {loop.tp: batch}, acks=-1))[loop.tp]
                if result.error in (ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE_NUMBER):
                    return True
                assert result.error in MOVING, result
                return False

            if await loop.call(send, killed):
                acked.append(number)
                number += 1

    fetched: list[int] = []

    async def consumer(loop: Loop) -> None:
        position = 0
        while loop.successes_after_kill < SUCCESSES_AFTER and loop.calls < 2000:

            async def read() -> bool:
                nonlocal position
                part = (await fetch(loop.client, {loop.tp: position}, max_wait_ms=100))[loop.tp]
                if part.error != ErrorCode.NONE:
                    assert part.error in MOVING, part
                    return False
                for record in decode_records(part.records, from_offset=position):
                    assert record.key is not None
                    fetched.append(int(record.key))
                    position = record.offset + 1
                return True

            await loop.call(read, killed)

    ends: list[int] = []

    async def lister(loop: Loop) -> None:
        while loop.successes_after_kill < SUCCESSES_AFTER and loop.calls < 2000:

            async def ask() -> bool:
                # Retried inside (with fresh metadata) until it answers: a dead leader must not
                # make it raise, as it did when the call kept reconnecting to that one broker.
                ends.append((await admin.list_offsets(loop.client, {loop.tp: admin.LATEST}))[loop.tp].offset)
                await trio.sleep(0.05)
                return True

            await loop.call(ask, killed)

    linked: list[int] = []

    async def linker(loop: Loop) -> None:
        offset = 1000
        while loop.successes_after_kill < SUCCESSES_AFTER and loop.calls < 2000:
            batch = build_batch([Record(b"k", b"v" * 100)], base_offset=offset, producer_id=7, producer_epoch=0,
                                base_sequence=offset)

            # The source's log starts at 1000, and holds nothing between its batches.
            previous_end = linked[-1] + 1 if linked else 1000

            async def append(batch: bytes = batch, previous_end: int = previous_end) -> bool:
                result = (await link_append(loop.client, LINK, {loop.tp: batch}, timeout_ms=10000,
                                            previous_ends={loop.tp: previous_end},
                                            log_start_offsets={loop.tp: 1000}))[loop.tp]
                if result.error == ErrorCode.NONE:
                    return True
                assert result.error in MOVING, result
                return False

            if await loop.call(append, killed):
                linked.append(offset)
                offset += 3  # gaps, as compaction at a source leaves them

    bodies = {"produce": (orders_tp, producer), "fetch": (orders_tp, consumer), "list_offsets": (orders_tp, lister),
              "link_append": (copy_tp, linker)}

    async def killer() -> None:
        # Every loop under way against the doomed leader, then SIGKILL it.
        await wait_for(lambda: len(loops) == len(bodies) and all(loop.calls >= 5 for loop in loops.values()),
                       what="every loop under way", timeout_s=60)
        for loop in loops.values():
            loop.metadata_requests_at_kill = loop.client.statistics().metadata_requests
        await trio.to_thread.run_sync(cluster.brokers[victim].kill)
        killed.set()

    async with trio.open_nursery() as nursery:
        for name, (tp, body) in bodies.items():
            nursery.start_soon(with_client, name, tp, body)
        nursery.start_soon(killer)
    out.update(acked=acked, fetched=fetched, ends=ends, linked=linked, copy_tp=copy_tp)
    return out


def test_leader_routed_calls_leave_a_killed_leader_at_once(cluster: ZkCluster) -> None:
    out = trio.run(run_loops, cluster)
    victim = out["victim"]
    loops = out["loops"]
    assert isinstance(loops, dict)
    for name, loop in loops.items():
        assert isinstance(loop, Loop)
        assert loop.successes_after_kill >= SUCCESSES_AFTER, (name, loop)
        if name == "list_offsets":
            # It retries inside one call (fresh metadata, the client's backoff of 50 ms doubling
            # to 1 s) until the new leader answers: a few connects, where a spin makes thousands.
            assert max(loop.per_call_attempts) <= 30, (name, loop.per_call_attempts)
        else:
            # One call makes at most one connect to the dead broker for the request itself, and
            # at most one more when the metadata refresh before it happens to try that broker
            # among the bootstrap candidates; a call that kept reconnecting until its deadline
            # made dozens.
            assert max(loop.per_call_attempts) <= 2, (name, loop.per_call_attempts)
        # Metadata was fetched again after the kill and names another leader now.
        assert loop.client.statistics().metadata_requests > loop.metadata_requests_at_kill, name
        new_leader = loop.client.metadata.leader(loop.tp)
        assert new_leader is not None and new_leader != victim, (name, new_leader)
        assert loop.calls < 2000, (name, "spinning")

    # Nothing acknowledged lost, nothing duplicated, in order: the producer's records as the
    # consumer read them across the failover, and as the new leader holds them.
    acked = out["acked"]
    fetched = out["fetched"]
    assert isinstance(acked, list) and isinstance(fetched, list)
    assert acked == list(range(len(acked)))
    assert fetched == acked[:len(fetched)], "the consumer read a gap or a duplicate"
    ends = out["ends"]
    assert isinstance(ends, list) and ends == sorted(ends), "list offsets went back"
    linked, copy_tp = out["linked"], out["copy_tp"]
    assert isinstance(linked, list) and isinstance(copy_tp, TopicPartition)
    trio.run(check_logs, cluster, acked, linked, copy_tp)


async def check_logs(cluster: ZkCluster, acked: list[int], linked: list[int], copy_tp: TopicPartition) -> None:
    async with open_client(cluster.bootstrap(), request_timeout_s=REQUEST_TIMEOUT_S) as client:
        orders = TopicPartition("orders", 0)
        end = (await admin.list_offsets(client, {orders: admin.LATEST}))[orders].offset
        held: list[int] = []
        position = 0
        while position < end:
            part = (await fetch(client, {orders: position}, max_wait_ms=0))[orders]
            assert part.error == ErrorCode.NONE, part
            for record in decode_records(part.records, from_offset=position):
                assert record.key is not None
                held.append(int(record.key))
                position = record.offset + 1
        assert held == list(range(len(held))) and len(held) >= len(acked), "a record was lost or duplicated"

        listed = await admin.list_offsets(client, {copy_tp: admin.EARLIEST})
        position = listed[copy_tp].offset
        copy_end = (await admin.list_offsets(client, {copy_tp: admin.LATEST}))[copy_tp].offset
        bases: list[int] = []
        while position < copy_end:
            part = (await fetch(client, {copy_tp: position}, max_wait_ms=0))[copy_tp]
            assert part.error == ErrorCode.NONE and part.next_offset is not None, part
            bases += [h.base_offset for _, h in split_batches(part.records, allow_partial_tail=True)]
            position = part.next_offset
        assert set(linked) <= set(bases), "an acknowledged link-appended batch was lost"
        assert bases == sorted(set(bases)), "a link-appended batch was duplicated"
