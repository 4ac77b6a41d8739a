"""The group state machine with a fake clock: Kafka's error codes for every misbehaving member."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from broker.config import BrokerConfig
from broker.coordinator.coordinator import GroupCoordinator, JoinResult, MemberIdRequired
from broker.coordinator.group import GroupState, Member, Reply
from broker.coordinator.offsets_records import OffsetCommitValue
from broker.protocol.errors import ErrorCode, KafkaError
from tests.unit.broker.coordinator.memory_store import Store, coordinator, running

PROTOCOLS = [("range", b"meta-r"), ("roundrobin", b"meta-rr")]


async def join(c: GroupCoordinator, member_id: str = "", *, instance: str | None = None,
               protocols: list[tuple[str, bytes]] = PROTOCOLS, session_ms: int = 10_000) -> JoinResult:
    return await c.join("g", member_id, instance, "client", "127.0.0.1", session_ms, 30_000, "consumer",
                        protocols, require_known_member_id=False)


async def expect(code: ErrorCode, awaitable: object) -> None:
    with pytest.raises(KafkaError) as exc:
        await awaitable  # type: ignore[misc]
    assert exc.value.code == code


async def test_join_sync_heartbeat_and_the_errors_of_strangers(tmp_path: Path, autojump_clock: object) -> None:
    store = Store()
    c = coordinator(tmp_path, store)
    async with running(c):
        first = await join(c)
        assert first.generation == 1 and first.leader == first.member_id and first.protocol_name == "range"
        assert [m[0] for m in first.members] == [first.member_id]
        assert await c.sync("g", 1, first.member_id, None, {first.member_id: b"assignment"}) == (
            "consumer", "range", b"assignment")
        assert c.groups["g"].state == GroupState.STABLE
        c.heartbeat("g", 1, first.member_id, None)

        await expect(ErrorCode.UNKNOWN_MEMBER_ID, c.sync("g", 1, "nobody", None, {}))
        await expect(ErrorCode.ILLEGAL_GENERATION, c.sync("g", 0, first.member_id, None, {}))
        with pytest.raises(KafkaError) as exc:
            c.heartbeat("g", 1, "nobody", None)
        assert exc.value.code == ErrorCode.UNKNOWN_MEMBER_ID
        with pytest.raises(KafkaError) as exc:
            c.heartbeat("g", 7, first.member_id, None)
        assert exc.value.code == ErrorCode.ILLEGAL_GENERATION
        await expect(ErrorCode.UNKNOWN_MEMBER_ID, join(c, "made-up-id"))
        await expect(ErrorCode.INVALID_SESSION_TIMEOUT, join(c, session_ms=10))
        await expect(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, join(c, protocols=[("sticky-only", b"")]))


async def test_a_second_member_triggers_a_rebalance_and_both_get_the_new_generation(
    tmp_path: Path, autojump_clock: object
) -> None:
    c = coordinator(tmp_path, Store())
    async with running(c) as nursery:
        first = await join(c)
        await c.sync("g", 1, first.member_id, None, {first.member_id: b"all"})
        results: dict[str, JoinResult] = {}

        async def second() -> None:
            results["second"] = await join(c)

        nursery.start_soon(second)
        await trio.testing.wait_all_tasks_blocked()
        assert c.groups["g"].state == GroupState.PREPARING_REBALANCE
        with pytest.raises(KafkaError) as exc:
            c.heartbeat("g", 1, first.member_id, None)  # tells the first member to rejoin
        assert exc.value.code == ErrorCode.REBALANCE_IN_PROGRESS
        again = await join(c, first.member_id)
        await trio.testing.wait_all_tasks_blocked()
        assert again.generation == results["second"].generation == 2
        assert len(again.members) == 2  # the leader sees both members' metadata


async def test_a_member_that_stops_heartbeating_is_removed(tmp_path: Path, autojump_clock: object) -> None:
    c = coordinator(tmp_path, Store())
    async with running(c):
        first = await join(c, session_ms=6000)
        await c.sync("g", 1, first.member_id, None, {})
        await trio.sleep(5)
        c.heartbeat("g", 1, first.member_id, None)
        await trio.sleep(7)  # past the session timeout with no heartbeat
        assert first.member_id not in c.groups["g"].members
        assert c.groups["g"].state == GroupState.EMPTY


async def test_member_id_required_then_static_fencing(tmp_path: Path, autojump_clock: object) -> None:
    c = coordinator(tmp_path, Store())
    async with running(c):
        with pytest.raises(MemberIdRequired) as required:
            await c.join("g", "", None, "client", "h", 10_000, 30_000, "consumer", PROTOCOLS,
                         require_known_member_id=True)
        given = required.value.member_id
        result = await c.join("g", given, None, "client", "h", 10_000, 30_000, "consumer", PROTOCOLS,
                              require_known_member_id=True)
        assert result.member_id == given

        static = await join(c, instance="pod-1")
        # The same instance comes back (a restarted pod): the old member id is fenced.
        replacement = await join(c, instance="pod-1")
        assert replacement.member_id != static.member_id
        with pytest.raises(KafkaError) as exc:
            c.heartbeat("g", replacement.generation, static.member_id, "pod-1")
        assert exc.value.code == ErrorCode.FENCED_INSTANCE_ID


async def test_offsets_commit_fetch_persist_and_reload(tmp_path: Path, autojump_clock: object) -> None:
    store = Store()
    c = coordinator(tmp_path, store)
    async with running(c):
        value = OffsetCommitValue(42, "meta", 1_700_000_000_000)
        await c.commit("g", -1, "", None, {("orders", 3): value})  # outside any generation: allowed when empty
        assert c.fetch_offsets("g", [("orders", 3), ("orders", 4)]) == {("orders", 3): value, ("orders", 4): None}
        member = await join(c)
        await expect(ErrorCode.UNKNOWN_MEMBER_ID, c.commit("g", -1, "", None, {("orders", 3): value}))
        await expect(ErrorCode.ILLEGAL_GENERATION, c.commit("g", 99, member.member_id, None, {}))
        await expect(ErrorCode.NON_EMPTY_GROUP, c.delete_group("g"))
        await c.leave("g", [(member.member_id, None)])

    reloaded = coordinator(tmp_path, Store())
    reloaded.load(store.replay())
    assert reloaded.fetch_offsets("g", None) == {("orders", 3): value}
    assert reloaded.groups["g"].generation == c.groups["g"].generation
    assert all(p == c.partition_of("g") for p, _, _ in store.records)


async def test_a_plain_commit_is_unstable_until_replicated(tmp_path: Path, autojump_clock: object) -> None:
    """Appended and waiting for the ISR, a plain commit is not in the cache yet: OffsetFetch with
    require_stable answers its partition UNSTABLE_OFFSET_COMMIT (Kafka's pending offset commits),
    so a reader that must see every commit made before it asked waits for it."""
    store, replicated = Store(), trio.Event()

    async def append(partition: int, records: list[tuple[bytes, bytes | None]]) -> int:
        first = await store.append(partition, records)  # in the log at once; acknowledged later
        await replicated.wait()
        return first

    c = GroupCoordinator(BrokerConfig.from_properties({"log.dirs": str(tmp_path)}), append)
    async with running(c) as nursery:
        nursery.start_soon(c.commit, "g", -1, "", None, {("orders", 0): OffsetCommitValue(7, "", 0),
                                                         ("orders", 1): OffsetCommitValue(8, "", 0)})
        await trio.testing.wait_all_tasks_blocked()
        assert len(store.records) == 2 and c.fetch_offsets("g", [("orders", 0)]) == {("orders", 0): None}
        assert c.unstable_offsets("g") == {("orders", 0), ("orders", 1)}
        replicated.set()
        await trio.testing.wait_all_tasks_blocked()
        assert c.unstable_offsets("g") == set() and c.fetch_offsets("g", [("orders", 0)])[("orders", 0)].offset == 7


async def test_deleted_groups_leave_tombstones(tmp_path: Path, autojump_clock: object) -> None:
    store = Store()
    c = coordinator(tmp_path, store)
    await c.commit("gone", -1, "", None, {("t", 0): OffsetCommitValue(1, "", 0)})
    await c.delete_group("gone")
    assert "gone" not in c.groups
    reloaded = coordinator(tmp_path, Store())
    reloaded.load(store.replay())
    assert "gone" not in reloaded.groups
    await expect(ErrorCode.GROUP_ID_NOT_FOUND, c.delete_group("gone"))


async def test_offsets_of_empty_groups_expire_after_retention(tmp_path: Path) -> None:
    store = Store()
    c = coordinator(tmp_path, store, **{"offsets.retention.minutes": "1"})
    await c.commit("old", -1, "", None, {("t", 0): OffsetCommitValue(5, "", commit_timestamp=0)})
    await c.commit("fresh", -1, "", None, {("t", 0): OffsetCommitValue(5, "", commit_timestamp=2**62)})
    await c._expire_offsets()
    assert c.fetch_offsets("old", None) == {}
    assert c.fetch_offsets("fresh", None) != {}
    assert store.records[-1][2] is None  # the expiry is written as a tombstone


async def test_an_offset_a_transaction_holds_does_not_expire(tmp_path: Path) -> None:
    # As Kafka: expiry leaves a partition alone while a transaction holds an offset for it, and
    # keeps the group; the transaction's COMMIT then makes its offset the committed one.
    store = Store()
    c = coordinator(tmp_path, store, **{"offsets.retention.minutes": "1"})
    old = OffsetCommitValue(5, "", commit_timestamp=0)
    await c.commit("g", -1, "", None, {("t", 0): old, ("t", 1): old})
    await c.txn_commit("g", 7, 0, -1, "", None, {("t", 0): OffsetCommitValue(9, "", commit_timestamp=0)})
    await c._expire_offsets()
    assert c.fetch_offsets("g", None) == {("t", 0): old}  # t-1 expired, t-0 held
    await c.complete_txn(7, c.partition_of("g"), True)
    assert c.fetch_offsets("g", None) == {("t", 0): OffsetCommitValue(9, "", commit_timestamp=0)}


def test_a_member_forgets_only_its_own_parked_reply() -> None:
    join, sync, other = Reply(), Reply(), Reply()
    member = Member("m", None, "c", "h", 10_000, 10_000, "consumer", [], join=join, sync=sync)
    assert not member.forget(other)
    assert member.forget(join) and member.join is None and member.sync is sync
    assert member.forget(sync) and member.sync is None
    assert not member.forget(sync)
