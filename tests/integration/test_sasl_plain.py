"""SASL/PLAIN on SASL_PLAINTEXT and SASL_SSL listeners of a real broker process, judged by
librdkafka (confluent-kafka), kafka-python and kcat, and by hand-built frames for both framings
(SaslAuthenticate after a v1 handshake; bare tokens after a v0 one) and the attacks."""

from __future__ import annotations

import logging
import shutil
import socket
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import KafkaTimeoutError

from broker.protocol.errors import ErrorCode
from broker.protocol.messages import (
    ApiVersionsRequest,
    MetadataRequest,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
)
from deploy.broker_process import BrokerProcess
from deploy.kafka_socket import call, message_frame, read_frame_or_none
from security.certs import Identity, create_certificates
from tests.support.consume import group_values
from tests.support.refusal import ask_metadata

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("certs")
    create_certificates(out, [Identity("b1", "broker", ("localhost", "127.0.0.1"))])
    return out


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, certs: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("sasl") / "data", overrides=(
        "listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "group.initial.rebalance.delay.ms=0", "sasl.enabled.mechanisms=PLAIN",
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}",
        f"listener.name.sasl_ssl.plain.sasl.jaas.config={JAAS}",
        "ssl.keystore.type=PEM", f"ssl.keystore.location={certs / 'b1.pem'}",
        "sasl.server.max.receive.size=4096"))
    process.start()
    yield process
    process.stop()


def _sasl(broker: BrokerProcess, listener: str, certs: Path, user: str, password: str) -> dict[str, object]:
    config: dict[str, object] = {"bootstrap.servers": broker.listeners[listener], "security.protocol": listener,
                                 "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": password}
    if listener == "SASL_SSL":
        config["ssl.ca.location"] = str(certs / "ca.crt")
    return config


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_librdkafka_produces_and_consumes_as_an_authenticated_user(
        broker: BrokerProcess, certs: Path, listener: str) -> None:
    config = _sasl(broker, listener, certs, "alice", "alice-secret")
    topic = f"plain-{listener.lower()}"
    admin = AdminClient(config)  # held: a client destroyed mid-request fails its futures
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(timeout=30)
    producer = Producer({**config, "acks": "all"})
    for i in range(100):
        producer.produce(topic, f"r{i}".encode())
    assert producer.flush(60) == 0
    seen = group_values(config, topic, f"g-{listener}", 100, polls=300)
    assert seen == {f"r{i}".encode() for i in range(100)}


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_a_wrong_password_is_refused_by_name(broker: BrokerProcess, certs: Path, listener: str) -> None:
    attempt = ask_metadata(_sasl(broker, listener, certs, "alice", "guess"), admin=True, timeout_s=10,
                           until=(KafkaError._AUTHENTICATION,))
    assert not attempt.served
    assert any(e.code() == KafkaError._AUTHENTICATION and "Invalid username or password" in e.str()
               for e in attempt.errors), attempt.errors


def test_kafka_python_over_sasl_plaintext(broker: BrokerProcess) -> None:
    common = {"bootstrap_servers": broker.listeners["SASL_PLAINTEXT"], "security_protocol": "SASL_PLAINTEXT",
              "sasl_mechanism": "PLAIN", "sasl_plain_username": "admin", "sasl_plain_password": "admin-secret"}
    producer = KafkaProducer(**common, acks="all")
    for i in range(20):
        producer.send("kafka-python-plain", f"k{i}".encode())
    producer.flush(60)
    producer.close()
    consumer = KafkaConsumer("kafka-python-plain", **common, auto_offset_reset="earliest",
                             consumer_timeout_ms=20000)
    values = {m.value for _, m in zip(range(20), consumer, strict=False)}  # stops at 20, not at the idle timeout
    consumer.close()
    assert values == {f"k{i}".encode() for i in range(20)}


def test_kafka_python_with_a_wrong_password_is_refused_by_name(
        broker: BrokerProcess, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="kafka"), pytest.raises(KafkaTimeoutError):
        KafkaProducer(bootstrap_servers=broker.listeners["SASL_PLAINTEXT"], security_protocol="SASL_PLAINTEXT",
                      sasl_mechanism="PLAIN", sasl_plain_username="alice", sasl_plain_password="guess",
                      bootstrap_timeout_ms=3000)
    assert "SaslAuthenticationFailedError" in caplog.text and "Invalid username or password" in caplog.text
    assert "guess" not in broker.log_tail(200)


def test_kcat_over_sasl_plaintext(broker: BrokerProcess) -> None:
    kcat = shutil.which("kcat")
    assert kcat, "kcat is installed by `make system-deps`"
    done = subprocess.run([kcat, "-b", broker.listeners["SASL_PLAINTEXT"], "-L", "-X",
                           "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=PLAIN",
                           "-X", "sasl.username=alice", "-X", "sasl.password=alice-secret"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "1 brokers:" in done.stdout


def _connect(broker: BrokerProcess) -> socket.socket:
    host, port = broker.listeners["SASL_PLAINTEXT"].rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=30)


def _closed(sock: socket.socket) -> bool:
    return read_frame_or_none(sock) is None


def test_the_v0_framing_takes_bare_tokens(broker: BrokerProcess) -> None:
    with _connect(broker) as sock:
        answer = call(sock, SaslHandshakeRequest(mechanism="PLAIN"), 0)
        assert answer.error_code == ErrorCode.NONE and answer.mechanisms == ["PLAIN"]
        token = b"\x00alice\x00alice-secret"
        sock.sendall(struct.pack(">i", len(token)) + token)
        assert read_frame_or_none(sock) == b""  # PLAIN's empty challenge: authenticated
        metadata = call(sock, MetadataRequest(topics=None), 1, correlation_id=9)
        assert metadata.brokers


def test_requests_before_authentication_close_the_connection(broker: BrokerProcess) -> None:
    with _connect(broker) as sock:
        versions = call(sock, ApiVersionsRequest(), 0)  # ApiVersions is allowed first, as in Kafka
        assert {17, 36} <= {api.api_key for api in versions.api_keys}
        sock.sendall(message_frame(MetadataRequest(topics=None), 1, correlation_id=2))
        assert _closed(sock)
    with _connect(broker) as sock:
        call(sock, SaslHandshakeRequest(mechanism="PLAIN"), 1)
        sock.sendall(message_frame(MetadataRequest(topics=None), 1, correlation_id=2))
        assert _closed(sock)


def test_an_unknown_mechanism_is_answered_with_the_enabled_ones_and_closed(broker: BrokerProcess) -> None:
    with _connect(broker) as sock:
        answer = call(sock, SaslHandshakeRequest(mechanism="GSSAPI"), 1)
        assert answer.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM and answer.mechanisms == ["PLAIN"]
        assert _closed(sock)


@pytest.mark.parametrize("token", [b"alice\x00alice-secret", b"\x00alice\x00", b"\x00\xff\xfe\x00pw",
                                   b"bob\x00alice\x00alice-secret", b"\x00nobody\x00alice-secret"])
def test_malformed_and_forged_plain_tokens_fail_and_close(broker: BrokerProcess, token: bytes) -> None:
    with _connect(broker) as sock:
        call(sock, SaslHandshakeRequest(mechanism="PLAIN"), 1)
        answer = call(sock, SaslAuthenticateRequest(auth_bytes=token), 1, correlation_id=2)
        assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert b"alice-secret".decode() not in (answer.error_message or "")
        assert _closed(sock)
    assert "alice-secret" not in broker.log_tail(400)


def test_a_huge_token_before_authentication_closes_the_connection(broker: BrokerProcess) -> None:
    # sasl.server.max.receive.size=4096 for this broker: a bigger frame is refused by its size
    # field, before its bytes are read or any memory is taken for them.
    with _connect(broker) as sock:
        call(sock, SaslHandshakeRequest(mechanism="PLAIN"), 1)
        sock.sendall(struct.pack(">i", 100_000_000))
        assert _closed(sock)
    assert AdminClient(_sasl(broker, "SASL_PLAINTEXT", Path(), "alice", "alice-secret")).list_topics(
        timeout=30).brokers


def test_sasl_requests_on_a_plaintext_listener_are_in_the_wrong_state(broker: BrokerProcess) -> None:
    host, port = broker.listeners["PLAINTEXT"].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        assert call(sock, SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == ErrorCode.ILLEGAL_SASL_STATE


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (("sasl.enabled.mechanisms=GSSAPI",), "enables GSSAPI, which is not served here"),
        (("sasl.enabled.mechanisms=PLAIN",), "listener.name.sasl_plaintext.plain.sasl.jaas.config: listener "
                                              "SASL_PLAINTEXT enables PLAIN and needs its JAAS config"),
        (("sasl.enabled.mechanisms=PLAIN",
          "listener.name.sasl_plaintext.plain.sasl.jaas.config=PlainLoginModule required user_a=\"x\""),
         "must end with ';'"),
        (("sasl.enabled.mechanisms=PLAIN",
          "listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain."
          "PlainLoginModule required username=\"a\" password=\"b\";"), "no user_<name>"),
    ],
)
def test_a_sasl_listener_that_cannot_authenticate_anyone_stops_the_start(
        tmp_path: Path, overrides: tuple[str, ...], message: str) -> None:
    process = BrokerProcess(tmp_path / "data", overrides=("listeners=SASL_PLAINTEXT://127.0.0.1:0", *overrides))
    with pytest.raises(RuntimeError, match="exited with 1"):
        process.start()
    assert message in process.log_tail(50)
