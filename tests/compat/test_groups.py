"""Consumer groups with real clients against a real broker process."""

from __future__ import annotations

import asyncio
import selectors
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker.protocol.errors import ErrorCode
from deploy.broker_process import BrokerProcess

pytestmark = pytest.mark.compat
TIMEOUT_S = 60.0
PARTITIONS = 6


@pytest.fixture
def group_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    # Tests want rebalances now, not after Kafka's 3 s initial delay; short sessions let a
    # killed member be noticed quickly.
    process = BrokerProcess(tmp_path / "broker", overrides=(
        "group.initial.rebalance.delay.ms=0", "group.min.session.timeout.ms=1000",
        "offsets.topic.num.partitions=5")).start()
    yield process
    if process.proc is not None:
        assert process.stop() == 0, process.log_tail()


def fill(bootstrap: str, topic: str, per_partition: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for p in range(PARTITIONS):
        for i in range(per_partition):
            producer.produce(topic, value=f"{p}:{i}".encode(), partition=p)
    assert producer.flush(30) == 0


def consumer(bootstrap: str, group: str, **extra: object) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                     "session.timeout.ms": 6000, "heartbeat.interval.ms": 500, **extra})


def test_three_consumers_share_partitions_and_take_over_when_one_leaves(group_broker: BrokerProcess) -> None:
    fill(group_broker.bootstrap, "shared", 50)
    members = [consumer(group_broker.bootstrap, "g3") for _ in range(3)]
    for m in members:
        m.subscribe(["shared"])
    seen: dict[str, int] = {}
    deadline = time.monotonic() + TIMEOUT_S
    while len(seen) < PARTITIONS * 50 and time.monotonic() < deadline:
        for m in members:
            msg = m.poll(0.2)
            if msg is not None and msg.error() is None:
                seen[msg.value().decode()] = seen.get(msg.value().decode(), 0) + 1
    assignments = [{tp.partition for tp in m.assignment()} for m in members]
    assert sorted(p for a in assignments for p in a) == list(range(PARTITIONS))  # no overlap, all covered
    assert all(assignments), assignments  # every member got a share
    # Every record was consumed. (Members join one by one, so early rebalances may hand a
    # partition over before its auto-commit: at-least-once, as with Kafka.)
    assert len(seen) == PARTITIONS * 50

    # One member leaves; the two others take its partitions.
    members[0].close()
    remaining = members[1:]
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        for m in remaining:
            m.poll(0.2)
        if sorted(tp.partition for m in remaining for tp in m.assignment()) == list(range(PARTITIONS)):
            break
    assert sorted(tp.partition for m in remaining for tp in m.assignment()) == list(range(PARTITIONS))
    for m in remaining:
        m.close()


def test_committed_offsets_are_listed_and_survive_a_restart(group_broker: BrokerProcess) -> None:
    fill(group_broker.bootstrap, "committed", 10)
    c = consumer(group_broker.bootstrap, "keeper", **{"enable.auto.commit": False})
    c.subscribe(["committed"])
    consume_up_to(c, PARTITIONS * 10, poll_s=0.5)
    c.commit(asynchronous=False)
    c.close()

    admin = AdminClient({"bootstrap.servers": group_broker.bootstrap})
    from confluent_kafka import ConsumerGroupTopicPartitions

    def listed() -> dict[int, int]:
        future = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("keeper")])["keeper"]
        return {tp.partition: tp.offset for tp in future.result(30).topic_partitions}

    assert listed() == {p: 10 for p in range(PARTITIONS)}
    groups = admin.list_consumer_groups().result(30)
    assert "keeper" in {g.group_id for g in groups.valid}
    described = admin.describe_consumer_groups(["keeper"])["keeper"].result(30)
    assert described.state.name == "EMPTY"

    group_broker.restart()
    admin = AdminClient({"bootstrap.servers": group_broker.bootstrap})
    assert listed() == {p: 10 for p in range(PARTITIONS)}
    # A new member of the group resumes where the group left off: nothing more to read.
    resumed = consumer(group_broker.bootstrap, "keeper")
    resumed.subscribe(["committed"])
    positions: list[TopicPartition] = []
    deadline = time.monotonic() + TIMEOUT_S
    while not positions and time.monotonic() < deadline:
        msg = resumed.poll(0.5)
        assert msg is None or msg.error() is not None, "a committed record was delivered again"
        positions = resumed.committed(resumed.assignment(), 10) if resumed.assignment() else []
    assert {tp.offset for tp in positions} == {10}
    resumed.close()


def test_a_killed_member_is_replaced_within_the_session_timeout(group_broker: BrokerProcess) -> None:
    fill(group_broker.bootstrap, "killed", 1)
    # The victim's short session is what is tested; the survivor keeps the helper's 6 s. With 2 s
    # of its own, its rejoin when the victim arrived once took longer than its session (a CI run:
    # no heartbeat or JoinGroup from it for 2 s, so it was expired and held nothing).
    survivor = consumer(group_broker.bootstrap, "gk")
    survivor.subscribe(["killed"])
    # The victim runs in another process so it can die without saying goodbye.
    script = (
        "import sys, time\nfrom confluent_kafka import Consumer\n"
        f"c = Consumer({{'bootstrap.servers': '{group_broker.bootstrap}', 'group.id': 'gk',"
        " 'session.timeout.ms': 2000, 'heartbeat.interval.ms': 300})\n"
        "c.subscribe(['killed'])\n"
        "for _ in range(600):\n"
        "    c.poll(0.1)\n"
        "    if c.assignment():\n"
        "        print('assigned', flush=True)\n"
        "        break\n"
        "for _ in range(6000):\n    c.poll(0.1)\n"
    )
    import sys

    victim = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + TIMEOUT_S
        line = ""
        assert victim.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(victim.stdout, selectors.EVENT_READ)
            # Keep the survivor polling (it must rejoin for the victim to get partitions).
            while "assigned" not in line and time.monotonic() < deadline:
                survivor.poll(0.1)
                if sel.select(timeout=0):
                    line = victim.stdout.readline()
        assert "assigned" in line
        # Wait until both members share the topic, then kill the victim outright.
        while len(survivor.assignment()) == PARTITIONS and time.monotonic() < deadline:
            survivor.poll(0.1)
        assert 0 < len(survivor.assignment()) < PARTITIONS
        victim.kill()
        victim.wait()
        while len(survivor.assignment()) < PARTITIONS and time.monotonic() < deadline:
            survivor.poll(0.1)
        assert len(survivor.assignment()) == PARTITIONS
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait()
        survivor.close()


def test_kafka_python_group_consumer(group_broker: BrokerProcess) -> None:
    from kafka import KafkaConsumer

    fill(group_broker.bootstrap, "kp-group", 5)
    c = KafkaConsumer("kp-group", bootstrap_servers=group_broker.bootstrap, group_id="kpg",
                      auto_offset_reset="earliest", consumer_timeout_ms=15_000)
    values = set()
    for msg in c:
        values.add(msg.value)
        if len(values) == PARTITIONS * 5:
            break
    c.commit()
    c.close()
    assert len(values) == PARTITIONS * 5


def test_aiokafka_group_consumer(group_broker: BrokerProcess) -> None:
    from aiokafka import AIOKafkaConsumer

    fill(group_broker.bootstrap, "aio-group", 5)

    async def run() -> int:
        c = AIOKafkaConsumer("aio-group", bootstrap_servers=group_broker.bootstrap, group_id="aiog",
                             auto_offset_reset="earliest")
        await c.start()
        try:
            got = 0
            for _ in range(60):  # bounded
                batch = await c.getmany(timeout_ms=500)
                got += sum(len(v) for v in batch.values())
                if got >= PARTITIONS * 5:
                    break
            await c.commit()
            return got
        finally:
            await c.stop()

    assert asyncio.run(run()) == PARTITIONS * 5


def test_kcat_balanced_consumer(group_broker: BrokerProcess) -> None:
    fill(group_broker.bootstrap, "kc-group", 3)
    kcat = shutil.which("kcat")
    assert kcat
    done = subprocess.run([kcat, "-b", group_broker.bootstrap, "-G", "kcg", "kc-group", "-o", "beginning",
                           "-e", "-f", "%s\n", "-X", "session.timeout.ms=6000"],
                          capture_output=True, text=True, timeout=60)
    assert sorted(done.stdout.split()) == sorted(f"{p}:{i}" for p in range(PARTITIONS) for i in range(3))


def test_admin_alters_and_deletes_committed_offsets(group_broker: BrokerProcess) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions

    fill(group_broker.bootstrap, "admin-offsets", 1)
    admin = AdminClient({"bootstrap.servers": group_broker.bootstrap})
    wanted = [TopicPartition("admin-offsets", p, 100 + p) for p in range(PARTITIONS)]
    admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions("ops", wanted)])["ops"].result(30)
    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("ops")])["ops"].result(30)
    assert {tp.partition: tp.offset for tp in listed.topic_partitions} == {p: 100 + p for p in range(PARTITIONS)}

    # A commit for a topic that does not exist gets Kafka's error, per partition.
    bad = admin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions("ops", [TopicPartition("no-such-topic", 0, 5)])])["ops"]
    try:
        errors = [str(tp.error) for tp in bad.result(30).topic_partitions]
    except Exception as exc:  # noqa: BLE001 - some client versions raise instead
        errors = [str(exc)]
    assert errors and all("UNKNOWN_TOPIC_OR_PART" in e for e in errors), errors

    # Deleting the group removes its offsets; deleting it again names the missing group.
    admin.delete_consumer_groups(["ops"])["ops"].result(30)
    assert "ops" not in {g.group_id for g in admin.list_consumer_groups().result(30).valid}
    with pytest.raises(Exception) as exc_info:
        admin.delete_consumer_groups(["ops"])["ops"].result(30)
    assert "GROUP_ID_NOT_FOUND" in str(exc_info.value)


def assigned(c: Consumer) -> set[int]:
    return {tp.partition for tp in c.assignment()}


def consume_up_to(c: Consumer, count: int, *, poll_s: float) -> int:
    """Records `c` receives until it has `count`, or TIMEOUT_S passes: how many it got."""
    got = 0
    deadline = time.monotonic() + TIMEOUT_S
    while got < count and time.monotonic() < deadline:
        msg = c.poll(poll_s)
        if msg is not None and msg.error() is None:
            got += 1
    return got


def poll_until(members: list[Consumer], done: object, what: str) -> None:
    """Poll every member until `done()` holds; bounded by TIMEOUT_S."""
    deadline = time.monotonic() + TIMEOUT_S
    while not done() and time.monotonic() < deadline:  # type: ignore[operator]
        for m in members:
            m.poll(0.1)
    assert done(), what  # type: ignore[operator]


def test_a_static_member_that_restarts_gets_its_partitions_back_without_a_rebalance(
    group_broker: BrokerProcess,
) -> None:
    fill(group_broker.bootstrap, "static", 1)
    revoked: list[int] = []

    def on_revoke(_: Consumer, partitions: list[TopicPartition]) -> None:
        revoked.extend(tp.partition for tp in partitions)

    a = consumer(group_broker.bootstrap, "gs", **{"group.instance.id": "pod-a"})
    a.subscribe(["static"], on_revoke=on_revoke)
    b = consumer(group_broker.bootstrap, "gs", **{"group.instance.id": "pod-b"})
    b.subscribe(["static"])
    poll_until([a, b], lambda: len(assigned(a)) + len(assigned(b)) == PARTITIONS and assigned(a) and assigned(b),
               "both static members share the topic")
    before_a, before_b = assigned(a), assigned(b)
    admin = AdminClient({"bootstrap.servers": group_broker.bootstrap})
    old_ids = {m.member_id for m in admin.describe_consumer_groups(["gs"])["gs"].result(30).members}
    revoked.clear()

    # A static member leaves no LeaveGroup behind when it closes; its replacement takes its place.
    b.close()
    b = consumer(group_broker.bootstrap, "gs", **{"group.instance.id": "pod-b"})
    b.subscribe(["static"])
    poll_until([a, b], lambda: bool(assigned(b)), "the restarted static member is assigned")
    assert assigned(b) == before_b and assigned(a) == before_a
    assert revoked == []  # the other member never gave anything up
    described = admin.describe_consumer_groups(["gs"])["gs"].result(30)
    assert described.state.name == "STABLE"
    assert {m.group_instance_id for m in described.members} == {"pod-a", "pod-b"}
    assert {m.member_id for m in described.members} != old_ids  # pod-b has a new member id

    # The leader restarts too: it must not reassign, and nobody loses a partition.
    a.close()
    revoked.clear()  # closing revokes the closed consumer's own partitions, locally
    a = consumer(group_broker.bootstrap, "gs", **{"group.instance.id": "pod-a"})
    a.subscribe(["static"], on_revoke=on_revoke)
    poll_until([a, b], lambda: bool(assigned(a)), "the restarted static leader is assigned")
    for _ in range(10):  # a few more rounds in which a rebalance would show
        a.poll(0.1)
        b.poll(0.1)
    assert assigned(a) == before_a and assigned(b) == before_b and revoked == []
    a.close()
    b.close()


def test_a_live_group_carries_on_across_a_broker_restart(group_broker: BrokerProcess) -> None:
    fill(group_broker.bootstrap, "carry-on", 2)
    c = consumer(group_broker.bootstrap, "gr", **{"enable.auto.commit": False})
    c.subscribe(["carry-on"])
    seen: set[str] = set()
    deadline = time.monotonic() + TIMEOUT_S
    while len(seen) < PARTITIONS * 2 and time.monotonic() < deadline:
        msg = c.poll(0.2)
        if msg is not None and msg.error() is None:
            seen.add((msg.value() or b"").decode())
    assert len(seen) == PARTITIONS * 2
    c.commit(asynchronous=False)

    group_broker.restart()
    producer = Producer({"bootstrap.servers": group_broker.bootstrap})
    for p in range(PARTITIONS):
        producer.produce("carry-on", value=f"after:{p}".encode(), partition=p)
    assert producer.flush(30) == 0
    after: set[str] = set()
    deadline = time.monotonic() + TIMEOUT_S
    while len(after) < PARTITIONS and time.monotonic() < deadline:
        msg = c.poll(0.2)
        if msg is not None and msg.error() is None:
            value = (msg.value() or b"").decode()
            assert value.startswith("after:"), f"{value} was delivered again after the restart"
            after.add(value)
    assert len(after) == PARTITIONS
    c.commit(asynchronous=False)
    admin = AdminClient({"bootstrap.servers": group_broker.bootstrap})
    from confluent_kafka import ConsumerGroupTopicPartitions

    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("gr")])["gr"].result(30)
    assert {tp.partition: tp.offset for tp in listed.topic_partitions} == {p: 3 for p in range(PARTITIONS)}
    c.close()


class Wire:
    """Requests by hand over one socket, for what real clients never send."""

    def __init__(self, bootstrap: str) -> None:
        from deploy.kafka_socket import connect

        self.sock = connect(bootstrap, timeout_s=30)
        self.correlation = 0

    def call(self, request: Any, version: int) -> Any:
        from deploy.kafka_socket import call

        self.correlation += 1
        return call(self.sock, request, version, self.correlation)

    def close(self) -> None:
        self.sock.close()


def test_hostile_group_requests_get_kafkas_errors_and_leave_nothing_stuck(group_broker: BrokerProcess) -> None:
    from broker.protocol.messages import (
        FindCoordinatorRequest,
        HeartbeatRequest,
        JoinGroupRequest,
        OffsetCommitRequest,
        OffsetFetchRequest,
        SyncGroupRequest,
    )

    fill(group_broker.bootstrap, "wire", 2)
    wire = Wire(group_broker.bootstrap)
    try:
        protocols = [JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x00\x00\x00\x00\x00")]

        def join(member_id: str = "", **extra: Any) -> Any:
            fields: dict[str, Any] = {"group_id": "wired", "session_timeout_ms": 1000, "rebalance_timeout_ms": 1000,
                                         "member_id": member_id, "protocol_type": "consumer",
                                         "protocols": protocols, **extra}
            return wire.call(JoinGroupRequest(**fields), 9)

        # FindCoordinator v4 batches keys; an unknown key type is an invalid request.
        found = wire.call(FindCoordinatorRequest(key_type=0, coordinator_keys=["wired", "other"]), 4)
        assert [(c.key, c.error_code, c.port) for c in found.coordinators] == [
            ("wired", 0, group_broker.port), ("other", 0, group_broker.port)]
        bad_type = wire.call(FindCoordinatorRequest(key_type=7, coordinator_keys=["x"]), 4)
        assert bad_type.coordinators[0].error_code == ErrorCode.INVALID_REQUEST

        assert join(session_timeout_ms=1).error_code == ErrorCode.INVALID_SESSION_TIMEOUT
        huge = [JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"x" * (2 << 20))]
        assert join(protocols=huge).error_code == ErrorCode.INVALID_REQUEST
        assert join("made-up").error_code == ErrorCode.UNKNOWN_MEMBER_ID
        required = join()
        assert required.error_code == ErrorCode.MEMBER_ID_REQUIRED
        joined = join(required.member_id)
        assert joined.error_code == 0 and joined.generation_id == 1
        member = joined.member_id

        stale = wire.call(SyncGroupRequest(group_id="wired", generation_id=0, member_id=member), 5)
        assert stale.error_code == ErrorCode.ILLEGAL_GENERATION
        stranger = wire.call(SyncGroupRequest(group_id="wired", generation_id=1, member_id="nobody"), 5)
        assert stranger.error_code == ErrorCode.UNKNOWN_MEMBER_ID
        beat = wire.call(HeartbeatRequest(group_id="nowhere", generation_id=1, member_id=member), 4)
        assert beat.error_code == ErrorCode.UNKNOWN_MEMBER_ID

        # A commit for a topic that does not exist, beside a good one (OffsetCommit v9).
        commit = wire.call(OffsetCommitRequest(
            group_id="wired", generation_id_or_member_epoch=-1, member_id="", topics=[
                OffsetCommitRequest.OffsetCommitRequestTopic(name=name, partitions=[
                    OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)])
                for name in ("wire", "no-such-topic")]), 9)
        codes = {t.name: t.partitions[0].error_code for t in commit.topics}
        # The group has a live member, so an outsider's commit is refused for the good topic too.
        assert codes == {"wire": ErrorCode.UNKNOWN_MEMBER_ID, "no-such-topic": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}

        # The member never heartbeats: its session (1 s) runs out and the group empties.
        admin = AdminClient({"bootstrap.servers": group_broker.bootstrap})
        deadline = time.monotonic() + TIMEOUT_S
        state = ""
        while state != "EMPTY" and time.monotonic() < deadline:
            state = admin.describe_consumer_groups(["wired"])["wired"].result(30).state.name
        assert state == "EMPTY"

        # OffsetFetch v9 (several groups at once) sees nothing committed.
        fetched = wire.call(OffsetFetchRequest(groups=[
            OffsetFetchRequest.OffsetFetchRequestGroup(group_id=g, topics=[
                OffsetFetchRequest.OffsetFetchRequestTopics(name="wire", partition_indexes=[0])])
            for g in ("wired", "unknown")]), 9)
        assert [(g.group_id, g.topics[0].partitions[0].committed_offset)
                for g in fetched.groups] == [("wired", -1), ("unknown", -1)]
    finally:
        wire.close()

    # Nothing is stuck: a real consumer takes the group over and reads everything.
    c = consumer(group_broker.bootstrap, "wired")
    c.subscribe(["wire"])
    got = consume_up_to(c, PARTITIONS * 2, poll_s=0.2)
    c.close()
    assert got == PARTITIONS * 2
