"""A SASL listener under attack: requests that would change data, sent before authenticating,
change nothing; a flood of failed logins costs bounded descriptors and never stops an
authenticated producer. Judged with librdkafka (confluent-kafka) and hand-built frames."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker.protocol.errors import ErrorCode
from broker.protocol.messages import (
    DeleteRecordsRequest,
    LeaderAndIsrRequest,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
)
from deploy.broker_process import BrokerProcess
from deploy.child_process import fd_count
from deploy.kafka_socket import call, message_frame, read_frame_or_none
from tests.support.polling import wait_until

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_alice="alice-secret";')
TOPIC = "guarded"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("sasl-attacks") / "data", overrides=(
        "listeners=SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms=PLAIN",
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}", "group.initial.rebalance.delay.ms=0"))
    process.start()
    yield process
    process.stop()


def _alice(broker: BrokerProcess) -> dict[str, object]:
    return {"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-secret"}


def _watermarks(broker: BrokerProcess) -> tuple[int, int]:
    consumer = Consumer({**_alice(broker), "group.id": "watermarks"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=30)
        return int(low), int(high)
    finally:
        consumer.close()


def _connect(broker: BrokerProcess) -> socket.socket:
    host, port = broker.bootstrap.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=30)


def test_data_changing_requests_before_authentication_change_nothing(broker: BrokerProcess) -> None:
    admin = AdminClient(_alice(broker))
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(timeout=30)
    producer = Producer({**_alice(broker), "acks": "all"})
    for i in range(10):
        producer.produce(TOPIC, b"%d" % i, partition=0)
    assert producer.flush(30) == 0
    assert _watermarks(broker) == (0, 10)

    delete = DeleteRecordsRequest(topics=[DeleteRecordsRequest.DeleteRecordsTopic(
        name=TOPIC, partitions=[DeleteRecordsRequest.DeleteRecordsPartition(partition_index=0, offset=5)])],
        timeout_ms=5000)
    leader_and_isr = LeaderAndIsrRequest(controller_id=0, controller_epoch=99, broker_epoch=99)
    for request, version in [(delete, 1), (leader_and_isr, 1)]:
        for handshake_first in (False, True):
            with _connect(broker) as sock:
                if handshake_first:  # mid-exchange: after the handshake, before the token
                    call(sock, SaslHandshakeRequest(mechanism="PLAIN"), 1)
                sock.sendall(message_frame(request, version, correlation_id=3))
                assert read_frame_or_none(sock) is None  # closed unanswered
    # A bare-token client (v0 handshake) whose "token" is a DeleteRecords frame: a failed login.
    with _connect(broker) as sock:
        call(sock, SaslHandshakeRequest(mechanism="PLAIN"), 0)
        frame = message_frame(delete, 1, correlation_id=4)
        sock.sendall(frame)
        assert read_frame_or_none(sock) is None
    assert _watermarks(broker) == (0, 10)


def _fail_logins(broker: BrokerProcess, count: int, errors: list[BaseException]) -> None:
    try:
        for _ in range(count):
            with _connect(broker) as sock:
                call(sock, SaslHandshakeRequest(mechanism="PLAIN"), 1)
                answer = call(sock, SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00guess"), 1, correlation_id=2)
                assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
                assert read_frame_or_none(sock) is None
    except BaseException as exc:  # noqa: BLE001 - reported to the test's thread
        errors.append(exc)


def test_a_flood_of_failed_logins_keeps_descriptors_bounded_and_alice_served(broker: BrokerProcess) -> None:
    assert broker.proc is not None
    pid = broker.proc.pid
    baseline = fd_count(pid)
    errors: list[BaseException] = []
    attackers = [threading.Thread(target=_fail_logins, args=(broker, 60, errors)) for _ in range(8)]
    for thread in attackers:
        thread.start()
    producer = Producer({**_alice(broker), "acks": "all"})
    for i in range(200):
        producer.produce(TOPIC, b"during-%d" % i, partition=0)
    assert producer.flush(120) == 0  # every record acknowledged while 480 logins fail
    for thread in attackers:
        thread.join(timeout=300)
        assert not thread.is_alive()
    assert not errors, errors
    # Every refused connection is closed by the broker: its descriptors come back.
    wait_until(lambda: fd_count(pid) <= baseline + 5, what="the broker's descriptors to come back",
               timeout_s=60, interval_s=0.2)
    assert "guess" not in broker.log_tail(2000)


def test_a_truncated_token_frame_is_closed_at_the_arrival_bound(tmp_path: Path) -> None:
    process = BrokerProcess(tmp_path / "data", overrides=(
        "listeners=SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms=PLAIN",
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}",
        "causeway.request.arrival.timeout.ms=1000"))
    process.start()
    try:
        with _connect(process) as sock:
            call(sock, SaslHandshakeRequest(mechanism="PLAIN"), 0)
            sock.sendall(struct.pack(">i", 100) + b"\x00alice")  # 100 bytes announced, 6 sent
            assert read_frame_or_none(sock) is None
        assert "did not arrive within" in process.log_tail(50)
    finally:
        process.stop()
