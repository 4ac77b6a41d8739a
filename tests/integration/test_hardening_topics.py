"""Issue 10, items 3 and 8, against a real broker process: partition counts a client asks for
are bounded (refused with POLICY_VIOLATION at no cost), a large creation leaves the broker
answering, and Kafka's internal topics cannot be deleted, repartitioned, written or trimmed."""

from __future__ import annotations

import selectors
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages import (
    ApiVersionsRequest,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    MetadataRequest,
    MetadataResponse,
)
from deploy.broker_process import BrokerProcess
from deploy.child_process import fd_count, rss_bytes
from deploy.kafka_socket import ask, call, connect, decode_response, message_frame, read_frame
from tests.support.polling import wait_until

MiB = 1024 * 1024


def admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def error_of(future: object) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        future.result(timeout=60)  # type: ignore[attr-defined]
    error = info.value.args[0]
    assert isinstance(error, KafkaError)
    return error


def test_absurd_partition_counts_are_refused_at_no_cost(broker: BrokerProcess) -> None:
    # librdkafka refuses counts above 100,000 itself: a hostile client sends the frames directly.
    client = admin(broker)
    client.create_topics([NewTopic("small", 1, 1)])["small"].result(timeout=60)
    assert broker.proc is not None
    pid = broker.proc.pid
    rss_before, fds_before = rss_bytes(pid), fd_count(pid)

    create = CreateTopicsRequest(
        topics=[CreateTopicsRequest.CreatableTopic(name="huge", num_partitions=500_000, replication_factor=1)],
        timeout_ms=30_000,
    )
    created: CreateTopicsResponse = ask(broker.bootstrap, create, 4, correlation_id=7, timeout_s=120)
    assert created.topics[0].error_code == ErrorCode.POLICY_VIOLATION
    assert "max.partitions.per.request=5000" in (created.topics[0].error_message or "")
    grow = CreatePartitionsRequest(
        topics=[CreatePartitionsRequest.CreatePartitionsTopic(name="small", count=500_000, assignments=None)],
        timeout_ms=30_000,
    )
    grown: CreatePartitionsResponse = ask(broker.bootstrap, grow, 1, correlation_id=7, timeout_s=120)
    assert grown.results[0].error_code == ErrorCode.POLICY_VIOLATION
    assert "max.partitions.per.request=5000" in (grown.results[0].error_message or "")

    # Nothing was built for the refused requests: no directories, no descriptors, no memory.
    assert not any(p.name.startswith("huge-") for p in broker.data_dir.iterdir())
    assert not (broker.data_dir / "small-1").exists()
    assert fd_count(pid) <= fds_before + 2
    assert rss_bytes(pid) < rss_before + 16 * MiB
    metadata = client.list_topics(timeout=30)
    assert "huge" not in metadata.topics
    assert len(metadata.topics["small"].partitions) == 1


def test_max_broker_partitions_bounds_every_creation(tmp_path: Path) -> None:
    # __consumer_offsets holds 50 partitions; 120 leaves room for 70 more.
    process = BrokerProcess(tmp_path / "b", overrides=("max.broker.partitions=120",)).start()
    try:
        client = admin(process)
        client.create_topics([NewTopic("fits", 60, 1)])["fits"].result(timeout=60)
        refused = error_of(client.create_topics([NewTopic("too-many", 20, 1)])["too-many"])
        assert refused.code() == KafkaError.POLICY_VIOLATION
        assert "max.broker.partitions=120" in refused.str()
        grown = error_of(client.create_partitions([NewPartitions("fits", 80)])["fits"])
        assert grown.code() == KafkaError.POLICY_VIOLATION
        client.create_partitions([NewPartitions("fits", 70)])["fits"].result(timeout=60)
    finally:
        process.stop()


def test_a_large_creation_leaves_the_broker_answering_and_survives_a_restart(broker: BrokerProcess) -> None:
    count = 2000
    request = CreateTopicsRequest(
        topics=[CreateTopicsRequest.CreatableTopic(name="wide", num_partitions=count, replication_factor=1)],
        timeout_ms=120_000,
    )
    with connect(broker.bootstrap, timeout_s=120) as creating, connect(broker.bootstrap, timeout_s=120) as other:
        creating.sendall(message_frame(request, 4, 1))
        # The creation is under way once its first partition directories exist...
        wait_until(lambda: (broker.data_dir / "wide-0").exists(), what="the first partition of 'wide'")
        # ... and while it runs, another client's ApiVersions is answered: its answer arrives
        # before the CreateTopics answer does (an event loop blocked by the creation would
        # answer the CreateTopics first).
        assert call(other, ApiVersionsRequest(), 0, 2).error_code == ErrorCode.NONE
        # Metadata asked meanwhile names a leader only for partitions whose log exists: the rest
        # are LEADER_NOT_AVAILABLE, so no client sends a produce that would find no partition.
        asked = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="wide")])
        metadata: MetadataResponse = call(other, asked, 8, 3)
        partitions = metadata.topics[0].partitions
        for p in partitions:
            if p.leader_id == -1:
                assert p.error_code == ErrorCode.LEADER_NOT_AVAILABLE
            else:
                assert p.error_code == ErrorCode.NONE
                assert (broker.data_dir / f"wide-{p.partition_index}").exists(), p
        # A small creation of another topic does not queue behind the large one (found by
        # deploy/fuzz: every admin request used to wait for the whole creation).
        small = CreateTopicsRequest(
            topics=[CreateTopicsRequest.CreatableTopic(name="small", num_partitions=1, replication_factor=1)],
            timeout_ms=120_000,
        )
        made = call(other, small, 4, 4).topics[0]
        assert (made.name, made.error_code) == ("small", ErrorCode.NONE)
        with selectors.DefaultSelector() as sel:
            sel.register(creating, selectors.EVENT_READ)
            assert not sel.select(timeout=0), "the large CreateTopics answered before the concurrent requests"
        answer = read_frame(creating)
    result = decode_response(answer, ApiKey.CREATE_TOPICS, 4, 1).topics[0]
    assert (result.name, result.error_code) == ("wide", ErrorCode.NONE)
    assert sum(1 for p in broker.data_dir.iterdir() if p.name.startswith("wide-")) == count

    broker.restart()
    metadata = admin(broker).list_topics(timeout=30)
    assert len(metadata.topics["wide"].partitions) == count
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    producer.produce("wide", b"last one", partition=count - 1)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "w", "enable.auto.commit": False})
    consumer.assign([TopicPartition("wide", count - 1, 0)])
    try:
        values = []
        for _ in range(30):  # bounded: at most 30 polls of a second
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                values.append(msg.value())
                break
        assert values == [b"last one"]
    finally:
        consumer.close()


def test_internal_topics_cannot_be_deleted_or_changed(broker: BrokerProcess) -> None:
    client = admin(broker)
    client.create_topics([NewTopic("orders", 1, 1)])["orders"].result(timeout=60)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    for i in range(5):
        producer.produce("orders", f"v{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "keeper", "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition("orders", 0, 4)], asynchronous=False)
    finally:
        consumer.close()

    deleted = error_of(client.delete_topics(["__consumer_offsets"], operation_timeout=30)["__consumer_offsets"])
    assert deleted.code() == KafkaError.TOPIC_EXCEPTION  # INVALID_TOPIC_EXCEPTION (17)
    grown = error_of(client.create_partitions([NewPartitions("__consumer_offsets", 60)])["__consumer_offsets"])
    assert grown.code() == KafkaError.TOPIC_EXCEPTION
    writer = Producer({"bootstrap.servers": broker.bootstrap, "retries": 0, "enable.idempotence": False})
    failures: list[KafkaError] = []
    writer.produce("__consumer_offsets", b"forged", partition=0,
                   on_delivery=lambda err, _msg: failures.append(err) if err is not None else None)
    writer.flush(30)
    assert [e.code() for e in failures] == [KafkaError.TOPIC_EXCEPTION]

    # The topic and the group's committed offset are still there, after a restart too.
    broker.restart()
    metadata = admin(broker).list_topics(timeout=30)
    assert len(metadata.topics["__consumer_offsets"].partitions) == 50
    reader = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "keeper", "enable.auto.commit": False})
    try:
        committed = reader.committed([TopicPartition("orders", 0)], timeout=30)
        assert committed[0].offset == 4
    finally:
        reader.close()
