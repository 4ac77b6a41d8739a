"""confluent-kafka's transactional producer against Causeway's transaction coordinator (issue 23):
init_transactions, begin, produce to several partitions, send_offsets_to_transaction, commit and
abort, read back by read_committed consumers (committed records only, in order) and by
read_uncommitted ones (everything); two producers on one transactional id (the older is fenced);
a transaction past its timeout; aiokafka's and kafka-python's transactional APIs; the
coordinator's state across a restart.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from kafka import KafkaProducer

from broker.protocol.errors import ErrorCode
from broker.protocol.messages import (
    DescribeTransactionsRequest,
    FindCoordinatorRequest,
    InitProducerIdRequest,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListTransactionsRequest,
    TxnOffsetCommitRequest,
)
from deploy.broker_process import BrokerProcess
from deploy.kafka_socket import call, connect
from tests.support.polling import wait_until
from tests.support.standalone import standalone_broker

TOPIC = "txn-out"
PARTITIONS = 3
TIMEOUT_S = 60


@pytest.fixture
def txn_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    # A short abort check, so the timeout test's abort comes soon after its transaction.timeout.ms.
    with standalone_broker(tmp_path / "broker", f"num.partitions={PARTITIONS}",
                           "transaction.abort.timed.out.transaction.cleanup.interval.ms=200") as broker:
        yield broker


def producer(broker: BrokerProcess, transactional_id: str, **extra: object) -> Producer:
    return Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": transactional_id,
                     "partitioner": "consistent_random", **extra})


def read_all(broker: BrokerProcess, isolation: str, count: int, topic: str = TOPIC) -> dict[int, list[bytes]]:
    """Each partition's values from the start, until `count` have come, then one more bounded
    poll that must bring nothing more (so a record that should not be seen would show)."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"reader-{isolation}",
                         "enable.auto.commit": False, "isolation.level": isolation})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    seen: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}

    def poll(timeout: float) -> None:
        for msg in consumer.consume(100, timeout):
            assert msg.error() is None, msg.error()
            seen[msg.partition()].append(msg.value())

    try:
        for _ in range(120):
            if sum(map(len, seen.values())) >= count:
                break
            poll(0.5)
        poll(1.5)
    finally:
        consumer.close()
    return seen


def send(p: Producer, prefix: str) -> None:
    for partition in range(PARTITIONS):
        for i in range(3):
            p.produce(TOPIC, f"{prefix}-{partition}-{i}".encode(), partition=partition)


def test_commit_abort_and_offsets_in_a_transaction(txn_broker: BrokerProcess) -> None:
    p = producer(txn_broker, "app-1")
    p.init_transactions(TIMEOUT_S)
    p.begin_transaction()
    send(p, "one")
    p.commit_transaction(TIMEOUT_S)
    p.begin_transaction()
    send(p, "aborted")
    p.flush(TIMEOUT_S)  # written to the log, then aborted: never seen by read_committed
    p.abort_transaction(TIMEOUT_S)

    # A consume-transform-produce step: the group's offsets commit with the records.
    group = Consumer({"bootstrap.servers": txn_broker.bootstrap, "group.id": "etl", "enable.auto.commit": False})
    unstable = Consumer({"bootstrap.servers": txn_broker.bootstrap, "group.id": "etl", "enable.auto.commit": False,
                         "isolation.level": "read_uncommitted"})
    try:
        p.begin_transaction()
        send(p, "two")
        offsets = [TopicPartition(TOPIC, 0, 42)]
        p.send_offsets_to_transaction(offsets, group.consumer_group_metadata(), TIMEOUT_S)
        # Not visible before the commit: without require_stable the last committed offset (none);
        # with it (librdkafka's read_committed default, KIP-447) UNSTABLE_OFFSET_COMMIT, which
        # the client retries until its timeout.
        assert unstable.committed([TopicPartition(TOPIC, 0)], TIMEOUT_S)[0].offset < 0
        with pytest.raises(KafkaException) as unstable_answer:
            group.committed([TopicPartition(TOPIC, 0)], 2)
        assert unstable_answer.value.args[0].code() in (KafkaError._TIMED_OUT, KafkaError.UNSTABLE_OFFSET_COMMIT)
        p.commit_transaction(TIMEOUT_S)
        # The COMMIT marker reaches the group's partition after EndTxn is answered (Kafka's order).
        wait_until(lambda: group.committed([TopicPartition(TOPIC, 0)], TIMEOUT_S)[0].offset == 42,
                   timeout_s=TIMEOUT_S, what="the transaction's offsets to be committed")
    finally:
        group.close()
        unstable.close()

    committed = read_all(txn_broker, "read_committed", 2 * 3 * PARTITIONS)
    for partition in range(PARTITIONS):
        assert committed[partition] == [f"{prefix}-{partition}-{i}".encode()
                                        for prefix in ("one", "two") for i in range(3)]
    everything = read_all(txn_broker, "read_uncommitted", 3 * 3 * PARTITIONS)
    for partition in range(PARTITIONS):
        assert everything[partition] == [f"{prefix}-{partition}-{i}".encode()
                                         for prefix in ("one", "aborted", "two") for i in range(3)]


def test_a_second_producer_on_the_id_fences_the_first(txn_broker: BrokerProcess) -> None:
    zombie = producer(txn_broker, "shared")
    zombie.init_transactions(TIMEOUT_S)
    zombie.begin_transaction()
    send(zombie, "zombie")
    zombie.flush(TIMEOUT_S)
    with connect(txn_broker.bootstrap, timeout_s=TIMEOUT_S) as sock:
        described = call(sock, DescribeTransactionsRequest(transactional_ids=["shared", "nobody"]), 0)
        listed = call(sock, ListTransactionsRequest(state_filters=["Ongoing", "Bogus"]), 1, 2)
    shared, nobody = described.transaction_states
    assert (shared.error_code, shared.transaction_state, shared.producer_epoch) == (ErrorCode.NONE, "Ongoing", 0)
    assert [(t.topic, t.partitions) for t in shared.topics] == [(TOPIC, list(range(PARTITIONS)))]
    assert nobody.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    assert [(t.transactional_id, t.transaction_state) for t in listed.transaction_states] == [("shared", "Ongoing")]
    assert listed.unknown_state_filters == ["Bogus"]

    successor = producer(txn_broker, "shared")
    successor.init_transactions(TIMEOUT_S)  # aborts the zombie's open transaction first
    successor.begin_transaction()
    send(successor, "successor")
    successor.commit_transaction(TIMEOUT_S)

    with pytest.raises(KafkaException) as caught:
        zombie.commit_transaction(TIMEOUT_S)
    assert caught.value.args[0].code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                           KafkaError.INVALID_PRODUCER_EPOCH)

    committed = read_all(txn_broker, "read_committed", 3 * PARTITIONS)
    for partition in range(PARTITIONS):
        assert committed[partition] == [f"successor-{partition}-{i}".encode() for i in range(3)]


def test_a_transaction_past_its_timeout_is_aborted_by_the_coordinator(txn_broker: BrokerProcess) -> None:
    p = producer(txn_broker, "slow", **{"transaction.timeout.ms": 1000})
    p.init_transactions(TIMEOUT_S)
    p.begin_transaction()
    send(p, "late")
    p.flush(TIMEOUT_S)
    # The coordinator aborts it (epoch bumped): each partition's last stable offset passes the
    # records and the ABORT marker, so read_committed readers are not held up by it...
    with connect(txn_broker.bootstrap, timeout_s=TIMEOUT_S) as sock:
        wait_until(lambda: all(_stable_end(sock, partition) == 4 for partition in range(PARTITIONS)),
                   timeout_s=TIMEOUT_S, what="the coordinator aborting the timed-out transaction")
    assert read_all(txn_broker, "read_committed", 0) == {p: [] for p in range(PARTITIONS)}
    # ... and the producer can no longer commit it.
    with pytest.raises(KafkaException):
        p.commit_transaction(TIMEOUT_S)


def _stable_end(sock: socket.socket, partition: int) -> int:
    """The partition's read_committed end (its last stable offset)."""
    response = call(sock, ListOffsetsRequest(replica_id=-1, isolation_level=1, topics=[
        ListOffsetsRequest.ListOffsetsTopic(name=TOPIC, partitions=[
            ListOffsetsRequest.ListOffsetsPartition(partition_index=partition, timestamp=-1)])]), 7, partition + 1)
    assert isinstance(response, ListOffsetsResponse)
    part = response.topics[0].partitions[0]
    assert part.error_code == ErrorCode.NONE
    return int(part.offset)


def test_aiokafka_and_kafka_python_transactions(txn_broker: BrokerProcess) -> None:
    """The other Python clients' transactional APIs: aiokafka's `transaction()` context (commit on
    exit, abort on an exception) and kafka-python's init/begin/commit/abort."""

    async def aio() -> None:
        p = AIOKafkaProducer(bootstrap_servers=txn_broker.bootstrap, transactional_id="aio-tx")
        await p.start()
        try:
            async with p.transaction():
                await p.send_and_wait("aio", b"a-0", partition=0)
                await p.send_and_wait("aio", b"a-1", partition=1)
            with pytest.raises(RuntimeError):
                async with p.transaction():
                    await p.send_and_wait("aio", b"aborted", partition=0)
                    raise RuntimeError("abort this transaction")
        finally:
            await p.stop()

    asyncio.run(asyncio.wait_for(aio(), TIMEOUT_S))
    kp = KafkaProducer(bootstrap_servers=txn_broker.bootstrap, transactional_id="kp-tx")
    try:
        kp.init_transactions()
        kp.begin_transaction()
        kp.send("kp", b"k-0", partition=0)
        kp.send("kp", b"k-2", partition=2)
        kp.commit_transaction()
        kp.begin_transaction()
        kp.send("kp", b"aborted", partition=0)
        kp.flush()
        kp.abort_transaction()
    finally:
        kp.close()
    assert read_all(txn_broker, "read_committed", 2, "aio") == {0: [b"a-0"], 1: [b"a-1"], 2: []}
    assert read_all(txn_broker, "read_committed", 2, "kp") == {0: [b"k-0"], 1: [], 2: [b"k-2"]}


def test_the_coordinator_reloads_its_ids_after_a_restart(txn_broker: BrokerProcess) -> None:
    """The transactional id's producer and epoch come back from `__transaction_state`: after a
    restart, InitProducerId gives the same producer id with the next epoch."""

    def init() -> tuple[int, int]:
        with connect(txn_broker.bootstrap, timeout_s=TIMEOUT_S) as sock:
            found = call(sock, FindCoordinatorRequest(key_type=1, key="kept", coordinator_keys=["kept"]), 3)
            if found.error_code != ErrorCode.NONE:
                return -1, -1
            answer = call(sock, InitProducerIdRequest(transactional_id="kept", transaction_timeout_ms=60000), 4, 2)
            return (answer.producer_id, answer.producer_epoch) if answer.error_code == ErrorCode.NONE else (-1, -1)

    first: list[tuple[int, int]] = []
    wait_until(lambda: first.append(init()) or first[-1][0] >= 0, timeout_s=TIMEOUT_S, what="a producer id")
    producer_id, epoch = first[-1]
    txn_broker.restart()
    again: list[tuple[int, int]] = []
    wait_until(lambda: again.append(init()) or again[-1][0] >= 0, timeout_s=TIMEOUT_S,
               what="the coordinator after the restart")
    assert again[-1] == (producer_id, epoch + 1)


def test_txn_offset_commits_of_a_foreign_member_or_generation_are_refused(txn_broker: BrokerProcess) -> None:
    """TxnOffsetCommit v3 (KIP-447) names the consumer's member and generation: one not of the
    group is refused as Kafka refuses it, and nothing is held for the transaction."""
    Part = TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition

    def commit(sock: socket.socket, correlation: int, **member: object) -> list[int]:
        answer = call(sock, TxnOffsetCommitRequest(
            transactional_id="t", group_id="nobody-here", producer_id=1, producer_epoch=0, **member,
            topics=[TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(
                name=TOPIC, partitions=[Part(partition_index=0, committed_offset=7)])]), 3, correlation)
        return [p.error_code for t in answer.topics for p in t.partitions]

    Producer({"bootstrap.servers": txn_broker.bootstrap}).list_topics(TOPIC, TIMEOUT_S)  # creates the topic
    with connect(txn_broker.bootstrap, timeout_s=TIMEOUT_S) as sock:
        wait_until(lambda: call(sock, FindCoordinatorRequest(key_type=0, key="nobody-here"), 3).error_code
                   == ErrorCode.NONE, timeout_s=TIMEOUT_S, what="the group coordinator")
        assert commit(sock, 2, member_id="ghost", generation_id=1) == [ErrorCode.UNKNOWN_MEMBER_ID]
        assert commit(sock, 3, generation_id=5) == [ErrorCode.ILLEGAL_GENERATION]
    consumer = Consumer({"bootstrap.servers": txn_broker.bootstrap, "group.id": "nobody-here",
                         "isolation.level": "read_committed"})
    try:
        # Nothing undecided is held for the group (a held commit would be UNSTABLE_OFFSET_COMMIT).
        assert consumer.committed([TopicPartition(TOPIC, 0)], TIMEOUT_S)[0].offset < 0
    finally:
        consumer.close()
