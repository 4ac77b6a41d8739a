"""The group coordinator follows the leaders of `__consumer_offsets` partitions (Kafka's
onElection / onResignation): two coordinators over two partitions' real logs, a partition moving
from one to the other, a large partition loading while requests arrive, and commits that wait
for the ISR."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import trio
import trio.testing

from broker.clock import now_ms
from broker.config import BrokerConfig, ListenerSpec
from broker.controller.model import BrokerInfo, PartitionInfo, TopicInfo
from broker.coordinator import offsets_store
from broker.coordinator.coordinator import OFFSETS_TOPIC, GroupCoordinator, JoinResult
from broker.coordinator.group import GroupState
from broker.coordinator.leadership import LeadershipListener
from broker.coordinator.loader import LoggedRecords, OffsetsLogSink
from broker.coordinator.offsets_records import OffsetCommitKey, OffsetCommitValue, partition_for
from broker.coordinator.offsets_store import OffsetsStore
from broker.protocol.api import ApiKey
from broker.protocol.control_records import ControlType
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.headers import RequestHeader
from broker.protocol.messages import FindCoordinatorRequest
from broker.protocol.records import Record, build_batch
from broker.replication.partition import Partition
from broker.server.context import BrokerServices, ConnectionInfo, RequestContext
from broker.server.handlers.groups import find_coordinator
from broker.storage import Log, LogConfig
from tests.support.polling import wait_for
from tests.unit.broker.coordinator.memory_store import running

NOW = 1_700_000_000_000
PROTOCOLS = [("range", b"meta")]


def config(tmp_path: Path, broker_id: int = 1, **extra: str) -> BrokerConfig:
    return BrokerConfig.from_properties({
        "broker.id": str(broker_id), "log.dirs": str(tmp_path / f"b{broker_id}"),
        "group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "2",
        "group.min.session.timeout.ms": "10", "offsets.retention.check.interval.ms": str(2**31 - 1), **extra})


def group_in(partition: int, prefix: str = "g") -> str:
    """A group id kept in `partition` of a 2-partition __consumer_offsets."""
    return next(f"{prefix}{i}" for i in range(1000) if partition_for(f"{prefix}{i}", 2) == partition)


class Replicas:
    """The replica manager as the offsets store sees it: hosted partitions by index."""

    def __init__(self) -> None:
        self.partitions: dict[int, Partition] = {}

    def get(self, topic: str, partition: int) -> Partition:
        assert topic == OFFSETS_TOPIC
        found = self.partitions.get(partition)
        if found is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return found


def open_log(tmp_path: Path, partition: int) -> Log:
    return Log.open(tmp_path / "logs" / f"{OFFSETS_TOPIC}-{partition}", LogConfig(), recovery_point=None, now_ms=NOW)


def leading(partition_log: Log, isr: tuple[int, ...]) -> tuple[Replicas, Partition]:
    """Broker 1's replicas, leading __consumer_offsets-0 (epoch 0) on `partition_log`, with broker
    2 as its follower and `isr` as its in-sync replicas."""
    replicas = Replicas()
    leader = Partition(OFFSETS_TOPIC, 0, partition_log, leader_epoch=0, is_leader=True, broker_id=1,
                       replicas=(1, 2), isr=isr)
    replicas.partitions[0] = leader
    return replicas, leader


def coordinator(cfg: BrokerConfig, replicas: Replicas) -> GroupCoordinator:
    # No __consumer_offsets in the metadata: the partition count is the config's.
    store = OffsetsStore(cfg, Controller({}, []), replicas)  # type: ignore[arg-type]
    made = GroupCoordinator.over(cfg, store)
    listener: LeadershipListener = made  # what the replica manager will call
    assert listener is made
    return made


async def join(c: GroupCoordinator, group_id: str, member_id: str = "", session_ms: int = 10_000) -> JoinResult:
    return await c.join(group_id, member_id, None, "client", "127.0.0.1", session_ms, 30_000, "consumer", PROTOCOLS,
                        require_known_member_id=False)


COMMITTED_AT = now_ms()


def commit_value(offset: int) -> OffsetCommitValue:
    return OffsetCommitValue(offset, "", COMMITTED_AT, -1, -1)


async def expect(code: ErrorCode, awaitable: object) -> None:
    with pytest.raises(KafkaError) as exc:
        await awaitable  # type: ignore[misc]
    assert exc.value.code == code


async def test_a_partition_moves_between_coordinators_with_its_groups(tmp_path: Path) -> None:
    # The real clock: loads wait for worker threads, and a fake clock would jump meanwhile.
    logs = [open_log(tmp_path, 0), open_log(tmp_path, 1)]
    on_a, on_b = Replicas(), Replicas()
    on_a.partitions = {p: Partition(OFFSETS_TOPIC, p, logs[p], leader_epoch=0, is_leader=True, broker_id=1)
                       for p in (0, 1)}
    a = coordinator(config(tmp_path, 1), on_a)
    b = coordinator(config(tmp_path, 2), on_b)
    g0, g1 = group_in(0), group_in(1)
    async with trio.open_nursery() as nursery:
        a.on_became_leader(OFFSETS_TOPIC, 0, 0)
        a.on_became_leader(OFFSETS_TOPIC, 1, 0)
        a.on_became_leader("orders", 0, 0)  # other topics are not the coordinator's business
        await nursery.start(a.run)
        await nursery.start(b.run)
        assert a.led_partitions() == {0: True, 1: True} and b.led_partitions() == {}

        first = await join(a, g1, session_ms=2000)
        await a.sync(g1, first.generation, first.member_id, None, {first.member_id: b"assigned"})
        await a.commit(g1, first.generation, first.member_id, None, {("orders", 0): commit_value(42)})
        await a.commit(g0, -1, "", None, {("orders", 1): commit_value(7)})
        # B does not lead either partition: it coordinates neither group.
        await expect(ErrorCode.NOT_COORDINATOR, join(b, g1))
        with pytest.raises(KafkaError) as exc:
            b.fetch_offsets(g0, None)
        assert exc.value.code == ErrorCode.NOT_COORDINATOR

        # A second member's join parks A's rebalance: the first member has not rejoined yet.
        parked: list[ErrorCode] = []

        async def second_member() -> None:
            try:
                await join(a, g1)
            except KafkaError as exc:
                parked.append(exc.code)

        nursery.start_soon(second_member)
        await trio.testing.wait_all_tasks_blocked()
        assert a.groups[g1].state == GroupState.PREPARING_REBALANCE

        # Partition 1 moves to broker 2 in epoch 1 (A becomes its follower, B its leader).
        on_a.partitions[1].make_follower(PartitionInfo(1, 2, 1, (1, 2), (2,)))
        a.on_resigned(OFFSETS_TOPIC, 1, 1)
        on_b.partitions[1] = Partition(OFFSETS_TOPIC, 1, logs[1], leader_epoch=1, is_leader=True, broker_id=2)
        b.on_became_leader(OFFSETS_TOPIC, 1, 1)
        await b.wait_loaded()
        await trio.testing.wait_all_tasks_blocked()

        assert parked == [ErrorCode.NOT_COORDINATOR]  # the parked join learns at once
        assert g1 not in a.groups and a.led_partitions() == {0: True}
        with pytest.raises(KafkaError) as exc:
            a.heartbeat(g1, first.generation, first.member_id, None)
        assert exc.value.code == ErrorCode.NOT_COORDINATOR
        await expect(ErrorCode.NOT_COORDINATOR,
                     a.commit(g1, first.generation, first.member_id, None, {("orders", 0): commit_value(43)}))

        # B took the group as A last wrote it: its generation, its member, its offsets.
        moved = b.groups[g1]
        assert moved.state == GroupState.STABLE and moved.generation == first.generation
        assert list(moved.members) == [first.member_id] and moved.members[first.member_id].assignment == b"assigned"
        assert b.fetch_offsets(g1, None) == {("orders", 0): commit_value(42)}
        b.heartbeat(g1, first.generation, first.member_id, None)
        await b.commit(g1, first.generation, first.member_id, None, {("orders", 0): commit_value(44)})
        assert b.fetch_offsets(g1, [("orders", 0)]) == {("orders", 0): commit_value(44)}
        # A still coordinates the group of the partition it kept; B does not.
        assert a.fetch_offsets(g0, None) == {("orders", 1): commit_value(7)}
        await expect(ErrorCode.NOT_COORDINATOR, b.commit(g0, -1, "", None, {("orders", 1): commit_value(8)}))
        assert b.coordinator_error(g0) == ErrorCode.NOT_COORDINATOR

        # A missed session timeout on B ends the member there, as if it had always lived on B.
        await wait_for(lambda: b.groups[g1].state == GroupState.EMPTY, what="the member's session to end on B",
                       timeout_s=10)
        nursery.cancel_scope.cancel()


def fill(partition_log: Log, group_id: str, batches: int, per_batch: int) -> None:
    value = commit_value(0).encode()
    for i in range(batches):
        records = [Record(OffsetCommitKey(group_id, "orders", i * per_batch + j).encode(), value)
                   for j in range(per_batch)]
        partition_log.append_as_leader(build_batch(records, base_timestamp=NOW), leader_epoch=0, now_ms=NOW)


async def test_requests_wait_for_a_large_partition_to_load_off_the_loop(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(offsets_store, "READ_CHUNK", 16 << 10)  # many chunks, each in a worker thread
    partition_log = open_log(tmp_path, 1)
    g1 = group_in(1)
    fill(partition_log, g1, batches=400, per_batch=50)  # 20,000 commits, about 1.5 MB
    replicas = Replicas()
    replicas.partitions[1] = Partition(OFFSETS_TOPIC, 1, partition_log, leader_epoch=3, is_leader=True, broker_id=2)
    c = coordinator(config(tmp_path, 2), replicas)
    async with running(c):
        c.on_became_leader(OFFSETS_TOPIC, 1, 3)
        assert c.led_partitions() == {1: False} and c.is_loading
        await expect(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, join(c, g1))
        await expect(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                     c.commit(g1, -1, "", None, {("orders", 0): commit_value(1)}))
        with pytest.raises(KafkaError) as exc:
            c.fetch_offsets(g1, None)
        assert exc.value.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        c.heartbeat(g1, 1, "someone", None)  # answered blindly while loading, as Kafka does
        # The loop keeps serving while the partition is read: count the turns it takes meanwhile.
        turns = 0
        while c.coordinator_error(g1) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            turns += 1
            await trio.sleep(0.001)
        assert turns > 1
        assert not c.is_loading and c.led_partitions() == {1: True}
        assert len(c.fetch_offsets(g1, None)) == 20_000


async def test_resigning_while_loading_abandons_the_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(offsets_store, "READ_CHUNK", 16 << 10)
    partition_log = open_log(tmp_path, 0)
    g0 = group_in(0)
    fill(partition_log, g0, batches=200, per_batch=50)
    replicas = Replicas()
    replicas.partitions[0] = Partition(OFFSETS_TOPIC, 0, partition_log, leader_epoch=0, is_leader=True, broker_id=1)
    cfg = config(tmp_path)
    store = OffsetsStore(cfg, Controller({}, []), replicas)  # type: ignore[arg-type]
    chunks: list[int] = []
    began, ended = trio.Event(), trio.Event()

    class Counting:
        def __init__(self, sink: OffsetsLogSink) -> None:
            self.sink = sink

        def apply(self, records: LoggedRecords) -> None:
            chunks.append(len(list(records)))
            self.sink.apply(records)

        def apply_txn(self, producer_id: int, records: LoggedRecords) -> None:
            self.sink.apply_txn(producer_id, records)

        def end_txn(self, producer_id: int, commit: bool) -> None:
            self.sink.end_txn(producer_id, commit)

    async def replay(partition: int, sink: OffsetsLogSink, still_wanted: Callable[[], bool]) -> None:
        began.set()
        try:
            await store.replay_log(partition, Counting(sink), still_wanted)
        finally:
            ended.set()

    c = GroupCoordinator(cfg, store.write, replay)
    async with running(c):
        c.on_became_leader(OFFSETS_TOPIC, 0, 0)
        await began.wait()  # the first chunk is on its way
        c.on_resigned(OFFSETS_TOPIC, 0, 1)
        await c.wait_loaded()  # returns: nothing led is loading
        with trio.fail_after(10):
            await ended.wait()
        assert sum(chunks) < 10_000  # it stopped reading
        await trio.testing.wait_all_tasks_blocked()
        assert g0 not in c.groups and c.coordinator_error(g0) == ErrorCode.NOT_COORDINATOR
        # Leader again in a newer epoch: loaded afresh.
        c.on_became_leader(OFFSETS_TOPIC, 0, 2)
        await c.wait_loaded()
        assert len(c.fetch_offsets(g0, None)) == 10_000
        # A stale resignation (an older epoch than ours) changes nothing.
        c.on_resigned(OFFSETS_TOPIC, 0, 1)
        assert c.coordinator_error(g0) == ErrorCode.NONE


async def test_commits_wait_for_the_isr_and_fail_over_to_not_coordinator(tmp_path: Path,
                                                                         autojump_clock: object) -> None:
    partition_log = open_log(tmp_path, 0)
    replicas, leader = leading(partition_log, isr=(1, 2))
    c = coordinator(config(tmp_path, **{"offsets.commit.timeout.ms": "5000"}), replicas)
    g0 = group_in(0)
    done: list[ErrorCode] = []

    async def commit(offset: int) -> None:
        try:
            await c.commit(g0, -1, "", None, {("orders", 0): commit_value(offset)})
            done.append(ErrorCode.NONE)
        except KafkaError as exc:
            done.append(exc.code)

    async with trio.open_nursery() as nursery:
        c.on_became_leader(OFFSETS_TOPIC, 0, 0)
        await nursery.start(c.run)
        nursery.start_soon(commit, 1)
        await trio.testing.wait_all_tasks_blocked()
        assert done == [] and partition_log.log_end_offset == 1  # in the leader's log, not yet in the ISR's
        leader.update_follower_fetch(2, partition_log.log_end_offset, 0)  # the follower has it
        await trio.testing.wait_all_tasks_blocked()
        assert done == [ErrorCode.NONE] and c.fetch_offsets(g0, None) == {("orders", 0): commit_value(1)}

        # The follower stops fetching: the commit times out after offsets.commit.timeout.ms, and
        # is not taken into the group's offsets.
        await commit(2)
        assert done[-1] == ErrorCode.REQUEST_TIMED_OUT
        assert c.fetch_offsets(g0, None) == {("orders", 0): commit_value(1)}

        # Losing leadership while a commit waits: NOT_COORDINATOR, so the client looks again.
        nursery.start_soon(commit, 3)
        await trio.testing.wait_all_tasks_blocked()
        leader.make_follower(PartitionInfo(0, 2, 1, (1, 2), (2,)))
        c.on_resigned(OFFSETS_TOPIC, 0, 1)
        await trio.testing.wait_all_tasks_blocked()
        assert done[-1] == ErrorCode.NOT_COORDINATOR
        nursery.cancel_scope.cancel()


async def test_commits_below_min_insync_replicas_are_refused(tmp_path: Path, autojump_clock: object) -> None:
    partition_log = Log.open(tmp_path / f"{OFFSETS_TOPIC}-0", LogConfig(min_insync_replicas=2), recovery_point=None,
                             now_ms=NOW)
    replicas, _ = leading(partition_log, isr=(1,))
    c = coordinator(config(tmp_path), replicas)
    g0 = group_in(0)
    async with trio.open_nursery() as nursery:
        c.on_became_leader(OFFSETS_TOPIC, 0, 0)
        await nursery.start(c.run)
        # Kafka's coordinator answers NOT_ENOUGH_REPLICAS as COORDINATOR_NOT_AVAILABLE; nothing written.
        await expect(ErrorCode.COORDINATOR_NOT_AVAILABLE, c.commit(g0, -1, "", None, {("orders", 0): commit_value(1)}))
        assert partition_log.log_end_offset == 0
        nursery.cancel_scope.cancel()


class Controller:
    def __init__(self, topics: dict[str, TopicInfo], brokers: list[BrokerInfo]) -> None:
        self._topics, self._brokers = topics, brokers

    def topics(self) -> dict[str, TopicInfo]:
        return self._topics

    def brokers(self) -> list[BrokerInfo]:
        return self._brokers


def request_context(cfg: BrokerConfig, controller: Controller, groups: GroupCoordinator, version: int,
                    listener: str = "PLAINTEXT") -> RequestContext:
    services = BrokerServices(cfg, controller, None, groups)  # type: ignore[arg-type]
    return RequestContext(services, RequestHeader(ApiKey.FIND_COORDINATOR, version, 1, "test"),
                          ConnectionInfo(listener, "127.0.0.1:1", "PLAINTEXT"))


async def test_find_coordinator_names_the_leader_of_the_groups_partition(tmp_path: Path) -> None:
    cfg = config(tmp_path, 1)
    brokers = [BrokerInfo(b, (ListenerSpec("PLAINTEXT", "127.0.0.1", 9090 + b),
                              ListenerSpec("REPL", "10.0.0.1", 9190 + b))) for b in (1, 2)]
    topic = TopicInfo(OFFSETS_TOPIC, uuid.uuid4(), (PartitionInfo(0, 1, 4, (1, 2), (1, 2)),
                                                    PartitionInfo(1, 2, 7, (2, 1), (2, 1))))
    controller = Controller({OFFSETS_TOPIC: topic}, brokers)
    groups = GroupCoordinator(cfg, Replicas().get)  # type: ignore[arg-type]  # never writes here
    g0, g1 = group_in(0), group_in(1)

    answer = await find_coordinator(request_context(cfg, controller, groups, 4),
                                    FindCoordinatorRequest(key_type=0, coordinator_keys=[g0, g1]))
    assert [(c.key, c.node_id, c.host, c.port, c.error_code) for c in answer.coordinators] == [
        (g0, 1, "127.0.0.1", 9091, 0), (g1, 2, "127.0.0.1", 9092, 0)]
    # The address on the listener the request came in on.
    old = await find_coordinator(request_context(cfg, controller, groups, 3, "REPL"),
                                 FindCoordinatorRequest(key_type=0, key=g1))
    assert (old.node_id, old.host, old.port, old.error_code) == (2, "10.0.0.1", 9192, 0)

    # A partition without a leader, or no __consumer_offsets yet: COORDINATOR_NOT_AVAILABLE.
    topic = TopicInfo(OFFSETS_TOPIC, topic.topic_id, (topic.partitions[0], PartitionInfo(1, -1, 8, (2, 1), ())))
    for state in ({OFFSETS_TOPIC: topic}, {}):
        controller = Controller(state, brokers)
        answer = await find_coordinator(request_context(cfg, controller, groups, 4),
                                        FindCoordinatorRequest(key_type=0, coordinator_keys=[g1]))
        (only,) = answer.coordinators
        assert (only.node_id, only.error_code) == (-1, ErrorCode.COORDINATOR_NOT_AVAILABLE), only.error_message


async def test_the_topics_own_partition_count_places_groups(tmp_path: Path) -> None:
    """`__consumer_offsets` made under another offsets.topic.num.partitions (3 here, the config
    says 2): groups stay where they were written, and FindCoordinator agrees with the coordinator."""
    cfg = config(tmp_path, 1)
    brokers = [BrokerInfo(b, (ListenerSpec("PLAINTEXT", "127.0.0.1", 9090 + b),)) for b in (1, 2, 3)]
    topic = TopicInfo(OFFSETS_TOPIC, uuid.uuid4(), tuple(PartitionInfo(p, p + 1, 0, (p + 1,), (p + 1,))
                                                         for p in range(3)))
    groups = GroupCoordinator(cfg, Replicas().get, Replicas().get, lambda: 3)  # type: ignore[arg-type]
    group_id = next(f"g{i}" for i in range(1000) if partition_for(f"g{i}", 3) == 2 and partition_for(f"g{i}", 2) != 2)
    assert groups.partition_of(group_id) == 2
    answer = await find_coordinator(request_context(cfg, Controller({OFFSETS_TOPIC: topic}, brokers), groups, 4),
                                    FindCoordinatorRequest(key_type=0, coordinator_keys=[group_id]))
    assert [(c.node_id, c.error_code) for c in answer.coordinators] == [(3, 0)]


async def test_a_load_that_fails_is_retried_while_the_broker_serves(tmp_path: Path, autojump_clock: object) -> None:
    attempts: list[float] = []
    g0 = group_in(0)

    async def replay(partition: int, sink: OffsetsLogSink, still_wanted: Callable[[], bool]) -> None:
        attempts.append(trio.current_time())
        if len(attempts) < 3:
            raise OSError(5, "Input/output error")
        sink.apply([(0, OffsetCommitKey(g0, "orders", 0).encode(), commit_value(5).encode())])

    c = GroupCoordinator(config(tmp_path), Replicas().get, replay)  # type: ignore[arg-type]
    c.on_became_leader(OFFSETS_TOPIC, 0, 0)
    async with trio.open_nursery() as nursery:
        await nursery.start(c.run)  # started after the first attempt, failed or not: no hang
        assert len(attempts) == 1 and c.coordinator_error(g0) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        await c.wait_loaded()
        assert len(attempts) == 3 and attempts[2] - attempts[1] > attempts[1] - attempts[0] > 0  # backing off
        assert c.fetch_offsets(g0, None) == {("orders", 0): commit_value(5)}
        nursery.cancel_scope.cancel()


async def test_a_write_waiting_for_the_isr_does_not_hold_up_other_groups_timers(tmp_path: Path,
                                                                                autojump_clock: object) -> None:
    partition_log = open_log(tmp_path, 0)
    replicas, leader = leading(partition_log, isr=(1,))
    c = coordinator(config(tmp_path), replicas)
    x, y = group_in(0, "x"), group_in(0, "y")
    async with trio.open_nursery() as nursery:
        c.on_became_leader(OFFSETS_TOPIC, 0, 0)
        await nursery.start(c.run)
        for group_id, session_ms in ((x, 1000), (y, 3000)):
            member = await join(c, group_id, session_ms=session_ms)
            await c.sync(group_id, member.generation, member.member_id, None, {})
        leader.isr = (1, 2)  # a follower joined the ISR, and stopped fetching: nothing commits now
        # x's member times out at 1 s: the group empties and its metadata waits for the ISR (up
        # to offsets.commit.timeout.ms, 5 s). y's member must still time out at 3 s meanwhile.
        await trio.sleep(3.5)
        assert c.groups[x].state == GroupState.EMPTY and c.groups[y].state == GroupState.EMPTY
        nursery.cancel_scope.cancel()


async def test_a_damaged_batch_is_skipped_and_the_rest_loads(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path, 0)
    g0 = group_in(0)
    for partition, offset in ((0, 1), (1, 2), (2, 3)):
        record = Record(OffsetCommitKey(g0, "orders", partition).encode(), commit_value(offset).encode())
        partition_log.append_as_leader(build_batch([record], base_timestamp=NOW), leader_epoch=0, now_ms=NOW)
    segment = partition_log.segments[0]
    found = segment.find(1)
    assert found is not None
    position, header = found
    data = bytearray(segment.path.read_bytes())  # noqa: ASYNC240 - a test's small file
    data[position + header.size - 1] ^= 0xFF  # one flipped byte inside the second batch
    segment.path.write_bytes(bytes(data))  # noqa: ASYNC240
    replicas = Replicas()
    replicas.partitions[0] = Partition(OFFSETS_TOPIC, 0, partition_log, leader_epoch=0, is_leader=True, broker_id=1)
    c = coordinator(config(tmp_path), replicas)
    c.on_became_leader(OFFSETS_TOPIC, 0, 0)
    async with running(c):
        assert c.fetch_offsets(g0, None) == {("orders", 0): commit_value(1), ("orders", 2): commit_value(3)}


async def hand_over(partition_log: Log, old: tuple[Replicas, GroupCoordinator], new: tuple[Replicas, GroupCoordinator],
                    epoch: int, new_broker: int = 2) -> None:
    """__consumer_offsets-0 moves from the old (broker, coordinator) to the new one, broker
    `new_broker` of (1, 2), in `epoch`; returns once the new coordinator loaded it."""
    (old_replicas, old_c), (new_replicas, new_c) = old, new
    old_replicas.partitions[0].make_follower(PartitionInfo(0, new_broker, epoch, (1, 2), (new_broker,)))
    old_c.on_resigned(OFFSETS_TOPIC, 0, epoch)
    new_replicas.partitions[0] = Partition(OFFSETS_TOPIC, 0, partition_log, leader_epoch=epoch, is_leader=True,
                                           broker_id=new_broker)
    new_c.on_became_leader(OFFSETS_TOPIC, 0, epoch)
    await new_c.wait_loaded()


async def test_transactional_offset_commits_survive_a_coordinator_move(tmp_path: Path) -> None:
    # TxnOffsetCommit writes to the log at once; the marker decides. Producer 7 commits before
    # the move, 9 aborts before it, 8's marker comes after the move, to the new coordinator, and
    # 10's while the new coordinator is loading.
    partition_log = open_log(tmp_path, 0)
    on_a, on_b = Replicas(), Replicas()
    on_a.partitions[0] = Partition(OFFSETS_TOPIC, 0, partition_log, leader_epoch=0, is_leader=True, broker_id=1)
    a = coordinator(config(tmp_path, 1), on_a)
    cfg_b = config(tmp_path, 2)
    store_b = OffsetsStore(cfg_b, Controller({}, []), on_b)  # type: ignore[arg-type]

    async def replay_then_marker(partition: int, sink: OffsetsLogSink, still_wanted: Callable[[], bool]) -> None:
        await store_b.replay_log(partition, sink, still_wanted)
        await marker(on_b, b, 10, ControlType.COMMIT)  # past the end the load read

    b = GroupCoordinator(cfg_b, store_b.write, replay_then_marker, append_txn=store_b.append_txn)
    g0 = group_in(0)

    async def marker(on: Replicas, c: GroupCoordinator, producer_id: int, control: ControlType) -> None:
        on.partitions[0].append_marker(control, producer_id=producer_id, producer_epoch=0, coordinator_epoch=0,
                                       now_ms=now_ms())
        await c.complete_txn(producer_id, 0, control == ControlType.COMMIT)

    async with trio.open_nursery() as nursery:
        a.on_became_leader(OFFSETS_TOPIC, 0, 0)
        await nursery.start(a.run)
        await nursery.start(b.run)
        await a.wait_loaded()
        for producer_id, offset in ((7, 10), (8, 20), (9, 30), (10, 40)):
            await a.txn_commit(g0, producer_id, 0, -1, "", None, {("orders", producer_id): commit_value(offset)})
        assert a.fetch_offsets(g0, None) == {}  # nothing visible before a marker
        await marker(on_a, a, 7, ControlType.COMMIT)
        await marker(on_a, a, 9, ControlType.ABORT)
        assert a.fetch_offsets(g0, None) == {("orders", 7): commit_value(10)}

        await hand_over(partition_log, (on_a, a), (on_b, b), 1)
        assert b.fetch_offsets(g0, None) == {("orders", 7): commit_value(10), ("orders", 10): commit_value(40)}
        assert b.pending_txn_offsets(g0) == {("orders", 8)}  # require_stable: UNSTABLE_OFFSET_COMMIT
        await marker(on_b, b, 8, ControlType.COMMIT)
        assert b.fetch_offsets(g0, None) == {("orders", 7): commit_value(10), ("orders", 8): commit_value(20),
                                             ("orders", 10): commit_value(40)}
        assert b.pending_txn_offsets(g0) == set()
        nursery.cancel_scope.cancel()


async def test_the_later_record_wins_between_plain_and_transactional_commits(tmp_path: Path) -> None:
    # As Kafka: a pending transactional offset becomes the committed one at its COMMIT marker
    # only if it was written after the partition's last plain commit. orders-0: TxnOffsetCommit
    # (producer 7), then a plain OffsetCommit, then 7's marker: the plain one stays. orders-1:
    # plain, then TxnOffsetCommit (producer 8): 8's marker wins. orders-2: producer 9's offset
    # is deleted (OffsetDelete) before its marker: nothing comes back. 7's marker lands before
    # a coordinator move, 8's and 9's after it, on the coordinator that loaded the log.
    partition_log = open_log(tmp_path, 0)
    on_a, on_b = Replicas(), Replicas()
    on_a.partitions[0] = Partition(OFFSETS_TOPIC, 0, partition_log, leader_epoch=0, is_leader=True, broker_id=1)
    a, b = coordinator(config(tmp_path, 1), on_a), coordinator(config(tmp_path, 2), on_b)
    g0 = group_in(0)

    async def marker(on: Replicas, c: GroupCoordinator, producer_id: int) -> None:
        on.partitions[0].append_marker(ControlType.COMMIT, producer_id=producer_id, producer_epoch=0,
                                       coordinator_epoch=0, now_ms=now_ms())
        await c.complete_txn(producer_id, 0, True)

    final = {("orders", 0): commit_value(20), ("orders", 1): commit_value(40)}
    async with trio.open_nursery() as nursery:
        a.on_became_leader(OFFSETS_TOPIC, 0, 0)
        await nursery.start(a.run)
        await nursery.start(b.run)
        await a.wait_loaded()
        await a.txn_commit(g0, 7, 0, -1, "", None, {("orders", 0): commit_value(10)})
        await a.commit(g0, -1, "", None, {("orders", 0): commit_value(20), ("orders", 1): commit_value(30)})
        await a.txn_commit(g0, 8, 0, -1, "", None, {("orders", 1): commit_value(40)})
        await a.txn_commit(g0, 9, 0, -1, "", None, {("orders", 2): commit_value(50)})
        assert await a.delete_offsets(g0, [("orders", 2)]) == {("orders", 2): ErrorCode.NONE}
        assert a.pending_txn_offsets(g0) == {("orders", 0), ("orders", 1)}  # 9's went with the tombstone
        await marker(on_a, a, 7)
        assert a.fetch_offsets(g0, None) == {("orders", 0): commit_value(20), ("orders", 1): commit_value(30)}

        await hand_over(partition_log, (on_a, a), (on_b, b), 1)
        assert b.fetch_offsets(g0, None) == {("orders", 0): commit_value(20), ("orders", 1): commit_value(30)}
        assert b.pending_txn_offsets(g0) == {("orders", 1)}  # 9's was deleted: not loaded as pending
        await marker(on_b, b, 8)
        await marker(on_b, b, 9)
        assert b.fetch_offsets(g0, None) == final

        # A third coordinator reads every marker from the log: the same outcome.
        await hand_over(partition_log, (on_b, b), (on_a, a), 2, new_broker=1)
        assert a.fetch_offsets(g0, None) == final and a.pending_txn_offsets(g0) == set()
        nursery.cancel_scope.cancel()
