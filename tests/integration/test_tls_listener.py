"""SSL listeners (TLS and mutual TLS) on a real broker process, judged by librdkafka through
confluent-kafka and kcat, and attacked as an unlucky operator and a hostile client would."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from cryptography import x509

from broker.protocol.messages import ApiVersionsRequest
from deploy.broker_process import BrokerProcess
from deploy.kafka_socket import message_frame
from security.certs import Identity, create_certificates
from tests.support.consume import group_values
from tests.support.polling import wait_until
from tests.support.refusal import ask_metadata

TOPIC = "secured"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("certs")
    create_certificates(out, [Identity("b1", "broker", ("localhost", "127.0.0.1")), Identity("alice", "client")])
    return out


def _tls_overrides(certs: Path, *extra: str) -> tuple[str, ...]:
    return ("listeners=PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
            "ssl.keystore.type=PEM", f"ssl.keystore.location={certs / 'b1.pem'}",
            "ssl.truststore.type=PEM", f"ssl.truststore.location={certs / 'ca.crt'}", *extra)


@pytest.fixture(scope="module")
def mtls_broker(tmp_path_factory: pytest.TempPathFactory, certs: Path) -> Iterator[BrokerProcess]:
    # Mutual TLS on the SSL listener only (Kafka's per-listener key); a short arrival bound so
    # the silent-client test sees the handshake deadline.
    broker = BrokerProcess(tmp_path_factory.mktemp("mtls") / "data", overrides=_tls_overrides(
        certs, "listener.name.ssl.ssl.client.auth=required", "causeway.request.arrival.timeout.ms=2000",
        "group.initial.rebalance.delay.ms=0"))
    broker.start()
    yield broker
    broker.stop()


def _client_config(certs: Path, broker: BrokerProcess, *, certificate: bool = True) -> dict[str, object]:
    config: dict[str, object] = {"bootstrap.servers": broker.listeners["SSL"], "security.protocol": "SSL",
                                 "ssl.ca.location": str(certs / "ca.crt"), "socket.timeout.ms": 10000}
    if certificate:
        config |= {"ssl.certificate.location": str(certs / "alice.crt"),
                   "ssl.key.location": str(certs / "alice.key")}
    return config


def test_librdkafka_produces_and_consumes_over_mutual_tls(certs: Path, mtls_broker: BrokerProcess) -> None:
    config = _client_config(certs, mtls_broker)
    admin = AdminClient(config)
    admin.create_topics([NewTopic(TOPIC, 3, 1)])[TOPIC].result(timeout=30)
    producer = Producer({**config, "acks": "all", "enable.idempotence": True})
    for i in range(300):
        producer.produce(TOPIC, f"value-{i}".encode(), key=str(i).encode())
    assert producer.flush(60) == 0
    seen = group_values(config, TOPIC, "tls-readers", 300, polls=600)
    assert seen == {f"value-{i}".encode() for i in range(300)}


def test_kcat_lists_the_cluster_over_mutual_tls(certs: Path, mtls_broker: BrokerProcess) -> None:
    kcat = shutil.which("kcat")
    assert kcat, "kcat is installed by `make system-deps`"
    done = subprocess.run([kcat, "-b", mtls_broker.listeners["SSL"], "-L", "-X", "security.protocol=ssl",
                           "-X", f"ssl.ca.location={certs / 'ca.crt'}",
                           "-X", f"ssl.certificate.location={certs / 'alice.crt'}",
                           "-X", f"ssl.key.location={certs / 'alice.key'}"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "1 brokers:" in done.stdout


def test_a_client_without_a_certificate_is_refused_and_others_are_served(
        certs: Path, mtls_broker: BrokerProcess) -> None:
    refused = ask_metadata({**_client_config(certs, mtls_broker, certificate=False), "socket.timeout.ms": 3000},
                           admin=True, timeout_s=5)
    assert not refused.served
    # The client hears of the refusal as the broker logs it: wait for the line, not a fixed time.
    wait_until(lambda: "SSL" in mtls_broker.log_tail(200) and "TLS handshake with" in mtls_broker.log_tail(200),
               what="the broker to log the refused handshake", timeout_s=10)
    assert AdminClient(_client_config(certs, mtls_broker)).list_topics(timeout=30).brokers


@pytest.mark.parametrize(("certificate", "alert"), [
    (None, "TLSV13_ALERT_CERTIFICATE_REQUIRED"), ("rogue", "TLSV1_ALERT_UNKNOWN_CA")])
def test_a_refused_client_certificate_is_answered_with_the_tls_alert_that_names_why(
        tmp_path: Path, certs: Path, mtls_broker: BrokerProcess, certificate: str | None, alert: str) -> None:
    # As Kafka's broker does: the client learns why (not only that the connection closed). Under
    # TLS 1.3 the client's handshake is done before the broker checks its certificate: the alert
    # arrives on the first read.
    context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    if certificate is not None:
        create_certificates(tmp_path, [Identity("mallory", "client")])  # another CA: trusted by nobody
        context.load_cert_chain(tmp_path / "mallory.crt", tmp_path / "mallory.key")
    host, port = mtls_broker.listeners["SSL"].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        assert tls.version() == "TLSv1.3"
        with pytest.raises(ssl.SSLError) as refused:
            tls.sendall(message_frame(ApiVersionsRequest(), 0, correlation_id=1))
            tls.recv(1)
    assert refused.value.reason == alert


def test_a_plaintext_client_on_the_tls_port_gets_no_answer_and_the_port_keeps_serving(
        certs: Path, mtls_broker: BrokerProcess) -> None:
    host, port = mtls_broker.listeners["SSL"].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(message_frame(ApiVersionsRequest(), 0, correlation_id=7))
        received = b""
        while chunk := sock.recv(65536):  # the broker closes: a TLS alert at most, never a Kafka answer
            received += chunk
            assert len(received) < 65536
    assert b"\x00\x00\x00\x07" not in received[4:8]
    assert AdminClient(_client_config(certs, mtls_broker)).list_topics(timeout=30).brokers


def test_a_client_silent_in_the_handshake_is_closed_at_the_deadline(mtls_broker: BrokerProcess) -> None:
    host, port = mtls_broker.listeners["SSL"].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        assert sock.recv(1) == b""  # closed by the broker (arrival bound 2 s), not by our timeout
    assert "went quiet during the TLS handshake" in mtls_broker.log_tail(200)


def test_the_plaintext_listener_still_serves_beside_the_tls_one(mtls_broker: BrokerProcess) -> None:
    metadata = AdminClient({"bootstrap.servers": mtls_broker.listeners["PLAINTEXT"]}).list_topics(timeout=30)
    assert metadata.brokers


def test_a_pkcs12_keystore_serves_tls_with_server_only_authentication(tmp_path: Path, certs: Path) -> None:
    password = (certs / "b1.p12.password").read_text().strip()
    broker = BrokerProcess(tmp_path / "data", overrides=(
        "listeners=SSL://127.0.0.1:0", "ssl.keystore.type=PKCS12", f"ssl.keystore.location={certs / 'b1.p12'}",
        f"ssl.keystore.password={password}"))
    broker.start()
    try:
        metadata = AdminClient(_client_config(certs, broker, certificate=False)).list_topics(timeout=30)
        assert metadata.brokers
        assert password not in broker.log_tail(500)
    finally:
        broker.stop()


# A config that does not parse exits 2, as every config error; files that cannot be used exit 1.
@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (("ssl.keystore.type=PEM", "ssl.keystore.location=/nonexistent/b1.pem"),
         "ssl.keystore.location: cannot read /nonexistent/b1.pem"),
        (("ssl.keystore.type=JKS", "ssl.keystore.location=/etc/kafka/broker.jks"),
         "keytool -importkeystore -srckeystore /etc/kafka/broker.jks"),
        (("ssl.keystore.type=PKCS12", "ssl.keystore.location={certs}/b1.p12", "ssl.keystore.password=wrong"),
         "ssl.keystore.password is wrong"),
        (("ssl.keystore.type=PEM", "ssl.keystore.location={certs}/ca.crt"), "holds no usable private key"),
        ((), "needs a certificate: set ssl.keystore.location"),
        (("ssl.keystore.type=PEM", "ssl.keystore.location={certs}/b1.pem", "ssl.client.auth=required"),
         "needs a truststore"),
        (("ssl.keystore.type=PEM", "ssl.keystore.location={certs}/b1.pem", "ssl.enabled.protocols=TLSv1.1"),
         "ssl.enabled.protocols"),
        (("ssl.keystore.type=PEM", "ssl.keystore.location={certs}/b1.pem", "ssl.keystore.pasword=x"),
         "did you mean 'ssl.keystore.password'"),
        (("listener.name.wan.ssl.keystore.location=/x",), "wan is not one of the listeners (SSL)"),
        (("ssl.keystore.type=PEM", "ssl.keystore.location={certs}/b1.pem", "ssl.principal.mapping.rules=RULE:^CN"),
         "listener SSL: ssl.principal.mapping.rules: cannot read a rule"),
    ],
)
def test_a_listener_that_cannot_serve_tls_stops_the_start_and_says_why(
        tmp_path: Path, certs: Path, overrides: tuple[str, ...], message: str) -> None:
    broker = BrokerProcess(tmp_path / "data", overrides=(
        "listeners=SSL://127.0.0.1:0", *(item.format(certs=certs) for item in overrides)))
    with pytest.raises(RuntimeError, match="exited with [12] before it was ready"):
        broker.start()
    assert message in broker.log_tail(50)
    assert "=wrong" not in broker.log_tail(50)  # a password is never repeated


def test_a_certificate_no_mapping_rule_applies_to_is_refused(tmp_path: Path, certs: Path) -> None:
    # Only CN=bob maps to a principal: alice's certificate is trusted, and still refused.
    broker = BrokerProcess(tmp_path / "data", overrides=_tls_overrides(
        certs, "ssl.client.auth=required", "ssl.principal.mapping.rules=RULE:^CN=(bob)$/$1/L"))
    broker.start()
    try:
        refused = ask_metadata({**_client_config(certs, broker), "socket.timeout.ms": 3000}, admin=True, timeout_s=5)
        assert not refused.served
        wait_until(lambda: "no ssl.principal.mapping.rules rule applies to CN=alice" in broker.log_tail(200),
                   what="the broker to log why alice was refused", timeout_s=10)
    finally:
        broker.stop()


def test_python_clients_check_the_broker_name(certs: Path, mtls_broker: BrokerProcess) -> None:
    # The broker's certificate names localhost and 127.0.0.1: a client that checks names accepts
    # it on either, with the broker's own CA.
    host, port = mtls_broker.listeners["SSL"].rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    context.load_cert_chain(certs / "alice.crt", certs / "alice.key")
    with socket.create_connection((host, int(port)), timeout=30) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        assert tls.version() in ("TLSv1.2", "TLSv1.3")


def _served_serial(address: str, certs: Path) -> int:
    host, port = address.rsplit(":", 1)
    pem = ssl.get_server_certificate((host, int(port)), ca_certs=str(certs / "ca.crt"), timeout=10)
    return x509.load_pem_x509_certificate(pem.encode()).serial_number


def test_a_renewed_keystore_serves_new_connections_without_a_restart(tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    broker_identity = Identity("b1", "broker", ("localhost", "127.0.0.1"))
    create_certificates(certs, [broker_identity])
    broker = BrokerProcess(tmp_path / "data", overrides=(
        *_tls_overrides(certs), "causeway.ssl.reload.check.interval.ms=200"))
    broker.start()
    try:
        address = broker.listeners["SSL"]
        first = _served_serial(address, certs)
        create_certificates(certs, [broker_identity], renew=True)  # written over the old files
        wait_until(lambda: _served_serial(address, certs) != first, what="the renewed certificate served",
                   timeout_s=30)
        renewed = _served_serial(address, certs)
        # Damaged files are refused: the listener keeps serving the renewed certificate.
        (certs / "b1.pem").write_text("not a certificate")
        wait_until(lambda: "keeps its certificates" in broker.log_tail(50), what="the damaged keystore reported",
                   timeout_s=30)
        assert _served_serial(address, certs) == renewed
        assert AdminClient(_client_config(certs, broker, certificate=False)).list_topics(timeout=30).brokers
    finally:
        assert broker.stop() == 0, broker.log_tail()
