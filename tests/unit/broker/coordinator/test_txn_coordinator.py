"""The transaction coordinator's state machine over a `__transaction_state` kept in memory:
producer ids and epochs, fencing, two-phase ends with markers, timeouts, and a new leader
finishing a decided transaction from the log."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import trio
import trio.testing

from broker.config import BrokerConfig
from broker.coordinator.loader import Records
from broker.coordinator.txn_coordinator import Markers, TransactionCoordinator
from broker.coordinator.txn_records import TXN_STATE_TOPIC, TxnLogKey, decode_key, decode_value
from broker.coordinator.txn_state import TxnState
from broker.protocol.errors import ErrorCode, KafkaError
from tests.support.polling import wait_for

PARTITIONS = 4


class Log:
    """`__transaction_state` in memory: every record each partition was given, in order."""

    def __init__(self) -> None:
        self.records: dict[int, list[tuple[bytes, bytes | None]]] = {}

    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> None:
        self.records.setdefault(partition, []).extend(records)

    async def replay_partition(self, partition: int, sink: Callable[[Records], None],
                               still_wanted: Callable[[], bool]) -> None:
        sink(list(self.records.get(partition, [])))

    def partition_count(self) -> int | None:
        return PARTITIONS

    async def ensure_topic(self) -> None:
        pass

    def led_partitions(self) -> list[tuple[int, int]]:
        return []

    def states(self, transactional_id: str) -> list[str]:
        return [TxnState.from_id(decode_value(v).state_id).title for part in self.records.values()
                for k, v in part if v is not None and (key := decode_key(k)) is not None
                and key.transactional_id == transactional_id]


class Leaders:
    """Partition leaders that take markers; `down` ones fail until brought back."""

    def __init__(self) -> None:
        self.sent: list[Markers] = []
        self.down: set[tuple[str, int]] = set()

    async def __call__(self, markers: Markers) -> set[tuple[str, int]]:
        self.sent.append(markers)
        return set(markers.partitions) & self.down


def make(tmp_path: Path, log: Log, leaders: Leaders, **extra: str) -> TransactionCoordinator:
    ids = iter(range(1000, 2000))

    async def allocate() -> int:
        return next(ids)

    config = BrokerConfig.from_properties({"log.dirs": str(tmp_path), **extra})
    coordinator = TransactionCoordinator(config, log, allocate, leaders)
    for partition in range(PARTITIONS):
        coordinator.on_became_leader(TXN_STATE_TOPIC, partition, 7)
    return coordinator


async def start(nursery: trio.Nursery, coordinator: TransactionCoordinator) -> None:
    """Run it, its partitions loaded."""
    await nursery.start(coordinator.run)
    await trio.testing.wait_all_tasks_blocked()


async def settle(coordinator: TransactionCoordinator, transactional_id: str) -> None:
    """Until the id's transaction is decided and complete (markers written)."""
    def done() -> bool:
        txn = coordinator.txns[transactional_id]
        return txn.pending is None and not txn.state.is_preparing

    await wait_for(done, what=f"{transactional_id}'s transaction to complete")


async def test_commit_writes_prepare_markers_then_complete(tmp_path: Path, autojump_clock: object) -> None:
    log, leaders = Log(), Leaders()
    coordinator = make(tmp_path, log, leaders)
    async with trio.open_nursery() as nursery:
        await start(nursery, coordinator)
        assert await coordinator.init_producer_id("t", 60000) == (1000, 0)
        assert await coordinator.init_producer_id("t", 60000) == (1000, 1)  # re-init bumps the epoch
        await coordinator.add_partitions("t", 1000, 1, {("a", 0), ("b", 2)})
        await coordinator.add_partitions("t", 1000, 1, {("a", 0)})  # already in: nothing written
        leaders.down = {("b", 2)}
        await coordinator.end_txn("t", 1000, 1, commit=True)
        with pytest.raises(KafkaError) as busy:
            await coordinator.add_partitions("t", 1000, 1, {("a", 1)})
        assert busy.value.code == ErrorCode.CONCURRENT_TRANSACTIONS
        await trio.sleep(1)
        leaders.down = set()  # the marker to b-2 is retried until its leader takes it
        await settle(coordinator, "t")
        assert coordinator.txns["t"].state == TxnState.COMPLETE_COMMIT
        await coordinator.end_txn("t", 1000, 1, commit=True)  # a retried EndTxn: NONE
        with pytest.raises(KafkaError) as wrong:
            await coordinator.end_txn("t", 1000, 1, commit=False)
        assert wrong.value.code == ErrorCode.INVALID_TXN_STATE
        nursery.cancel_scope.cancel()
    assert log.states("t") == ["Empty", "Empty", "Ongoing", "PrepareCommit", "CompleteCommit"]
    assert {m.coordinator_epoch for m in leaders.sent} == {7} and all(m.commit for m in leaders.sent)
    assert leaders.sent[-1].partitions == {("b", 2)}


async def test_a_new_producer_fences_the_old_and_aborts_its_transaction(tmp_path: Path,
                                                                        autojump_clock: object) -> None:
    log, leaders = Log(), Leaders()
    coordinator = make(tmp_path, log, leaders)
    async with trio.open_nursery() as nursery:
        await start(nursery, coordinator)
        pid, epoch = await coordinator.init_producer_id("t", 60000)
        await coordinator.add_partitions("t", pid, epoch, {("a", 0)})
        with pytest.raises(KafkaError) as retry:
            await coordinator.init_producer_id("t", 60000)
        assert retry.value.code == ErrorCode.CONCURRENT_TRANSACTIONS
        await settle(coordinator, "t")
        assert await coordinator.init_producer_id("t", 60000) == (pid, epoch + 2)
        for call in (coordinator.add_partitions("t", pid, epoch, {("a", 1)}),
                     coordinator.end_txn("t", pid, epoch, commit=True)):
            with pytest.raises(KafkaError) as fenced:
                await call
            assert fenced.value.code == ErrorCode.PRODUCER_FENCED
        with pytest.raises(KafkaError) as mapping:
            await coordinator.end_txn("t", pid + 1, epoch + 2, commit=True)
        assert mapping.value.code == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        nursery.cancel_scope.cancel()
    assert leaders.sent == [Markers(pid, epoch + 1, 7, False, frozenset({("a", 0)}))]
    assert log.states("t") == ["Empty", "Ongoing", "PrepareAbort", "CompleteAbort", "Empty"]


async def test_a_transaction_past_its_timeout_is_aborted(tmp_path: Path, autojump_clock: object,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # Transaction start times are wall-clock (Kafka's txnStartTimestamp): here, trio's fake clock.
    monkeypatch.setattr("broker.coordinator.txn_coordinator.now_ms", lambda: int(trio.current_time() * 1000))
    log, leaders = Log(), Leaders()
    coordinator = make(tmp_path, log, leaders)
    async with trio.open_nursery() as nursery:
        await start(nursery, coordinator)
        pid, epoch = await coordinator.init_producer_id("t", 1000)
        await coordinator.add_partitions("t", pid, epoch, {("a", 0)})
        await trio.sleep(15)  # past the timeout and one cleanup interval (10 s)
        nursery.cancel_scope.cancel()
    assert coordinator.txns["t"].state == TxnState.COMPLETE_ABORT
    assert coordinator.txns["t"].producer_epoch == epoch + 1
    # KIP-360: the producer recovers from its own epoch; any other producer or epoch is fenced.
    for wrong in ((pid + 1, epoch), (pid, epoch + 5)):
        with pytest.raises(KafkaError) as fenced:
            await coordinator.init_producer_id("t", 1000, wrong)
        assert fenced.value.code == ErrorCode.PRODUCER_FENCED
    assert await coordinator.init_producer_id("t", 1000, (pid, epoch)) == (pid, epoch + 2)


async def test_timeouts_beyond_the_maximum_are_refused(tmp_path: Path) -> None:
    coordinator = make(tmp_path, Log(), Leaders(), **{"transaction.max.timeout.ms": "5000"})
    for timeout in (0, 5001):
        with pytest.raises(KafkaError) as caught:
            await coordinator.init_producer_id("t", timeout)
        assert caught.value.code == ErrorCode.INVALID_TRANSACTION_TIMEOUT


async def test_ids_of_partitions_led_elsewhere_are_not_coordinator(tmp_path: Path) -> None:
    coordinator = make(tmp_path, Log(), Leaders())
    partition = coordinator.partition_of("t")
    coordinator.on_resigned(TXN_STATE_TOPIC, partition, 7)
    with pytest.raises(KafkaError) as caught:
        await coordinator.init_producer_id("t", 1000)
    assert caught.value.code == ErrorCode.NOT_COORDINATOR


async def test_a_new_leader_completes_a_prepared_transaction(tmp_path: Path, autojump_clock: object) -> None:
    log, leaders = Log(), Leaders()
    first = make(tmp_path, log, leaders)
    leaders.down = {("a", 0)}  # its markers never land while the first coordinator leads
    async with trio.open_nursery() as nursery:
        await start(nursery, first)
        pid, epoch = await first.init_producer_id("t", 60000)
        await first.add_partitions("t", pid, epoch, {("a", 0)})
        await first.end_txn("t", pid, epoch, commit=True)
        await trio.sleep(1)
        first.on_resigned(TXN_STATE_TOPIC, first.partition_of("t"), 7)
        nursery.cancel_scope.cancel()
    assert log.states("t")[-1] == "PrepareCommit"
    leaders.down = set()
    ids = iter(range(5000, 6000))

    async def allocate() -> int:
        return next(ids)

    second = TransactionCoordinator(BrokerConfig.from_properties({"log.dirs": str(tmp_path)}), log, allocate,
                                    leaders)
    async with trio.open_nursery() as nursery:
        await start(nursery, second)
        second.on_became_leader(TXN_STATE_TOPIC, second.partition_of("t"), 8)
        await wait_for(lambda: "t" in second.txns, what="the partition's load")
        await settle(second, "t")
        nursery.cancel_scope.cancel()
    assert log.states("t")[-1] == "CompleteCommit"
    assert leaders.sent[-1] == Markers(pid, epoch, 8, True, frozenset({("a", 0)}))


async def test_a_newer_epoch_of_the_same_leader_goes_on_with_it(tmp_path: Path, autojump_clock: object) -> None:
    """Still leader in a newer epoch (a reassignment): a load under way is not abandoned, and
    markers still being sent carry the new coordinator epoch."""
    log, leaders = Log(), Leaders()
    coordinator = make(tmp_path, log, leaders)
    partition = coordinator.partition_of("t")
    coordinator.on_became_leader(TXN_STATE_TOPIC, partition, 8)  # before its load ran
    async with trio.open_nursery() as nursery:
        await start(nursery, coordinator)
        pid, epoch = await coordinator.init_producer_id("t", 60000)
        await coordinator.add_partitions("t", pid, epoch, {("a", 0)})
        leaders.down = {("a", 0)}
        await coordinator.end_txn("t", pid, epoch, commit=True)
        await trio.sleep(1)
        coordinator.on_became_leader(TXN_STATE_TOPIC, partition, 9)
        leaders.down = set()
        await settle(coordinator, "t")
        nursery.cancel_scope.cancel()
    assert coordinator.txns["t"].state == TxnState.COMPLETE_COMMIT
    assert [m.coordinator_epoch for m in leaders.sent][0] == 8 and leaders.sent[-1].coordinator_epoch == 9


async def test_an_unused_id_expires_and_its_next_producer_starts_afresh(tmp_path: Path, autojump_clock: object,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("broker.coordinator.txn_coordinator.now_ms", lambda: int(trio.current_time() * 1000))
    log, leaders = Log(), Leaders()
    coordinator = make(tmp_path, log, leaders, **{"transactional.id.expiration.ms": "60000",
                                                  "transaction.remove.expired.transaction.cleanup.interval.ms": "1000"})
    async with trio.open_nursery() as nursery:
        await start(nursery, coordinator)
        old = await coordinator.init_producer_id("idle", 60000)
        pid, epoch = await coordinator.init_producer_id("busy", 60000)
        await coordinator.add_partitions("busy", pid, epoch, {("a", 0)})  # open: never expires
        await trio.sleep(70)
        assert "idle" not in coordinator.txns and "busy" in coordinator.txns
        assert log.records[coordinator.partition_of("idle")][-1] == (TxnLogKey("idle").encode(), None)
        fresh = await coordinator.init_producer_id("idle", 60000)
        nursery.cancel_scope.cancel()
    assert fresh[0] != old[0] and fresh[1] == 0


class SlowLeaders(Leaders):
    """Leaders that take each marker after `delay_s` (a replicated write's round trips)."""

    def __init__(self, delay_s: float) -> None:
        super().__init__()
        self.delay_s = delay_s

    async def __call__(self, markers: Markers) -> set[tuple[str, int]]:
        await trio.sleep(self.delay_s)
        return await super().__call__(markers)


async def test_the_next_transaction_waits_briefly_for_the_markers_of_the_last(tmp_path: Path,
                                                                             autojump_clock: object) -> None:
    log, leaders = Log(), SlowLeaders(0.03)
    coordinator = make(tmp_path, log, leaders)
    async with trio.open_nursery() as nursery:
        await start(nursery, coordinator)
        await coordinator.init_producer_id("t", 60000)
        await coordinator.add_partitions("t", 1000, 0, {("a", 0)})
        await coordinator.end_txn("t", 1000, 0, commit=True)
        # Asked while the markers are under way: answered once they are written, not refused.
        await coordinator.add_partitions("t", 1000, 0, {("a", 1)})
        assert coordinator.txns["t"].state == TxnState.ONGOING
        assert coordinator.txns["t"].partitions == {("a", 1)}
        # Markers that take longer than the wait: CONCURRENT_TRANSACTIONS, as Kafka answers.
        leaders.delay_s = 5.0
        await coordinator.end_txn("t", 1000, 0, commit=False)
        with pytest.raises(KafkaError) as busy:
            await coordinator.add_partitions("t", 1000, 0, {("a", 2)})
        assert busy.value.code == ErrorCode.CONCURRENT_TRANSACTIONS
        nursery.cancel_scope.cancel()
    assert log.states("t") == ["Empty", "Ongoing", "PrepareCommit", "CompleteCommit", "Ongoing", "PrepareAbort"]


async def test_end_txn_v5_bumps_the_epoch_at_every_end_and_recognises_its_retries(
        tmp_path: Path, autojump_clock: object) -> None:
    """KIP-890 part 2: the decision and its markers carry the next epoch, which is answered; a
    retried EndTxn names the epoch before; a new leader reads the transaction version back."""
    log, leaders = Log(), Leaders()
    coordinator = make(tmp_path, log, leaders)
    async with trio.open_nursery() as nursery:
        await start(nursery, coordinator)
        assert await coordinator.init_producer_id("tv2", 60000) == (1000, 0)
        await coordinator.add_partitions("tv2", 1000, 0, {("a", 0)})
        assert await coordinator.end_txn("tv2", 1000, 0, commit=True, bump_epoch=True) == (1000, 1)
        with pytest.raises(KafkaError) as busy:  # asked again while its markers are under way
            await coordinator.end_txn("tv2", 1000, 0, commit=True, bump_epoch=True)
        assert busy.value.code == ErrorCode.CONCURRENT_TRANSACTIONS
        await settle(coordinator, "tv2")
        assert [(m.producer_epoch, m.commit) for m in leaders.sent] == [(1, True)]
        assert await coordinator.end_txn("tv2", 1000, 0, commit=True, bump_epoch=True) == (1000, 1)  # a retry
        with pytest.raises(KafkaError) as other_way:
            await coordinator.end_txn("tv2", 1000, 0, commit=False, bump_epoch=True)
        assert other_way.value.code == ErrorCode.INVALID_TXN_STATE
        with pytest.raises(KafkaError) as ended:  # the bumped epoch has no transaction to end
            await coordinator.end_txn("tv2", 1000, 1, commit=True, bump_epoch=True)
        assert ended.value.code == ErrorCode.PRODUCER_FENCED
        with pytest.raises(KafkaError) as old:  # a write of the old epoch is fenced
            await coordinator.add_partitions("tv2", 1000, 0, {("a", 0)})
        assert old.value.code == ErrorCode.PRODUCER_FENCED
        await coordinator.add_partitions("tv2", 1000, 1, {("a", 0)})
        assert await coordinator.end_txn("tv2", 1000, 1, commit=False, bump_epoch=True) == (1000, 2)
        await settle(coordinator, "tv2")
        value = decode_value(log.records[coordinator.partition_of("tv2")][-1][1] or b"")
        assert (value.producer_epoch, value.client_transaction_version) == (2, 2)
        nursery.cancel_scope.cancel()
    # A new leader reads it back (value version 1): the retry is still recognised.
    again = make(tmp_path, log, Leaders())
    async with trio.open_nursery() as nursery:
        await start(nursery, again)
        assert await again.end_txn("tv2", 1000, 1, commit=False, bump_epoch=True) == (1000, 2)
        nursery.cancel_scope.cancel()


async def test_end_txn_v5_past_the_last_epoch_moves_to_a_new_producer_id(
        tmp_path: Path, autojump_clock: object) -> None:
    log, leaders = Log(), Leaders()
    coordinator = make(tmp_path, log, leaders)
    async with trio.open_nursery() as nursery:
        await start(nursery, coordinator)
        await coordinator.init_producer_id("last", 60000)
        coordinator.txns["last"].producer_epoch = 32766  # as after 32766 transactions
        await coordinator.add_partitions("last", 1000, 32766, {("a", 0)})
        assert await coordinator.end_txn("last", 1000, 32766, commit=True, bump_epoch=True) == (1001, 0)
        await settle(coordinator, "last")
        # The markers went out under the old producer id, at the epoch after its last.
        assert [(m.producer_id, m.producer_epoch) for m in leaders.sent] == [(1000, 32767)]
        txn = coordinator.txns["last"]
        assert (txn.producer_id, txn.producer_epoch, txn.previous_producer_id) == (1001, 0, 1000)
        assert await coordinator.end_txn("last", 1000, 32766, commit=True, bump_epoch=True) == (1001, 0)  # a retry
        await coordinator.add_partitions("last", 1001, 0, {("a", 0)})
        nursery.cancel_scope.cancel()


async def test_end_txn_before_v5_keeps_the_epoch(tmp_path: Path, autojump_clock: object) -> None:
    log, leaders = Log(), Leaders()
    coordinator = make(tmp_path, log, leaders)
    async with trio.open_nursery() as nursery:
        await start(nursery, coordinator)
        await coordinator.init_producer_id("tv0", 60000)
        await coordinator.add_partitions("tv0", 1000, 0, {("a", 0)})
        assert await coordinator.end_txn("tv0", 1000, 0, commit=True) == (1000, 0)
        await settle(coordinator, "tv0")
        assert await coordinator.end_txn("tv0", 1000, 0, commit=True) == (1000, 0)  # a retry
        value = decode_value(log.records[coordinator.partition_of("tv0")][-1][1] or b"")
        assert value.client_transaction_version == 0
        nursery.cancel_scope.cancel()
