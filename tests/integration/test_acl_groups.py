"""ACLs on groups, committed offsets, the cluster-level APIs, the brokers' own requests and
LinkAppend, against a standalone broker with Kafka's authorizer on (tests/support/secured.py),
judged by librdkafka (consumers, admin) and Causeway's own client logged in as each user."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AclOperation, NewTopic, ResourceType

from broker.client import MIRROR_NAME_CONFIG, Client, ErrorCode, TopicPartition, link_append, open_client
from broker.protocol.messages import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionRequest,
    AlterUserScramCredentialsRequest,
    ControlledShutdownRequest,
    DescribeClientQuotasRequest,
    DescribeClusterRequest,
    DescribeLogDirsRequest,
    DescribeUserScramCredentialsRequest,
    ElectLeadersRequest,
    FindCoordinatorRequest,
    LeaderAndIsrRequest,
    ListPartitionReassignmentsRequest,
    StopReplicaRequest,
    UpdateMetadataRequest,
)
from broker.protocol.records import Record, build_batch
from deploy.broker_process import BrokerProcess
from security.acl import SUPPORTED_OPERATIONS, Operation
from security.acl import ResourceType as AclResourceType
from security.client import client_security
from tests.support.consume import group_values
from tests.support.polling import wait_for
from tests.support.secured import TIMEOUT_S, acl_broker, admin, allow, grant, login

LINK = "dc1-to-dc2"
RECORDS = 3
DENIED = KafkaError.GROUP_AUTHORIZATION_FAILED


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = acl_broker(tmp_path_factory.mktemp("acl-groups") / "data")
    process.start()
    try:
        topics = [NewTopic("a", 1, 1), NewTopic("b", 1, 1)] + [
            NewTopic(name, 1, 1, config={MIRROR_NAME_CONFIG: LINK}) for name in ("m1", "m2")]
        client = admin(process)  # held: librdkafka fails the futures of a handle that is gone
        for future in client.create_topics(topics, request_timeout=TIMEOUT_S).values():
            future.result(timeout=TIMEOUT_S)
        producer = Producer(login(process, "admin"))
        for topic in ("a", "b"):
            for i in range(RECORDS):
                producer.produce(topic, f"{topic}{i}".encode(), partition=0)
        assert producer.flush(TIMEOUT_S) == 0
        yield process
    finally:
        process.stop()


def _commit(broker: BrokerProcess, user: str, group: str, offsets: dict[str, int]) -> dict[str, int]:
    """Commit ``offsets`` (topic -> offset of partition 0) in ``group`` as ``user``, as a consumer
    outside the group does; each topic's error code (0: committed)."""
    consumer = Consumer(login(broker, user, **{"group.id": group, "enable.auto.commit": False}))
    try:
        wanted = [KafkaTopicPartition(topic, 0, offset) for topic, offset in offsets.items()]
        try:
            done = consumer.commit(offsets=wanted, asynchronous=False)
        except KafkaException as exc:
            # librdkafka raises for a failed partition; the error names only the first failure.
            return {topic: exc.args[0].code() for topic in offsets}
        return {tp.topic: tp.error.code() if tp.error else 0 for tp in done or ()}
    finally:
        consumer.close()


def _offsets(broker: BrokerProcess, user: str, group: str,
             partitions: list[KafkaTopicPartition] | None = None) -> dict[str, int | str]:
    """``group``'s committed offsets (partition 0 of each topic) as ``user`` sees them: the
    offset, or the partition's error name."""
    request = ConsumerGroupTopicPartitions(group, partitions)
    client = admin(broker, user)
    future = client.list_consumer_group_offsets([request], request_timeout=TIMEOUT_S)[group]
    answer = future.result(timeout=TIMEOUT_S)
    return {tp.topic: tp.error.name() if tp.error else tp.offset for tp in answer.topic_partitions}


def test_read_on_a_group_and_a_topic_lets_a_member_consume_and_commit_only_there(broker: BrokerProcess) -> None:
    grant(broker, [allow("User:alice", ResourceType.GROUP, "g1", AclOperation.READ),
                   allow("User:alice", ResourceType.TOPIC, "a", AclOperation.READ)])
    alice = login(broker, "alice")
    assert group_values(alice, "a", "g1", RECORDS, polls=60) == {b"a0", b"a1", b"a2"}
    assert _offsets(broker, "admin", "g1") == {"a": RECORDS}

    # Another group: refused by FindCoordinator (no Describe on g2) or, with Describe only, by
    # JoinGroup (no Read on g3); librdkafka says so and reads nothing.
    grant(broker, [allow("User:alice", ResourceType.GROUP, "g3", AclOperation.DESCRIBE)])
    for group in ("g2", "g3"):
        assert _member_errors(alice, group, "a") == DENIED, group
    assert not {"g2", "g3"} & _groups(broker, "admin")

    # A commit in g1 for topic b (no Read on b): refused for b alone, nothing stored for it.
    assert _commit(broker, "alice", "g1", {"a": 1, "b": 1})["b"] == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _offsets(broker, "admin", "g1") == {"a": 1}
    # Describe on the group (FindCoordinator) but no Read: the whole commit is refused.
    grant(broker, [allow("User:bob", ResourceType.GROUP, "g1", AclOperation.DESCRIBE),
                   allow("User:bob", ResourceType.TOPIC, "a", AclOperation.READ)])
    assert _commit(broker, "bob", "g1", {"a": 0}) == {"a": DENIED}
    assert _offsets(broker, "admin", "g1") == {"a": 1}


def _member_errors(config: dict[str, object], group: str, topic: str) -> int:
    """The error a consumer subscribing to ``topic`` in ``group`` ends with (GROUP_AUTHORIZATION_FAILED
    expected: the first one librdkafka does not retry); fails the test if it reads a record."""
    member = Consumer({**config, "group.id": group, "auto.offset.reset": "earliest"})
    member.subscribe([topic])
    try:
        for _ in range(60):
            message = member.poll(1.0)
            if message is None:
                continue
            assert message.error() is not None, f"a member of {group} read a record"
            if message.error().code() == DENIED:
                return DENIED
        return 0
    finally:
        member.close()


def _groups(broker: BrokerProcess, user: str) -> set[str]:
    client = admin(broker, user)
    listed = client.list_consumer_groups(request_timeout=TIMEOUT_S).result(timeout=TIMEOUT_S)
    return {g.group_id for g in listed.valid}


def test_groups_are_listed_described_and_fetched_as_far_as_the_principal_may(broker: BrokerProcess) -> None:
    grant(broker, [allow("User:alice", ResourceType.GROUP, "g4", AclOperation.READ),
                   allow("User:bob", ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE)])
    assert _commit(broker, "admin", "g4", {"a": 2, "b": 1}) == {"a": 0, "b": 0}
    assert _commit(broker, "admin", "g5", {"a": 1}) == {"a": 0}

    # ListGroups: only the groups alice may Describe; everything with Describe on the cluster.
    assert "g4" in _groups(broker, "alice") and "g5" not in _groups(broker, "alice")
    assert {"g4", "g5"} <= _groups(broker, "bob")

    alice = admin(broker, "alice")
    described = alice.describe_consumer_groups(["g4", "g5"], request_timeout=TIMEOUT_S,
                                               include_authorized_operations=True)
    g4 = described["g4"].result(timeout=TIMEOUT_S)
    assert set(g4.authorized_operations) == {AclOperation.READ, AclOperation.DESCRIBE}
    with pytest.raises(KafkaException) as refused:
        described["g5"].result(timeout=TIMEOUT_S)
    assert refused.value.args[0].code() == DENIED

    # OffsetFetch: all of a group's offsets leave out topics alice may not Describe (b); a topic
    # named gets TOPIC_AUTHORIZATION_FAILED; no Describe on the group refuses the group.
    grant(broker, [allow("User:alice", ResourceType.TOPIC, "a", AclOperation.DESCRIBE)])
    assert _offsets(broker, "alice", "g4") == {"a": 2}
    named = _offsets(broker, "alice", "g4", [KafkaTopicPartition("a", 0), KafkaTopicPartition("b", 0)])
    assert named == {"a": 2, "b": "TOPIC_AUTHORIZATION_FAILED"}
    with pytest.raises(KafkaException) as no_group:
        _offsets(broker, "alice", "g5")
    assert no_group.value.args[0].code() == DENIED

    # DeleteGroups needs Delete on the group: refused, and g4 is still there.
    deleted = alice.delete_consumer_groups(["g4"], request_timeout=TIMEOUT_S)["g4"]
    with pytest.raises(KafkaException) as not_deleted:
        deleted.result(timeout=TIMEOUT_S)
    assert not_deleted.value.args[0].code() == DENIED
    assert "g4" in _groups(broker, "admin")


def _sasl(user: str) -> dict[str, str]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required "
                                f'username="{user}" password="{user}-secret";'}


@asynccontextmanager
async def _client(broker: BrokerProcess, user: str) -> AsyncIterator[Client]:
    async with open_client(broker.listeners["SASL_PLAINTEXT"], request_timeout_s=TIMEOUT_S,
                           security=client_security(_sasl(user))) as client:
        yield client


@pytest.mark.parametrize(("user", "expected"), [
    ("alice", set()),  # no Describe on the cluster: none
    ("bob", {Operation.DESCRIBE}),
    ("admin", set(SUPPORTED_OPERATIONS[AclResourceType.CLUSTER])),
])
async def test_describe_cluster_reports_the_principals_cluster_operations(broker: BrokerProcess, user: str,
                                                                          expected: set[Operation]) -> None:
    # librdkafka's describe_cluster asks Metadata, not DescribeCluster: asked here directly.
    grant(broker, [allow("User:bob", ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE)])
    async with _client(broker, user) as client:
        described = await client.request_any(DescribeClusterRequest(include_cluster_authorized_operations=True))
        assert described.error_code == ErrorCode.NONE and described.brokers, "DescribeCluster needs no ACL"
        assert {op for op in Operation if described.cluster_authorized_operations & (1 << op)} == expected
        unasked = await client.request_any(DescribeClusterRequest())
        assert unasked.cluster_authorized_operations == -(2**31)


def _cluster_requests() -> list[tuple[str, Any, Callable[[Any], set[int]]]]:
    """Each brokers' or cluster-level request, with what reads every error code of its answer."""
    leader_and_isr = LeaderAndIsrRequest(controller_id=0, controller_epoch=99, broker_epoch=99, topic_states=[
        LeaderAndIsrRequest.LeaderAndIsrTopicState(topic_name="a", partition_states=[
            LeaderAndIsrRequest.LeaderAndIsrPartitionState(topic_name="a", partition_index=0, leader=99, isr=[99],
                                                           replicas=[99])])])
    stop_replica = StopReplicaRequest(controller_id=0, controller_epoch=99, broker_epoch=99, topic_states=[
        StopReplicaRequest.StopReplicaTopicState(topic_name="a", partition_states=[
            StopReplicaRequest.StopReplicaPartitionState(partition_index=0, delete_partition=True)])])
    alter_partition = AlterPartitionRequest(broker_id=0, broker_epoch=99, topics=[
        AlterPartitionRequest.TopicData(topic_name="a", partitions=[AlterPartitionRequest.PartitionData(
            partition_index=0, new_isr=[0])])])
    reassign = AlterPartitionReassignmentsRequest(topics=[AlterPartitionReassignmentsRequest.ReassignableTopic(
        name="a", partitions=[AlterPartitionReassignmentsRequest.ReassignablePartition(partition_index=0,
                                                                                      replicas=[0])])])
    scram = AlterUserScramCredentialsRequest(deletions=[
        AlterUserScramCredentialsRequest.ScramCredentialDeletion(name="bob", mechanism=1)])
    return [
        ("LeaderAndIsr", leader_and_isr,
         lambda r: {r.error_code} | {p.error_code for t in r.topics for p in t.partition_errors}),
        ("UpdateMetadata", UpdateMetadataRequest(controller_id=0, controller_epoch=99, broker_epoch=99),
         lambda r: {r.error_code}),
        ("StopReplica", stop_replica, lambda r: {r.error_code} | {p.error_code for p in r.partition_errors}),
        ("ControlledShutdown", ControlledShutdownRequest(broker_id=0, broker_epoch=99), lambda r: {r.error_code}),
        ("AlterPartition", alter_partition, lambda r: {r.error_code}),
        ("ElectLeaders", ElectLeadersRequest(topic_partitions=[ElectLeadersRequest.TopicPartitions(
            topic="a", partitions=[0])], timeout_ms=5000),
         lambda r: {r.error_code} | {p.error_code for t in r.replica_election_results for p in t.partition_result}),
        ("AlterPartitionReassignments", reassign,
         lambda r: {r.error_code} | {p.error_code for t in r.responses for p in t.partitions}),
        ("ListPartitionReassignments", ListPartitionReassignmentsRequest(), lambda r: {r.error_code}),
        ("DescribeLogDirs", DescribeLogDirsRequest(topics=None), lambda r: {r.error_code}),
        ("DescribeUserScramCredentials", DescribeUserScramCredentialsRequest(users=None), lambda r: {r.error_code}),
        ("AlterUserScramCredentials", scram, lambda r: {u.error_code for u in r.results}),
        ("DescribeClientQuotas", DescribeClientQuotasRequest(), lambda r: {r.error_code}),
    ]


async def test_brokers_and_cluster_requests_need_their_cluster_acl_and_change_nothing(broker: BrokerProcess) -> None:
    async with _client(broker, "alice") as alice, _client(broker, "admin") as admin_client:
        for name, request, codes in _cluster_requests():
            refused = codes(await alice.request_any(request, idempotent=False))
            assert refused == {ErrorCode.CLUSTER_AUTHORIZATION_FAILED}, name
            # The super user gets past the ACL check (a standalone broker still refuses the
            # controller's requests, for want of a controller).
            allowed = codes(await admin_client.request_any(request, idempotent=False))
            assert ErrorCode.CLUSTER_AUTHORIZATION_FAILED not in allowed, name
        # DescribeLogDirs before v3 has no error field: an empty answer.
        old = await alice.request_any(DescribeLogDirsRequest(topics=None), max_version=2)
        assert old.results == []
    # The refused StopReplica (delete) and LeaderAndIsr (leader 99) left topic a as it was.
    reader = Consumer(login(broker, "admin", **{"group.id": "check-a"}))
    try:
        assert reader.get_watermark_offsets(KafkaTopicPartition("a", 0), timeout=TIMEOUT_S) == (0, RECORDS)
    finally:
        reader.close()


async def test_find_coordinator_needs_describe_on_each_key(broker: BrokerProcess) -> None:
    grant(broker, [allow("User:alice", ResourceType.GROUP, "fc-mine", AclOperation.DESCRIBE)])
    async with _client(broker, "alice") as alice:
        found = await alice.request_any(FindCoordinatorRequest(key_type=0, coordinator_keys=["fc-mine", "fc-other"]))
        codes = {c.key: c.error_code for c in found.coordinators}
        assert codes == {"fc-mine": ErrorCode.NONE, "fc-other": ErrorCode.GROUP_AUTHORIZATION_FAILED}
        old = await alice.request_any(FindCoordinatorRequest(key="fc-other", key_type=0), max_version=3)
        assert (old.error_code, old.node_id) == (ErrorCode.GROUP_AUTHORIZATION_FAILED, -1)
        transactional = await alice.request_any(FindCoordinatorRequest(key_type=1, coordinator_keys=["tx"]))
        assert transactional.coordinators[0].error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    # Past the ACL, a transactional id finds its transaction coordinator (the first request
    # creates __transaction_state, as Kafka's; its leaders may take a moment).
    grant(broker, [allow("User:alice", ResourceType.TRANSACTIONAL_ID, "tx", AclOperation.DESCRIBE)])
    async with _client(broker, "alice") as alice:
        answers = []

        async def answered() -> bool:
            answers.append(await alice.request_any(FindCoordinatorRequest(key_type=1, coordinator_keys=["tx"])))
            return answers[-1].coordinators[0].error_code != ErrorCode.COORDINATOR_NOT_AVAILABLE

        await wait_for(answered, what="the transaction coordinator to be available", timeout_s=TIMEOUT_S)
        assert answers[-1].coordinators[0].error_code == ErrorCode.NONE
        assert answers[-1].coordinators[0].node_id >= 0


def _batch(base: int, count: int) -> bytes:
    return build_batch([Record(f"k{base + i}".encode(), f"v{base + i}".encode()) for i in range(count)],
                       base_offset=base, base_timestamp=1_600_000_000_000)


def _watermarks(broker: BrokerProcess, topic: str) -> tuple[int, int]:
    reader = Consumer(login(broker, "admin", **{"group.id": "watermarks"}))
    try:
        low, high = reader.get_watermark_offsets(KafkaTopicPartition(topic, 0), timeout=TIMEOUT_S)
        return low, high
    finally:
        reader.close()


async def test_link_append_needs_alter_on_the_mirror_topic_or_cluster_action(broker: BrokerProcess) -> None:
    m1, m2 = TopicPartition("m1", 0), TopicPartition("m2", 0)
    # Write (which implies Describe, so metadata finds the leader) is not enough.
    grant(broker, [allow("User:mirror", ResourceType.TOPIC, "m1", AclOperation.WRITE)])
    async with _client(broker, "mirror") as mirror:
        refused = (await link_append(mirror, LINK, {m1: _batch(0, 3)}))[m1]
        assert refused.error == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert refused.log_end_offset == -1  # no positions for a principal that may not append
        assert _watermarks(broker, "m1") == (0, 0)

        grant(broker, [allow("User:mirror", ResourceType.TOPIC, "m1", AclOperation.ALTER)])
        appended = (await link_append(mirror, LINK, {m1: _batch(0, 3)}))[m1]
        assert (appended.error, appended.log_end_offset) == (ErrorCode.NONE, 3)
        # Alter on m1 is not Alter on m2.
        other = (await link_append(mirror, LINK, {m2: _batch(0, 2)}))[m2]
        assert other.error == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert _watermarks(broker, "m1") == (0, 3)
    assert _watermarks(broker, "m2") == (0, 0)

    # Moving the log start is an append too: refused without Alter, the copy keeps its records.
    grant(broker, [allow("User:alice", ResourceType.TOPIC, "m1", AclOperation.WRITE)])
    async with _client(broker, "alice") as alice:
        moved = (await link_append(alice, LINK, {m1: b""}, log_start_offsets={m1: 2}))[m1]
        assert moved.error == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert _watermarks(broker, "m1") == (0, 3)

    # ClusterAction on the cluster lets a principal append to any mirror topic (it still needs
    # Describe on the topic for its client to find the leader in the metadata, as in Kafka).
    grant(broker, [allow("User:bob", ResourceType.BROKER, "kafka-cluster", AclOperation.CLUSTER_ACTION),
                   allow("User:bob", ResourceType.TOPIC, "m2", AclOperation.DESCRIBE)])
    async with _client(broker, "bob") as bob:
        result = (await link_append(bob, LINK, {m2: _batch(0, 2)}, log_start_offsets={m2: 1}))[m2]
        assert (result.error, result.log_end_offset, result.log_start_offset) == (ErrorCode.NONE, 2, 1)
    assert _watermarks(broker, "m2") == (1, 2)
