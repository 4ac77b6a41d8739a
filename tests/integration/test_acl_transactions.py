"""A transactional producer's requests under ACLs, as Kafka's KafkaApis authorizes them: Describe
on the TransactionalId to find its coordinator, Write on it for InitProducerId,
AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and TxnOffsetCommit; Write on each topic a
transaction adds, Read on the group and topics of its offsets; ClusterAction for the brokers'
AddPartitionsToTxn v4+. Refused requests change nothing.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AclOperation, NewTopic, ResourceType

from broker.protocol.errors import ErrorCode
from broker.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
    TxnOffsetCommitRequest,
)
from deploy.broker_process import BrokerProcess
from deploy.kafka_socket import call
from tests.support.secured import TIMEOUT_S, acl_broker, admin, allow, grant, login

Topic = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[BrokerProcess]:
    """ACLs on, nothing allowed without one. alice: the transactional id "tx-a" (Describe,
    Write), Write and Describe on topic "paid", Read on group "g" and topic "paid"; Describe
    only on "tx-d"."""
    process = acl_broker(tmp_path / "secured").start()
    try:
        client = admin(process)
        for future in client.create_topics([NewTopic("paid", 2, 1), NewTopic("closed", 1, 1)]).values():
            future.result(timeout=TIMEOUT_S)
        grant(process, [
            allow("User:alice", ResourceType.TRANSACTIONAL_ID, "tx-a", AclOperation.DESCRIBE),
            allow("User:alice", ResourceType.TRANSACTIONAL_ID, "tx-a", AclOperation.WRITE),
            allow("User:alice", ResourceType.TRANSACTIONAL_ID, "tx-d", AclOperation.DESCRIBE),
            allow("User:alice", ResourceType.TOPIC, "paid", AclOperation.WRITE),
            allow("User:alice", ResourceType.TOPIC, "paid", AclOperation.READ),
            allow("User:alice", ResourceType.TOPIC, "paid", AclOperation.DESCRIBE),
            allow("User:alice", ResourceType.GROUP, "g", AclOperation.READ),
        ])
        yield process
    finally:
        process.stop()


class Alice:
    """alice's raw requests over one SASL connection."""

    def __init__(self, broker: BrokerProcess) -> None:
        host, port = broker.listeners["SASL_PLAINTEXT"].rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=TIMEOUT_S)
        assert call(self.sock, SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == ErrorCode.NONE
        token = b"\0alice\0alice-secret"
        assert call(self.sock, SaslAuthenticateRequest(auth_bytes=token), 2, 2).error_code == ErrorCode.NONE
        self.correlation = 2

    def __call__(self, request: object, version: int) -> Any:
        self.correlation += 1
        return call(self.sock, request, version, self.correlation)


def test_transactions_need_their_acls(secured: BrokerProcess) -> None:
    # The whole flow works with alice's rights.
    producer = Producer(login(secured, "alice", **{"transactional.id": "tx-a"}))
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce("paid", b"one", partition=0)
    group = Consumer(login(secured, "alice", **{"group.id": "g"}))
    try:
        producer.send_offsets_to_transaction([TopicPartition("paid", 1, 5)], group.consumer_group_metadata(),
                                             TIMEOUT_S)
    finally:
        group.close()
    producer.commit_transaction(TIMEOUT_S)

    # Another id: FindCoordinator needs Describe on it.
    stranger = Producer(login(secured, "alice", **{"transactional.id": "tx-other"}))
    with pytest.raises(KafkaException) as caught:
        stranger.init_transactions(TIMEOUT_S)
    assert "authorization" in str(caught.value).lower()

    alice = Alice(secured)
    try:
        # Describe without Write on "tx-d": every transactional request is refused.
        init = alice(InitProducerIdRequest(transactional_id="tx-d", transaction_timeout_ms=60000), 4)
        assert init.error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        end = alice(EndTxnRequest(transactional_id="tx-d", producer_id=1, producer_epoch=0, committed=True), 3)
        assert end.error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        added = alice(AddPartitionsToTxnRequest(v3_and_below_transactional_id="tx-d", v3_and_below_producer_id=1,
                                                v3_and_below_topics=[Topic(name="paid", partitions=[0])]), 3)
        assert [p.partition_error_code for t in added.results_by_topic_v3_and_below
                for p in t.results_by_partition] == [ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED]

        # On "tx-a": a topic without Write is refused, and the others are not attempted.
        init = alice(InitProducerIdRequest(transactional_id="tx-a", transaction_timeout_ms=60000), 4)
        assert init.error_code == ErrorCode.NONE
        pid, epoch = init.producer_id, init.producer_epoch
        added = alice(AddPartitionsToTxnRequest(
            v3_and_below_transactional_id="tx-a", v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[Topic(name="paid", partitions=[0]), Topic(name="closed", partitions=[0])]), 3)
        assert {(t.name, p.partition_error_code) for t in added.results_by_topic_v3_and_below
                for p in t.results_by_partition} == {("paid", ErrorCode.OPERATION_NOT_ATTEMPTED),
                                                     ("closed", ErrorCode.TOPIC_AUTHORIZATION_FAILED)}
        # Nothing was added: the transaction is not open, so there is nothing to end.
        end = alice(EndTxnRequest(transactional_id="tx-a", producer_id=pid, producer_epoch=epoch, committed=True), 3)
        assert end.error_code == ErrorCode.INVALID_TXN_STATE
        offsets = alice(AddOffsetsToTxnRequest(transactional_id="tx-a", producer_id=pid, producer_epoch=epoch,
                                               group_id="not-mine"), 3)
        assert offsets.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        committed = alice(TxnOffsetCommitRequest(
            transactional_id="tx-a", group_id="g", producer_id=pid, producer_epoch=epoch, topics=[
                TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name="closed", partitions=[
                    TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=1)])]),
            3)
        assert [p.error_code for t in committed.topics for p in t.partitions] == [
            ErrorCode.TOPIC_AUTHORIZATION_FAILED]
        # AddPartitionsToTxn v4+ is the brokers' (KIP-890): alice, without ClusterAction, is
        # refused at the top, whatever her rights on the id, and nothing is verified or added.
        brokers_only = alice(AddPartitionsToTxnRequest(transactions=[
            AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction(
                transactional_id="tx-a", producer_id=pid, producer_epoch=epoch, verify_only=False,
                topics=[Topic(name="paid", partitions=[0])])]), 5)
        assert (brokers_only.error_code, brokers_only.results_by_transaction) == (
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED, [])
        end = alice(EndTxnRequest(transactional_id="tx-a", producer_id=pid, producer_epoch=epoch, committed=True), 3)
        assert end.error_code == ErrorCode.INVALID_TXN_STATE
    finally:
        alice.sock.close()
