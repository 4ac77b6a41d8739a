"""ACLs on the data and topic APIs (Produce, Fetch, ListOffsets, Metadata, InitProducerId,
CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords, the config APIs) of a standalone
broker with Kafka's authorizer on, judged by real clients: librdkafka (confluent-kafka) for most,
kafka-python and aiokafka for one case each. A refused request must change nothing: each test
looks at the topic afterwards as the super user."""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import TopicAuthorizationFailedError as AioTopicAuthorizationFailed
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaPythonPartition
from kafka.admin import KafkaAdminClient
from kafka.admin import NewTopic as KafkaPythonTopic
from kafka.errors import TopicAuthorizationFailedError

from broker.protocol.constants import MIRROR_NAME_CONFIG
from broker.protocol.errors import ErrorCode
from broker.protocol.messages import (
    FetchRequest,
    InitProducerIdRequest,
    LinkLeaderEpochRequest,
    LinkOffsetCommitRequest,
    LinkTruncateRequest,
    ListOffsetsRequest,
    MetadataRequest,
    OffsetForLeaderEpochRequest,
    ProduceRequest,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
)
from deploy.broker_process import BrokerProcess
from deploy.kafka_socket import call
from tests.support.consume import poll_to_end
from tests.support.polling import wait_until
from tests.support.secured import TIMEOUT_S, acl_broker, admin, allow, deny, grant, login, revoke

TOPIC = ResourceType.TOPIC


def _started(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[BrokerProcess]:
    process = acl_broker(tmp_path_factory.mktemp(name) / "data")
    process.start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    for process in _started(tmp_path_factory, "acl-topics"):
        # librdkafka's consumer looks up its group's coordinator even when partitions are
        # assigned, which needs Describe on the group: each user may use its own groups
        # (`<user>-...`), so what these tests see is the topics' ACLs alone.
        grant(process, [allow(f"User:{user}", ResourceType.GROUP, f"{user}-", AclOperation.READ,
                              ResourcePatternType.PREFIXED) for user in ("alice", "bob", "mirror")])
        yield process


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker with ACLs on where nobody but the super user may write anything."""
    yield from _started(tmp_path_factory, "acl-bare")


def _name(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


def _create(broker: BrokerProcess, *names: str, partitions: int = 1) -> None:
    """Topics made by the super user."""
    client = admin(broker)  # held: librdkafka fails the futures of a handle that is gone
    futures = client.create_topics([NewTopic(n, partitions, 1) for n in names], request_timeout=TIMEOUT_S)
    for future in futures.values():
        future.result(timeout=TIMEOUT_S)


def _produce(broker: BrokerProcess, user: str, topic: str, count: int, **extra: object) -> list[KafkaError | None]:
    """Produce ``count`` records as ``user``; each one's delivery error (None: written)."""
    outcomes: list[KafkaError | None] = []
    producer = Producer(login(broker, user, **{"message.timeout.ms": TIMEOUT_S * 1000, **extra}))
    for i in range(count):
        producer.produce(topic, value=f"{user}-{i}".encode(), on_delivery=lambda err, _msg: outcomes.append(err))
    assert producer.flush(TIMEOUT_S) == 0
    return outcomes


def _consume(broker: BrokerProcess, user: str, topic: str) -> tuple[list[bytes], KafkaError | None]:
    """What ``user`` reads of partition 0 from its start (assigned, no group), until its end or
    the first error."""
    consumer = Consumer(login(broker, user, **{"group.id": f"{user}-{uuid.uuid4()}", "enable.auto.commit": False,
                                               "enable.partition.eof": True}))
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    try:
        messages, error = poll_to_end(consumer, TIMEOUT_S)
    finally:
        consumer.close()
    values = [m.value() for m in messages]
    if error is None:
        raise AssertionError(f"{user} read neither to the end of {topic} nor an error: {values}")
    return values, (None if error.code() == KafkaError._PARTITION_EOF else error)


def _end_offset(broker: BrokerProcess, topic: str, partition: int = 0) -> tuple[int, int]:
    """(log start, high watermark) of a partition, as the super user sees them."""
    consumer = Consumer(login(broker, "admin", **{"group.id": f"watermarks-{uuid.uuid4()}"}))
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=TIMEOUT_S)
        return int(low), int(high)
    finally:
        consumer.close()


def _topics(broker: BrokerProcess, user: str) -> set[str]:
    return set(admin(broker, user).list_topics(timeout=TIMEOUT_S).topics)


def _error_code(future: object) -> int | None:
    try:
        future.result(timeout=TIMEOUT_S)  # type: ignore[attr-defined]
    except KafkaException as exc:
        return int(exc.args[0].code())
    return None


def test_a_consumer_reads_only_the_topics_it_may_read_and_sees_no_other(broker: BrokerProcess) -> None:
    readable, hidden, described = _name("a-"), _name("b-"), _name("c-")
    _create(broker, readable, hidden, described)
    for topic in (readable, hidden, described):
        assert _produce(broker, "admin", topic, 3) == [None] * 3
    grant(broker, [allow("User:alice", TOPIC, readable, AclOperation.READ),
                   allow("User:alice", TOPIC, described, AclOperation.DESCRIBE)])

    assert _consume(broker, "alice", readable) == ([b"admin-0", b"admin-1", b"admin-2"], None)
    # Describe but no Read: the partition is known, its Fetch refused.
    values, error = _consume(broker, "alice", described)
    assert values == [] and error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # Not even Describe: the topic is refused without its existence being told, and left out of
    # the list of every topic.
    client = admin(broker, "alice")
    named = client.list_topics(hidden, timeout=TIMEOUT_S).topics[hidden]
    assert named.error is not None and named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert not named.partitions
    seen = _topics(broker, "alice")
    assert readable in seen and described in seen and hidden not in seen
    assert {readable, hidden, described} <= _topics(broker, "admin")  # the super user sees everything
    assert _consume(broker, "admin", hidden)[0] == [b"admin-0", b"admin-1", b"admin-2"]


def _kafka_python_consumer(broker: BrokerProcess, user: str) -> KafkaConsumer:
    return KafkaConsumer(bootstrap_servers=broker.listeners["SASL_PLAINTEXT"], security_protocol="SASL_PLAINTEXT",
                         sasl_mechanism="PLAIN", sasl_plain_username=user, sasl_plain_password=f"{user}-secret",
                         auto_offset_reset="earliest", enable_auto_commit=False, group_id=None)


def _refused_read(consumer: KafkaConsumer) -> None:
    """The consumer's polls raise TOPIC_AUTHORIZATION_FAILED, never returning a record first."""
    with pytest.raises(TopicAuthorizationFailedError):
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            assert not consumer.poll(timeout_ms=500), "read a topic without Read on it"


def test_kafka_python_consumer_is_refused_a_topic_it_may_describe_but_not_read(broker: BrokerProcess) -> None:
    topic = _name("kp-")
    _create(broker, topic)
    assert _produce(broker, "admin", topic, 1) == [None]
    grant(broker, [allow("User:bob", TOPIC, topic, AclOperation.DESCRIBE)])
    consumer = _kafka_python_consumer(broker, "bob")
    try:
        consumer.assign([KafkaPythonPartition(topic, 0)])
        _refused_read(consumer)
    finally:
        consumer.close()


def test_produce_needs_write_on_the_topic_and_a_refused_produce_writes_nothing(broker: BrokerProcess) -> None:
    mine, theirs = _name("out-"), _name("in-")
    _create(broker, mine, theirs)
    # A prefixed ACL covers every topic named so; Read on the other implies Describe only.
    grant(broker, [allow("User:alice", TOPIC, "out-", AclOperation.WRITE, ResourcePatternType.PREFIXED),
                   allow("User:alice", TOPIC, theirs, AclOperation.READ)])
    assert _produce(broker, "alice", mine, 2) == [None, None]
    outcomes = _produce(broker, "alice", theirs, 2)
    assert [e.code() if e else None for e in outcomes] == [KafkaError.TOPIC_AUTHORIZATION_FAILED] * 2
    assert _end_offset(broker, mine) == (0, 2)
    assert _end_offset(broker, theirs) == (0, 0)


def test_deny_beats_allow(broker: BrokerProcess) -> None:
    open_topic, secret = _name("pub-"), _name("secret-")
    _create(broker, open_topic, secret)
    assert _produce(broker, "admin", secret, 1) == [None]
    grant(broker, [allow("User:mirror", TOPIC, "*", AclOperation.ALL),
                   deny("User:mirror", TOPIC, "secret-", AclOperation.READ, ResourcePatternType.PREFIXED)])
    assert _produce(broker, "mirror", open_topic, 1) == [None]
    assert _consume(broker, "mirror", open_topic) == ([b"mirror-0"], None)
    values, error = _consume(broker, "mirror", secret)
    assert values == [] and error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_an_idempotent_producer_needs_idempotent_write_or_write_on_some_topic(broker: BrokerProcess) -> None:
    topic = _name("idem-")
    _create(broker, topic)
    # KIP-679: Write on one topic is enough for a producer id; no IdempotentWrite on the cluster.
    grant(broker, [allow("User:bob", TOPIC, topic, AclOperation.WRITE)])
    assert _produce(broker, "bob", topic, 3, **{"enable.idempotence": True}) == [None] * 3
    assert _end_offset(broker, topic) == (0, 3)


def test_an_idempotent_producer_without_any_write_acl_gets_no_producer_id(bare: BrokerProcess) -> None:
    topic = _name("noidem-")
    _create(bare, topic)
    grant(bare, [allow("User:alice", TOPIC, topic, AclOperation.READ)])  # she may see it, not write it
    errors: list[KafkaError] = []
    producer = Producer(login(bare, "alice", **{"enable.idempotence": True, "error_cb": errors.append}))
    try:
        producer.produce(topic, b"refused")
        producer.flush(TIMEOUT_S)
    except KafkaException as exc:  # librdkafka makes it fatal: the producer stops
        errors.append(exc.args[0])
    assert KafkaError.CLUSTER_AUTHORIZATION_FAILED in [e.code() for e in errors], errors
    assert _end_offset(bare, topic) == (0, 0)


def test_aiokafka_producer_is_refused_a_topic_it_may_only_read(broker: BrokerProcess) -> None:
    topic = _name("aio-")
    _create(broker, topic)
    grant(broker, [allow("User:bob", TOPIC, topic, AclOperation.READ)])

    async def send() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=broker.listeners["SASL_PLAINTEXT"],
                                    security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                                    sasl_plain_username="bob", sasl_plain_password="bob-secret")
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"refused")
        finally:
            await producer.stop()

    with pytest.raises(AioTopicAuthorizationFailed):
        asyncio.run(send())
    assert _end_offset(broker, topic) == (0, 0)


def test_topics_are_created_only_with_create_and_their_configs_shown_only_with_describe_configs(
        broker: BrokerProcess) -> None:
    refused, allowed_topic = _name("x-"), _name("alice-")
    client = admin(broker, "alice")
    code = _error_code(client.create_topics([NewTopic(refused, 1, 1)], request_timeout=TIMEOUT_S)[refused])
    assert code == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert refused not in _topics(broker, "admin")
    grant(broker, [allow("User:alice", TOPIC, "alice-", AclOperation.CREATE, ResourcePatternType.PREFIXED)])
    assert _error_code(client.create_topics([NewTopic(allowed_topic, 2, 1)],
                                            request_timeout=TIMEOUT_S)[allowed_topic]) is None
    super_user = admin(broker)  # Create does not imply Describe: alice may not see it
    assert len(super_user.list_topics(allowed_topic, timeout=TIMEOUT_S).topics[allowed_topic].partitions) == 2


def test_kafka_python_sees_a_created_topics_configs_only_with_describe_configs(broker: BrokerProcess) -> None:
    hidden_configs, shown_configs = _name("kpc-"), _name("kpc-")
    grant(broker, [allow("User:bob", TOPIC, "kpc-", AclOperation.CREATE, ResourcePatternType.PREFIXED)])
    client = KafkaAdminClient(bootstrap_servers=broker.listeners["SASL_PLAINTEXT"], security_protocol="SASL_PLAINTEXT",
                              sasl_mechanism="PLAIN", sasl_plain_username="bob", sasl_plain_password="bob-secret")
    try:
        first = client.create_topics([KafkaPythonTopic(hidden_configs, 2, 1)])["topics"][0]
        assert (first["error_code"], first["topic_config_error_code"]) == (0, KafkaError.TOPIC_AUTHORIZATION_FAILED)
        assert (first["num_partitions"], first.get("configs") or {}) == (-1, {})
        grant(broker, [allow("User:bob", TOPIC, shown_configs, AclOperation.DESCRIBE_CONFIGS)])
        second = client.create_topics([KafkaPythonTopic(shown_configs, 2, 1)])["topics"][0]
        assert (second["error_code"], second["topic_config_error_code"], second["num_partitions"]) == (0, 0, 2)
        assert "retention.ms" in second["configs"]
    finally:
        client.close()
    assert {hidden_configs, shown_configs} <= _topics(broker, "admin")


def test_delete_topics_needs_delete_and_tells_nothing_of_a_topic_not_describable(broker: BrokerProcess) -> None:
    readable, hidden, ghost = _name("del-"), _name("del-"), _name("ghost-")
    _create(broker, readable, hidden)
    grant(broker, [allow("User:alice", TOPIC, readable, AclOperation.READ),
                   allow("User:alice", TOPIC, ghost, AclOperation.DESCRIBE)])
    client = admin(broker, "alice")
    futures = client.delete_topics([readable, hidden, ghost, _name("never-")], request_timeout=TIMEOUT_S)
    codes = [_error_code(f) for f in futures.values()]
    # Describe but no Delete, nothing at all, Describe on a topic that does not exist, nothing at
    # all on a topic that does not exist (as the one that does: its absence is not told).
    assert codes == [KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.TOPIC_AUTHORIZATION_FAILED,
                     KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.TOPIC_AUTHORIZATION_FAILED]
    assert {readable, hidden} <= _topics(broker, "admin")
    grant(broker, [allow("User:alice", TOPIC, readable, AclOperation.DELETE)])
    assert _error_code(client.delete_topics([readable], request_timeout=TIMEOUT_S)[readable]) is None
    wait_until(lambda: readable not in _topics(broker, "admin"), what=f"{readable} deleted")


def test_partitions_and_records_change_only_with_alter_and_delete(broker: BrokerProcess) -> None:
    topic = _name("grow-")
    _create(broker, topic)
    assert _produce(broker, "admin", topic, 4) == [None] * 4
    grant(broker, [allow("User:alice", TOPIC, topic, AclOperation.READ)])
    client = admin(broker, "alice")
    grow = client.create_partitions([NewPartitions(topic, 3)], request_timeout=TIMEOUT_S)[topic]
    assert _error_code(grow) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    trim = client.delete_records([TopicPartition(topic, 0, 2)], request_timeout=TIMEOUT_S)
    assert _error_code(next(iter(trim.values()))) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    super_user = admin(broker)
    assert len(super_user.list_topics(topic, timeout=TIMEOUT_S).topics[topic].partitions) == 1
    assert _end_offset(broker, topic) == (0, 4)
    grant(broker, [allow("User:alice", TOPIC, topic, AclOperation.ALTER),
                   allow("User:alice", TOPIC, topic, AclOperation.DELETE)])
    assert _error_code(client.create_partitions([NewPartitions(topic, 3)], request_timeout=TIMEOUT_S)[topic]) is None
    trim = client.delete_records([TopicPartition(topic, 0, 2)], request_timeout=TIMEOUT_S)
    assert _error_code(next(iter(trim.values()))) is None
    assert len(super_user.list_topics(topic, timeout=TIMEOUT_S).topics[topic].partitions) == 3
    assert _end_offset(broker, topic) == (2, 4)


def _retention(broker: BrokerProcess, user: str, topic: str) -> str:
    client = admin(broker, user)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = client.describe_configs([resource], request_timeout=TIMEOUT_S)[resource].result(timeout=TIMEOUT_S)
    return str(configs["retention.ms"].value)


def test_configs_are_read_with_describe_configs_and_changed_with_alter_configs(broker: BrokerProcess) -> None:
    topic = _name("conf-")
    _create(broker, topic)
    grant(broker, [allow("User:alice", TOPIC, topic, AclOperation.READ)])
    client = admin(broker, "alice")
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    assert _error_code(client.describe_configs([resource], request_timeout=TIMEOUT_S)[resource]) == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    broker_resource = ConfigResource(ConfigResource.Type.BROKER, "0")
    assert _error_code(client.describe_configs([broker_resource], request_timeout=TIMEOUT_S)[broker_resource]) == \
        KafkaError.CLUSTER_AUTHORIZATION_FAILED
    before = _retention(broker, "admin", topic)
    change = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "12345", incremental_operation=AlterConfigOpType.SET)])
    assert _error_code(client.incremental_alter_configs([change], request_timeout=TIMEOUT_S)[change]) == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _retention(broker, "admin", topic) == before != "12345"
    # AlterConfigs implies DescribeConfigs.
    grant(broker, [allow("User:alice", TOPIC, topic, AclOperation.ALTER_CONFIGS)])
    assert _error_code(client.incremental_alter_configs([change], request_timeout=TIMEOUT_S)[change]) is None
    assert _retention(broker, "alice", topic) == "12345"


def test_a_topic_is_auto_created_only_with_create(broker: BrokerProcess) -> None:
    refused, created = _name("auto-no-"), _name("auto-yes-")
    grant(broker, [allow("User:bob", TOPIC, "auto-", AclOperation.DESCRIBE, ResourcePatternType.PREFIXED),
                   allow("User:bob", TOPIC, "auto-yes-", AclOperation.CREATE, ResourcePatternType.PREFIXED)])
    # A producer's metadata request asks for auto-creation (librdkafka's allow.auto.create.topics).
    producer = Producer(login(broker, "bob"))
    answer = producer.list_topics(refused, timeout=TIMEOUT_S).topics[refused]
    assert answer.error is not None and answer.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    wait_until(lambda: not producer.list_topics(created, timeout=TIMEOUT_S).topics[created].error,
               what=f"{created} auto-created")
    topics = _topics(broker, "admin")
    assert created in topics and refused not in topics


def test_read_taken_away_during_a_fetch_session_stops_the_next_read(broker: BrokerProcess) -> None:
    # kafka-python fetches in sessions (KIP-227): after the first full fetch it sends incremental
    # ones, whose partitions the broker reads again only when they change: the new records make
    # this one change, and its read is refused.
    topic = _name("session-")
    _create(broker, topic)
    assert _produce(broker, "admin", topic, 2) == [None, None]
    grant(broker, [allow("User:bob", TOPIC, topic, AclOperation.READ)])
    consumer = _kafka_python_consumer(broker, "bob")
    try:
        consumer.assign([KafkaPythonPartition(topic, 0)])
        values: list[bytes] = []
        wait_until(lambda: bool(values.extend(r.value for rs in consumer.poll(timeout_ms=500).values() for r in rs))
                   or len(values) >= 2, what="bob's first two records", timeout_s=TIMEOUT_S)
        assert values == [b"admin-0", b"admin-1"]
        revoke(broker, [AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:bob", None,
                                         AclOperation.READ, AclPermissionType.ALLOW)])
        grant(broker, [allow("User:bob", TOPIC, topic, AclOperation.DESCRIBE)])  # still known, not readable
        assert _produce(broker, "admin", topic, 2) == [None, None]
        _refused_read(consumer)
    finally:
        consumer.close()


@contextmanager
def _logged_in(broker: BrokerProcess, user: str) -> Iterator[socket.socket]:
    """A raw connection authenticated as ``user`` (SASL/PLAIN), for the requests and fields the
    clients above never send: a follower's fetch, authorized operations, a transactional id."""
    host, port = broker.listeners["SASL_PLAINTEXT"].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=TIMEOUT_S) as sock:
        assert call(sock, SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == ErrorCode.NONE
        token = f"\0{user}\0{user}-secret".encode()
        assert call(sock, SaslAuthenticateRequest(auth_bytes=token), 2, correlation_id=2).error_code == 0
        yield sock


def _bits(*operations: AclOperation) -> int:
    return sum(1 << int(op.value) for op in operations)


def test_the_requests_clients_rarely_send_are_checked_as_kafka_checks_them(broker: BrokerProcess) -> None:
    topic, hidden = _name("raw-"), _name("raw-hidden-")
    _create(broker, topic, hidden)
    grant(broker, [allow("User:alice", TOPIC, topic, AclOperation.READ)])
    with _logged_in(broker, "admin") as sock:
        asked = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=hidden)])
        hidden_id = call(sock, asked, 12, correlation_id=3).topics[0].topic_id
    fetch_topic = FetchRequest.FetchTopic(topic=topic, partitions=[FetchRequest.FetchPartition(partition=0)])
    with _logged_in(broker, "alice") as sock:
        # A follower's fetch needs ClusterAction, whatever the principal may do on the topic.
        follower = call(sock, FetchRequest(replica_id=1, max_wait_ms=0, topics=[fetch_topic]), 12, correlation_id=3)
        assert [p.error_code for t in follower.responses for p in t.partitions] == [
            ErrorCode.TOPIC_AUTHORIZATION_FAILED]
        consumer = call(sock, FetchRequest(replica_id=-1, max_wait_ms=0, topics=[fetch_topic]), 12, correlation_id=4)
        assert [p.error_code for t in consumer.responses for p in t.partitions] == [ErrorCode.NONE]
        # OffsetForLeaderEpoch: Describe on the topic (Read implies it) is enough, even for a replica id.
        epochs = call(sock, OffsetForLeaderEpochRequest(replica_id=1, topics=[
            OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic=name, partitions=[
                OffsetForLeaderEpochRequest.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1)])
            for name in (topic, hidden)]), 4, correlation_id=5)
        assert [p.error_code for t in epochs.topics for p in t.partitions] == [
            ErrorCode.NONE, ErrorCode.TOPIC_AUTHORIZATION_FAILED]
        offsets = call(sock, ListOffsetsRequest(replica_id=-1, topics=[
            ListOffsetsRequest.ListOffsetsTopic(name=name, partitions=[
                ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)])
            for name in (topic, hidden)]), 7, correlation_id=6)
        assert [p.error_code for t in offsets.topics for p in t.partitions] == [
            ErrorCode.NONE, ErrorCode.TOPIC_AUTHORIZATION_FAILED]
        # Metadata: the operations she may do; none on the cluster without Describe on it; a
        # topic asked for by id that she may not describe is refused without its name.
        metadata = call(sock, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                              include_cluster_authorized_operations=True,
                                              include_topic_authorized_operations=True), 10, correlation_id=7)
        assert metadata.cluster_authorized_operations == 0
        assert metadata.topics[0].topic_authorized_operations == _bits(AclOperation.READ, AclOperation.DESCRIBE)
        by_id = call(sock, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=None,
                                                                                        topic_id=hidden_id)]),
                     12, correlation_id=8)
        assert [(t.error_code, t.name, t.topic_id) for t in by_id.topics] == [
            (ErrorCode.TOPIC_AUTHORIZATION_FAILED, None, hidden_id)]
        # A transactional id needs Write on it, before anything else is looked at.
        init = call(sock, InitProducerIdRequest(transactional_id="alice-tx", transaction_timeout_ms=60000), 4,
                    correlation_id=9)
        assert init.error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        produce = call(sock, ProduceRequest(transactional_id="alice-tx", acks=1, timeout_ms=1000, topic_data=[
            ProduceRequest.TopicProduceData(name=topic, partition_data=[
                ProduceRequest.PartitionProduceData(index=0, records=b"")])]), 9, correlation_id=10)
        assert [p.error_code for t in produce.responses for p in t.partition_responses] == [
            ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED]


def test_link_truncate_needs_alter_on_the_topic_or_cluster_action_and_a_refusal_changes_nothing(
        broker: BrokerProcess) -> None:
    topic = _name("failback-")
    _create(broker, topic)
    assert _produce(broker, "admin", topic, 3) == [None] * 3
    grant(broker, [allow("User:alice", TOPIC, topic, AclOperation.READ)])
    cut = LinkTruncateRequest(link_name="back", timeout_ms=5000, topics=[LinkTruncateRequest.LinkTruncateTopic(
        name=topic, partitions=[LinkTruncateRequest.LinkTruncatePartition(index=0, truncate_offset=0)])])
    with _logged_in(broker, "alice") as sock:
        denied = call(sock, cut, 0, correlation_id=3)
    assert [(p.error_code, p.log_end_offset) for t in denied.topics for p in t.partitions] == [
        (ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1)]
    assert _end_offset(broker, topic) == (0, 3)
    grant(broker, [allow("User:alice", TOPIC, topic, AclOperation.ALTER)])
    with _logged_in(broker, "alice") as sock:
        # Allowed now, and refused on its merits: a log that shares no batch with the new primary's.
        refused = call(sock, cut, 0, correlation_id=3)
    [answer] = [p for t in refused.topics for p in t.partitions]
    assert answer.error_code == ErrorCode.INVALID_REQUEST and "shares no batch" in (answer.error_message or "")
    assert _end_offset(broker, topic) == (0, 3)


def test_link_offset_commit_needs_read_on_the_group_and_alter_on_the_topic(broker: BrokerProcess) -> None:
    """A mirror's copy of a group's offsets (LinkOffsetCommit) needs Read on the group, as
    OffsetCommit, and on the topic what LinkAppend needs (Alter, or ClusterAction): Read on a
    topic lets a consumer commit its own offsets, never forge the mirror's."""
    topic = _name("linked-")
    client = admin(broker)
    futures = client.create_topics([NewTopic(topic, 1, 1, config={"causeway.mirror.name": "dr"})],
                                   request_timeout=TIMEOUT_S)
    for future in futures.values():
        future.result(timeout=TIMEOUT_S)
    grant(broker, [allow("User:alice", TOPIC, topic, AclOperation.READ)])

    def commit(group: str) -> list[int]:
        request = LinkOffsetCommitRequest(link_name="dr", group_id=group, topics=[
            LinkOffsetCommitRequest.LinkOffsetCommitTopic(name=topic, partitions=[
                LinkOffsetCommitRequest.LinkOffsetCommitPartition(partition_index=0, committed_offset=0)])])
        with _logged_in(broker, "alice") as sock:
            return [p.error_code for t in call(sock, request, 0, correlation_id=3).topics for p in t.partitions]

    assert commit("not-alices") == [ErrorCode.GROUP_AUTHORIZATION_FAILED]
    assert commit("alice-linked") == [ErrorCode.TOPIC_AUTHORIZATION_FAILED]
    grant(broker, [allow("User:alice", TOPIC, topic, AclOperation.ALTER)])
    # Taken now (the offsets topic may still be starting: its coordinator not available yet).
    wait_until(lambda: commit("alice-linked") == [ErrorCode.NONE], what="the commit taken", timeout_s=TIMEOUT_S)


def test_link_leader_epoch_needs_alter_on_the_topic_or_cluster_action_and_a_refusal_raises_nothing(
        broker: BrokerProcess) -> None:
    topic = _name("mirrored-")
    client = admin(broker)  # held: librdkafka fails the futures of a handle that is gone
    futures = client.create_topics([NewTopic(topic, 1, 1, config={MIRROR_NAME_CONFIG: "east"})],
                                   request_timeout=TIMEOUT_S)
    for future in futures.values():
        future.result(timeout=TIMEOUT_S)
    grant(broker, [allow("User:alice", TOPIC, topic, AclOperation.READ)])

    def raise_to(user: str, epoch: int) -> tuple[int, int]:
        asked = LinkLeaderEpochRequest.LinkLeaderEpochPartition(index=0, source_leader_epoch=epoch)
        request = LinkLeaderEpochRequest(link_name="east", topics=[LinkLeaderEpochRequest.LinkLeaderEpochTopic(
            name=topic, partitions=[asked])])
        with _logged_in(broker, user) as sock:
            [answer] = [p for t in call(sock, request, 0, correlation_id=3).topics for p in t.partitions]
        return answer.error_code, answer.leader_epoch

    assert raise_to("alice", 6) == (ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1)
    assert raise_to("admin", 0) == (ErrorCode.NONE, 0)  # asking for less changes nothing: still 0
    grant(broker, [allow("User:alice", TOPIC, topic, AclOperation.ALTER)])
    assert raise_to("alice", 6) == (ErrorCode.NONE, 6)
