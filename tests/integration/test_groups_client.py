"""broker.client.groups against a real broker, with groups formed by real librdkafka consumers
(confluent-kafka): what the client reports is checked against what the consumers know."""

from __future__ import annotations

import time

import pytest
import trio
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTopicPartition

from broker.client import (
    Client,
    CommittedOffset,
    ErrorCode,
    KafkaError,
    TopicPartition,
    admin,
    commit_offsets,
    delete_groups,
    delete_offsets,
    describe_groups,
    fetch_offsets,
    find_coordinator,
    list_groups,
    open_client,
)
from deploy.broker_process import BrokerProcess
from tests.support.consume import first_offsets
from tests.support.polling import wait_for

PARTITIONS = 4
PER_PARTITION = 10
TIMEOUT_S = 60.0


def fill(bootstrap: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for p in range(PARTITIONS):
        for i in range(PER_PARTITION):
            producer.produce("events", key=b"k%d" % i, value=b"%d:%d" % (p, i), partition=p)
    assert producer.flush(30) == 0


def consumer(bootstrap: str, client_id: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": "readers", "client.id": client_id,
                     "enable.auto.commit": False, "auto.offset.reset": "earliest",
                     "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})


def join_and_read_everything(members: list[Consumer]) -> None:
    """Poll every member until each has a share of the partitions and all records were seen."""
    for m in members:
        m.subscribe(["events"])
    seen: set[bytes] = set()
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        for m in members:
            msg = m.poll(0.1)
            if msg is not None and msg.error() is None:
                seen.add(msg.value())
        shares = [m.assignment() for m in members]
        if len(seen) == PARTITIONS * PER_PARTITION and all(shares) and sum(map(len, shares)) == PARTITIONS:
            return
    raise AssertionError(f"group did not settle: {len(seen)} records, {[m.assignment() for m in members]}")


async def in_state(client: Client, group: str, expected: str) -> bool:
    return (await describe_groups(client, [group]))[group].state == expected


async def test_groups_of_real_consumers(group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    events = [TopicPartition("events", p) for p in range(PARTITIONS)]
    async with open_client(bootstrap, client_id="groups-itest", request_timeout_s=TIMEOUT_S) as client:
        await admin.create_topics(client, {"events": PARTITIONS})
        await trio.to_thread.run_sync(fill, bootstrap)
        members = [consumer(bootstrap, "reader-a"), consumer(bootstrap, "reader-b")]
        try:
            await trio.to_thread.run_sync(join_and_read_everything, members)
            # Each member commits offsets of its own partitions, through the group.
            for m in members:
                mine = [CTopicPartition("events", tp.partition, 2 + tp.partition) for tp in m.assignment()]
                await trio.to_thread.run_sync(lambda m=m, mine=mine: m.commit(offsets=mine, asynchronous=False))
            await wait_for(lambda: in_state(client, "readers", "Stable"), what="a stable group")

            coordinator = await find_coordinator(client, "readers")
            assert coordinator.address == bootstrap

            listed = {g.group_id: g for g in await list_groups(client)}
            assert (listed["readers"].protocol_type, listed["readers"].state) == ("consumer", "Stable")

            described = (await describe_groups(client, ["readers"]))["readers"]
            assert (described.state, described.protocol_type) == ("Stable", "consumer")
            assert described.protocol in ("range", "roundrobin", "cooperative-sticky")
            assert described.coordinator == coordinator
            by_client = {m.client_id: m for m in described.members}
            assert sorted(by_client) == ["reader-a", "reader-b"]
            for name, m in zip(["reader-a", "reader-b"], members, strict=True):
                member = by_client[name]
                assert member.member_id == m.memberid()
                assert member.client_host.lstrip("/") == "127.0.0.1"
                assert member.group_instance_id is None
                assert sorted(member.assignment) == sorted(TopicPartition(tp.topic, tp.partition)
                                                           for tp in m.assignment())

            # What the group committed, as librdkafka itself reads it back.
            theirs = await trio.to_thread.run_sync(
                lambda: members[0].committed([CTopicPartition("events", p) for p in range(PARTITIONS)], 30))
            offsets = await fetch_offsets(client, "readers")
            assert {tp: c.offset for tp, c in offsets.items()} == {
                TopicPartition(t.topic, t.partition): t.offset for t in theirs}
            assert {c.offset for c in offsets.values()} == {2, 3, 4, 5}
            assert await fetch_offsets(client, "readers", events[:2]) == {tp: offsets[tp] for tp in events[:2]}

            # While members are active: no admin commit, no deletion.
            with pytest.raises(KafkaError) as refused:
                await commit_offsets(client, "readers", {events[0]: 9})
            assert refused.value.code == ErrorCode.UNKNOWN_MEMBER_ID and "events-0" in str(refused.value)
            assert await delete_groups(client, ["readers"]) == {"readers": ErrorCode.NON_EMPTY_GROUP}
            assert await delete_offsets(client, "readers", events[:1]) == {
                events[0]: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC}
            assert (await fetch_offsets(client, "readers"))[events[0]].offset == 2  # untouched
        finally:
            for m in members:
                await trio.to_thread.run_sync(m.close)

        await wait_for(lambda: in_state(client, "readers", "Empty"), what="an empty group")
        described = (await describe_groups(client, ["readers"]))["readers"]
        assert described.members == () and described.exists

        # Empty now: an admin commit is taken, and a new member starts where it says.
        target = {events[0]: 7, events[1]: CommittedOffset(1, metadata="reset by test"), events[2]: 0, events[3]: 10}
        await commit_offsets(client, "readers", target)
        after = await fetch_offsets(client, "readers")
        assert {tp: c.offset for tp, c in after.items()} == {events[0]: 7, events[1]: 1, events[2]: 0, events[3]: 10}
        assert after[events[1]].metadata == "reset by test"
        first = await trio.to_thread.run_sync(first_offsets, consumer(bootstrap, "newcomer"), "events", {0, 1, 2})
        assert first == {0: 7, 1: 1, 2: 0}  # and nothing from partition 3: it starts at its end
        await wait_for(lambda: in_state(client, "readers", "Empty"), what="the newcomer to leave")

        # Offsets deleted one partition at a time, then the whole group.
        assert await delete_offsets(client, "readers", [events[0]]) == {events[0]: ErrorCode.NONE}
        assert events[0] not in await fetch_offsets(client, "readers")
        assert await delete_groups(client, ["readers", "never-was"]) == {
            "readers": ErrorCode.NONE, "never-was": ErrorCode.GROUP_ID_NOT_FOUND}
        assert "readers" not in {g.group_id for g in await list_groups(client)}
        assert await fetch_offsets(client, "readers") == {}
        gone = (await describe_groups(client, ["readers"]))["readers"]
        assert (gone.state, gone.exists, gone.members) == ("Dead", False, ())
