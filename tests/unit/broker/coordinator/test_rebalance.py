"""Rebalances, static members, restarts, store failures and retention, on trio's fake clock."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from broker.coordinator.coordinator import GroupCoordinator, JoinResult, MemberIdRequired
from broker.coordinator.group import GroupState
from broker.coordinator.offsets_records import (
    GroupMetadataKey,
    OffsetCommitValue,
    decode_group_metadata,
    decode_key,
)
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.messages import ConsumerProtocolSubscription
from broker.protocol.primitives import Writer
from tests.unit.broker.coordinator.memory_store import Store, coordinator, running


def subscription(*topics: str) -> bytes:
    w = Writer()
    w.int16(0)
    ConsumerProtocolSubscription(topics=list(topics)).encode_into(w, 0)
    return bytes(w.buf)


PROTOCOLS = [("range", subscription("orders"))]


async def join(c: GroupCoordinator, member_id: str = "", *, instance: str | None = None,
               protocols: list[tuple[str, bytes]] = PROTOCOLS, session_ms: int = 10_000,
               rebalance_ms: int = 30_000, protocol_type: str = "consumer") -> JoinResult:
    return await c.join("g", member_id, instance, "client", "127.0.0.1", session_ms, rebalance_ms,
                        protocol_type, protocols, require_known_member_id=False)


async def code_of(awaitable: object) -> ErrorCode:
    with pytest.raises(KafkaError) as exc:
        await awaitable  # type: ignore[misc]
    return exc.value.code


async def stable_pair(c: GroupCoordinator, nursery: trio.Nursery) -> tuple[JoinResult, JoinResult]:
    """Two members in a Stable group (generation 2 after the second joined)."""
    first = await join(c, instance="a")
    await c.sync("g", first.generation, first.member_id, "a", {first.member_id: b"A"})
    results: dict[str, JoinResult] = {}

    async def second() -> None:
        results["b"] = await join(c, instance="b")

    nursery.start_soon(second)
    await trio.testing.wait_all_tasks_blocked()
    leader = await join(c, first.member_id, instance="a")
    await trio.testing.wait_all_tasks_blocked()
    follower = results["b"]
    assert leader.generation == follower.generation == 2 and leader.leader == leader.member_id

    async def follower_sync() -> None:
        await c.sync("g", 2, follower.member_id, "b", {})

    nursery.start_soon(follower_sync)
    await trio.testing.wait_all_tasks_blocked()
    await c.sync("g", 2, leader.member_id, "a", {leader.member_id: b"A", follower.member_id: b"B"})
    assert c.groups["g"].state == GroupState.STABLE
    return leader, follower


async def test_commits_are_taken_while_preparing_and_refused_while_completing(
    tmp_path: Path, autojump_clock: object
) -> None:
    c = coordinator(tmp_path, Store())
    value = OffsetCommitValue(5, "", 0)
    async with running(c) as nursery:
        first = await join(c)
        # CompletingRebalance: the member knows its generation but has no assignment yet.
        assert c.groups["g"].state == GroupState.COMPLETING_REBALANCE
        assert await code_of(c.commit("g", 1, first.member_id, None, {("t", 0): value})) == \
            ErrorCode.REBALANCE_IN_PROGRESS
        await c.sync("g", 1, first.member_id, None, {first.member_id: b""})
        nursery.start_soon(join, c)  # a newcomer starts a rebalance
        await trio.testing.wait_all_tasks_blocked()
        assert c.groups["g"].state == GroupState.PREPARING_REBALANCE  # type: ignore[comparison-overlap]
        # A member committing what it is about to give up: accepted, as Kafka does.
        await c.commit("g", 1, first.member_id, None, {("t", 0): value})
        assert c.fetch_offsets("g", [("t", 0)]) == {("t", 0): value}


async def test_a_static_member_that_comes_back_keeps_its_assignment_without_a_rebalance(
    tmp_path: Path, autojump_clock: object
) -> None:
    store = Store()
    c = coordinator(tmp_path, store)
    async with running(c) as nursery:
        leader, follower = await stable_pair(c, nursery)
        # The follower's process restarts and joins with an empty member id.
        back = await join(c, instance="b")
        assert back.member_id != follower.member_id and back.generation == 2 and back.members == []
        assert c.groups["g"].state == GroupState.STABLE
        assert await c.sync("g", 2, back.member_id, "b", {}) == ("consumer", "range", b"B")
        # The old incarnation is fenced everywhere.
        with pytest.raises(KafkaError) as exc:
            c.heartbeat("g", 2, follower.member_id, "b")
        assert exc.value.code == ErrorCode.FENCED_INSTANCE_ID
        assert await code_of(c.sync("g", 2, follower.member_id, "b", {})) == ErrorCode.FENCED_INSTANCE_ID
        assert await code_of(c.commit("g", 2, follower.member_id, "b", {})) == ErrorCode.FENCED_INSTANCE_ID

        # The leader comes back: it sees the members but must not reassign (KIP-814).
        leader_back = await join(c, instance="a")
        assert leader_back.skip_assignment and leader_back.leader == leader_back.member_id
        assert {m[0] for m in leader_back.members} == {leader_back.member_id, back.member_id}
        assert c.groups["g"].generation == 2
        # The replacement was written, so a restart knows the new member ids.
        last = decode_group_metadata(next(v for _, k, v in reversed(store.records)
                                          if isinstance(decode_key(k), GroupMetadataKey) and v))
        assert {m.member_id for m in last.members} == {leader_back.member_id, back.member_id}


async def test_a_restarted_coordinator_restores_members_and_their_sessions(
    tmp_path: Path, autojump_clock: object
) -> None:
    store = Store()
    c = coordinator(tmp_path, store)
    async with running(c) as nursery:
        leader, follower = await stable_pair(c, nursery)

    restarted = coordinator(tmp_path, Store())
    restarted.load(store.replay())
    group = restarted.groups["g"]
    assert group.state == GroupState.STABLE and group.generation == 2 and group.leader_id == leader.member_id
    assert group.static_members == {"a": leader.member_id, "b": follower.member_id}
    async with running(restarted):
        restarted.heartbeat("g", 2, leader.member_id, "a")  # carries on, no rejoin needed
        assert await restarted.sync("g", 2, follower.member_id, "b", {}) == ("consumer", "range", b"B")
        # Only the leader keeps heartbeating; the follower's session runs out.
        for _ in range(4):
            await trio.sleep(3)
            try:
                restarted.heartbeat("g", group.generation, leader.member_id, "a")
            except KafkaError as exc:
                assert exc.code == ErrorCode.REBALANCE_IN_PROGRESS
        assert follower.member_id not in group.members


async def test_a_failed_store_is_mapped_and_never_takes_the_coordinator_down(
    tmp_path: Path, autojump_clock: object
) -> None:
    store = Store()
    c = coordinator(tmp_path, store)
    async with running(c):
        first = await join(c, session_ms=6000)
        store.fail = ErrorCode.MESSAGE_TOO_LARGE
        assert await code_of(c.sync("g", 1, first.member_id, None, {first.member_id: b"x"})) == \
            ErrorCode.UNKNOWN_SERVER_ERROR
        assert c.groups["g"].state == GroupState.PREPARING_REBALANCE  # the rebalance starts over
        assert await code_of(c.commit("g", -1, "", None, {("t", 0): OffsetCommitValue(1, "", 0)})) == \
            ErrorCode.UNKNOWN_MEMBER_ID
        store.fail = ErrorCode.NOT_LEADER_OR_FOLLOWER
        # The member goes silent; the timer task empties the group although the store keeps failing.
        await trio.sleep(60)
        assert c.groups["g"].state == GroupState.EMPTY  # type: ignore[comparison-overlap]
        assert await code_of(c.commit("g", -1, "", None, {("t", 0): OffsetCommitValue(1, "", 0)})) == \
            ErrorCode.NOT_COORDINATOR
        store.fail = ErrorCode.RECORD_LIST_TOO_LARGE
        assert await code_of(c.commit("g", -1, "", None, {("t", 0): OffsetCommitValue(1, "", 0)})) == \
            ErrorCode.INVALID_COMMIT_OFFSET_SIZE
        assert c.fetch_offsets("g", None) == {}  # nothing acknowledged that was not written


async def test_hostile_joins_get_kafkas_errors(tmp_path: Path, autojump_clock: object) -> None:
    c = coordinator(tmp_path, Store(), **{"message.max.bytes": "1000"})
    async with running(c):
        assert await code_of(join(c, protocols=[("range", b"x" * 2000)])) == ErrorCode.INVALID_REQUEST
        assert await code_of(join(c, protocols=[])) == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        assert await code_of(join(c, protocol_type="")) == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        assert await code_of(c.join("", "", None, "c", "h", 10_000, 1, "consumer", PROTOCOLS,
                                    require_known_member_id=False)) == ErrorCode.INVALID_GROUP_ID
        assert await code_of(join(c, session_ms=10**9)) == ErrorCode.INVALID_SESSION_TIMEOUT
        first = await join(c)
        assert await code_of(join(c, protocol_type="connect")) == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        # SyncGroup v5 naming another protocol than the group's.
        assert await code_of(c.sync("g", 1, first.member_id, None, {}, "consumer", "roundrobin")) == \
            ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        assert await code_of(c.leave("nope", [("x", None)])) == ErrorCode.UNKNOWN_MEMBER_ID
        assert await c.leave("g", [("x", None), ("", "no-such-instance")]) == [
            ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.UNKNOWN_MEMBER_ID]


async def test_the_initial_delay_gathers_members_into_one_generation(
    tmp_path: Path, autojump_clock: object
) -> None:
    c = coordinator(tmp_path, Store(), **{"group.initial.rebalance.delay.ms": "3000"})
    results: list[JoinResult] = []

    async def member(after: float) -> None:
        await trio.sleep(after)
        results.append(await join(c))

    async with running(c) as nursery:
        for after in (0, 1, 2):
            nursery.start_soon(member, after)
        await trio.sleep(2.5)
        assert results == [] and c.groups["g"].state == GroupState.PREPARING_REBALANCE
        await trio.sleep(5)  # fake time: past the last arrival's delay, within the rebalance timeout
        assert len(results) == 3 and {r.generation for r in results} == {1}


async def test_a_member_that_does_not_rejoin_in_the_rebalance_timeout_is_dropped(
    tmp_path: Path, autojump_clock: object
) -> None:
    c = coordinator(tmp_path, Store())
    async with running(c) as nursery:
        leader, follower = await stable_pair(c, nursery)
        results: list[JoinResult] = []

        async def rejoin() -> None:
            results.append(await join(c, leader.member_id, instance="a", rebalance_ms=20_000,
                                      protocols=[("range", subscription("orders", "more"))]))

        nursery.start_soon(rejoin)
        # The follower keeps heartbeating (so its session lives) but never rejoins; the group's
        # rebalance timeout (the largest of its members', 30 s) ends the wait.
        for _ in range(20):
            await trio.sleep(2.5)
            if results:
                break
            with pytest.raises(KafkaError):
                c.heartbeat("g", 2, follower.member_id, "b")
        assert results and results[0].generation == 3 and [m[0] for m in results[0].members] == [leader.member_id]
        assert follower.member_id not in c.groups["g"].members


async def test_followers_waiting_on_a_silent_leader_are_released(tmp_path: Path, autojump_clock: object) -> None:
    c = coordinator(tmp_path, Store())
    async with running(c) as nursery:
        first = await join(c, session_ms=6000)
        results: dict[str, JoinResult] = {}

        async def second() -> None:
            results["b"] = await join(c, session_ms=6000)

        nursery.start_soon(second)
        await trio.testing.wait_all_tasks_blocked()
        await join(c, first.member_id, session_ms=6000)  # the leader rejoins, then never syncs
        await trio.testing.wait_all_tasks_blocked()
        follower = results["b"]
        assert await code_of(c.sync("g", follower.generation, follower.member_id, None, {})) == \
            ErrorCode.REBALANCE_IN_PROGRESS  # the leader's session ran out: rebalance
        assert first.member_id not in c.groups["g"].members


async def test_a_member_id_handed_out_is_waited_for_in_the_same_generation(
    tmp_path: Path, autojump_clock: object
) -> None:
    c = coordinator(tmp_path, Store())
    async with running(c) as nursery:
        first = await join(c)
        await c.sync("g", 1, first.member_id, None, {})
        with pytest.raises(MemberIdRequired) as required:
            await c.join("g", "", None, "c", "h", 10_000, 30_000, "consumer", PROTOCOLS, require_known_member_id=True)
        results: list[JoinResult] = []

        async def rejoin_first() -> None:
            results.append(await join(c, first.member_id))

        async def newcomer() -> None:
            results.append(await c.join("g", required.value.member_id, None, "c", "h", 10_000, 30_000,
                                        "consumer", PROTOCOLS, require_known_member_id=True))

        nursery.start_soon(newcomer)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(rejoin_first)
        await trio.testing.wait_all_tasks_blocked()
        assert sorted(r.generation for r in results) == [2, 2]
        # An id handed out and never used expires with its session timeout.
        with pytest.raises(MemberIdRequired):
            await c.join("g", "", None, "c", "h", 10_000, 30_000, "consumer", PROTOCOLS, require_known_member_id=True)
        await trio.sleep(11)
        assert c.groups["g"].pending == {}


async def test_offset_delete_respects_live_subscriptions(tmp_path: Path, autojump_clock: object) -> None:
    c = coordinator(tmp_path, Store())
    async with running(c):
        first = await join(c)
        await c.sync("g", 1, first.member_id, None, {})
        value = OffsetCommitValue(1, "", 0)
        await c.commit("g", 1, first.member_id, None, {("orders", 0): value, ("old", 0): value})
        assert await c.delete_offsets("g", [("orders", 0), ("old", 0)]) == {
            ("orders", 0): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC, ("old", 0): ErrorCode.NONE}
        assert c.fetch_offsets("g", None) == {("orders", 0): value}
        assert await code_of(c.delete_offsets("missing", [])) == ErrorCode.GROUP_ID_NOT_FOUND

        other = await c.join("connectors", "", None, "c", "h", 10_000, 30_000, "connect", [("v1", b"")],
                             require_known_member_id=False)
        assert other.generation == 1
        assert await code_of(c.delete_offsets("connectors", [("x", 0)])) == ErrorCode.NON_EMPTY_GROUP


async def test_retention_follows_kafkas_rule(tmp_path: Path, autojump_clock: object) -> None:
    store = Store()
    c = coordinator(tmp_path, store, **{"offsets.retention.minutes": "1"})
    async with running(c):
        first = await join(c)
        await c.sync("g", 1, first.member_id, None, {})
        ancient = OffsetCommitValue(1, "", 0)  # committed in 1970
        await c.commit("g", 1, first.member_id, None, {("orders", 0): ancient, ("gone", 0): ancient})
        # A Stable consumer group keeps the offsets of what it subscribes to; the rest ages.
        await c._expire_offsets()
        assert set(c.fetch_offsets("g", None)) == {("orders", 0)}
        # Once empty, the clock starts when the group became empty, not at the commit.
        await c.leave("g", [(first.member_id, None)])
        assert c.groups["g"].state == GroupState.EMPTY
        await c._expire_offsets()
        assert set(c.fetch_offsets("g", None)) == {("orders", 0)}
        c.groups["g"].state_timestamp_ms -= 61_000  # a minute and more has passed since
        await c._expire_offsets()
        assert "g" not in c.groups  # no offsets left: the group is deleted, with a tombstone
        assert store.records[-1][1] == GroupMetadataKey("g").encode() and store.records[-1][2] is None
    reloaded = coordinator(tmp_path, Store())
    reloaded.load(store.replay())
    assert "g" not in reloaded.groups
