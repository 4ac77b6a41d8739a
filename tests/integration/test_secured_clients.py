"""Causeway's own client over TLS, mutual TLS and SASL: the tools with Kafka's `--command-config`
and the mirror with per-cluster `properties`, against real brokers whose listeners demand them."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from deploy.broker_process import BrokerProcess
from security.certs import Identity, create_certificates
from tests.integration.mirror_process import start_mirror
from tests.integration.test_mirror import wait_for_end_offsets

REPO = Path(__file__).resolve().parents[2]
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_mirror="mirror-secret" user_alice="alice-secret";')


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("certs")
    create_certificates(out, [Identity("b1", "broker", ("localhost", "127.0.0.1")), Identity("alice", "client"),
                              Identity("elsewhere", "broker", ("broker.example",))])
    return out


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, certs: Path) -> Iterator[BrokerProcess]:
    # PLAINTEXT for the test's own checks, SASL_SSL (PLAIN) and SSL with mutual TLS.
    process = BrokerProcess(tmp_path_factory.mktemp("secured") / "data", overrides=(
        "listeners=PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0,SSL://127.0.0.1:0",
        "sasl.enabled.mechanisms=PLAIN", f"listener.name.sasl_ssl.plain.sasl.jaas.config={JAAS}",
        "ssl.keystore.type=PEM", f"ssl.keystore.location={certs / 'b1.pem'}",
        "ssl.truststore.type=PEM", f"ssl.truststore.location={certs / 'ca.crt'}",
        "listener.name.ssl.ssl.client.auth=required"))
    process.start()
    yield process
    process.stop()


def _properties(path: Path, **values: str) -> Path:
    path.write_text("".join(f"{key}={value}\n" for key, value in values.items()))
    return path


def _sasl_ssl(tmp_path: Path, certs: Path, user: str, password: str) -> Path:
    return _properties(tmp_path / f"{user}.properties", **{
        "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": f'org.apache.kafka.common.security.plain.PlainLoginModule required '
                            f'username="{user}" password="{password}";',
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs / "ca.crt")})


def causeway(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "deploy.cli", *args], input=stdin, capture_output=True, text=True,
                          timeout=120, cwd=REPO)


def test_topics_over_sasl_ssl_with_command_config(broker: BrokerProcess, certs: Path, tmp_path: Path) -> None:
    config = _sasl_ssl(tmp_path, certs, "alice", "alice-secret")
    address = broker.listeners["SASL_SSL"]
    created = causeway("topics", "--bootstrap-server", address, "--command-config", str(config),
                       "--create", "--topic", "over-sasl", "--partitions", "2")
    assert created.returncode == 0, created.stderr
    listed = causeway("topics", "--bootstrap-server", address, "--command-config", str(config), "--list")
    assert "over-sasl" in listed.stdout.split()
    wrong = causeway("topics", "--bootstrap-server", address, "--timeout", "10", "--command-config",
                     str(_sasl_ssl(tmp_path, certs, "mallory", "guess")), "--list")
    assert wrong.returncode == 1
    assert "SASL_AUTHENTICATION_FAILED" in wrong.stderr and "Invalid username or password" in wrong.stderr
    assert "guess" not in wrong.stderr


def test_produce_and_consume_over_mutual_tls_with_the_certs_command_properties(
        broker: BrokerProcess, certs: Path) -> None:
    # `causeway certs create` writes alice.properties in Kafka's client keys: PKCS12 keystore,
    # PEM truststore, security.protocol=SSL.
    config = str(certs / "alice.properties")
    address = broker.listeners["SSL"]
    assert causeway("topics", "--bootstrap-server", address, "--command-config", config,
                    "--create", "--topic", "over-mtls", "--partitions", "1").returncode == 0
    produced = causeway("produce", "--bootstrap-server", address, "--producer.config", config,
                        "--topic", "over-mtls", stdin="one\ntwo\nthree\n")
    assert produced.returncode == 0, produced.stderr
    consumed = causeway("consume", "--bootstrap-server", address, "--consumer.config", config,
                        "--topic", "over-mtls", "--from-beginning", "--max-messages", "3")
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.split() == ["one", "two", "three"]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"security.protocol": "SSL"}, "self-signed certificate"),  # no truststore: the system's CAs
        ({"security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.trustore.location": "/x"},
         "ssl.trustore.location: unknown SSL client config"),
        ({"security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": "/nonexistent"},
         "ssl.truststore.location: cannot read /nonexistent"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}, "sasl.jaas.config: PLAIN needs"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"}, "GSSAPI is not one Causeway's client speaks"),
        ({"security.protocol": "TLS"}, "security.protocol: 'TLS' is not one of"),
    ],
)
def test_client_configs_that_cannot_work_are_named(broker: BrokerProcess, tmp_path: Path, values: dict[str, str],
                                                   message: str) -> None:
    config = _properties(tmp_path / "bad.properties", **values)
    done = causeway("topics", "--bootstrap-server", broker.listeners["SSL"], "--timeout", "10",
                    "--command-config", str(config), "--list")
    assert done.returncode == 1 and message in done.stderr, done.stderr


def test_a_broker_whose_certificate_does_not_name_it_is_refused(tmp_path: Path, certs: Path) -> None:
    process = BrokerProcess(tmp_path / "data", overrides=(
        "listeners=SSL://127.0.0.1:0", "ssl.keystore.type=PEM", f"ssl.keystore.location={certs / 'elsewhere.pem'}"))
    process.start()
    try:
        config = _properties(tmp_path / "c.properties", **{
            "security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs / "ca.crt")})
        done = causeway("topics", "--bootstrap-server", process.bootstrap, "--timeout", "10",
                        "--command-config", str(config), "--list")
        assert done.returncode == 1 and "IP address mismatch" in done.stderr, done.stderr
        unchecked = _properties(tmp_path / "u.properties", **{
            "security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs / "ca.crt"),
            "ssl.endpoint.identification.algorithm": ""})
        done = causeway("topics", "--bootstrap-server", process.bootstrap, "--command-config", str(unchecked), "--list")
        assert done.returncode == 0, done.stderr
    finally:
        process.stop()


def test_the_mirror_copies_from_a_sasl_ssl_source_to_a_mutual_tls_target(
        broker: BrokerProcess, certs: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    target = BrokerProcess(tmp_path_factory.mktemp("target") / "data", overrides=(
        "listeners=PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0", "ssl.keystore.type=PEM",
        f"ssl.keystore.location={certs / 'b1.pem'}", "ssl.truststore.type=PEM",
        f"ssl.truststore.location={certs / 'ca.crt'}", "ssl.client.auth=required"))
    target.start()
    tmp = tmp_path_factory.mktemp("mirror")
    try:
        admin = AdminClient({"bootstrap.servers": broker.listeners["PLAINTEXT"]})
        admin.create_topics([NewTopic("secured-orders", 3, 1)])["secured-orders"].result(timeout=30)
        producer = Producer({"bootstrap.servers": broker.listeners["PLAINTEXT"]})
        for i in range(90):
            producer.produce("secured-orders", f"r{i}".encode(), partition=i % 3)
        assert producer.flush(30) == 0
        password = (certs / "alice.p12.password").read_text().strip()
        config = tmp / "mirror.json"
        config.write_text(json.dumps({
            "name": "secured", "topics": {"include": ["secured-orders"]}, "refresh.topics.interval.seconds": 0.2,
            "source": {"alias": "east", "bootstrap": broker.listeners["SASL_SSL"], "properties": {
                "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                                    'username="mirror" password="mirror-secret";',
                "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs / "ca.crt")}},
            "target": {"alias": "west", "bootstrap": target.listeners["SSL"], "properties": {
                "security.protocol": "SSL", "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(certs / "ca.crt"), "ssl.keystore.type": "PKCS12",
                "ssl.keystore.location": str(certs / "alice.p12"),
                "ssl.keystore.password": password}}}))
        mirror = start_mirror(config, tmp / "mirror.log", tmp / "status.json")
        try:
            trio.run(wait_for_end_offsets, target.listeners["PLAINTEXT"], "east.secured-orders",
                     {0: 30, 1: 30, 2: 30})
        finally:
            mirror.send_signal(signal.SIGTERM)
            assert mirror.wait(60) == 0
        assert "mirror-secret" not in (tmp / "mirror.log").read_text()
        assert "mirror-secret" not in (tmp / "status.json").read_text()
    finally:
        target.stop()


def test_a_mirror_config_with_a_bad_security_key_is_refused_at_its_line(tmp_path: Path) -> None:
    config = tmp_path / "mirror.yaml"
    config.write_text("source: {alias: east, bootstrap: 127.0.0.1:1}\n"
                      "target:\n  alias: west\n  bootstrap: 127.0.0.1:2\n"
                      "  properties: {security.protocol: SSL, ssl.truststore.locaton: /x}\n")
    done = causeway("mirror", "--config", str(config))
    assert done.returncode != 0
    assert "ssl.truststore.locaton: unknown SSL client config" in done.stderr and ":5" in done.stderr, done.stderr


def test_a_refused_login_is_raised_as_kafkas_error_not_retried_as_a_broker_away(
        broker: BrokerProcess, certs: Path, tmp_path: Path) -> None:
    from broker.client import KafkaError, open_client
    from broker.config import load_properties
    from broker.protocol.errors import ErrorCode
    from security.client import client_security

    security = client_security(load_properties(_sasl_ssl(tmp_path, certs, "alice", "wrong")))

    async def login() -> None:
        # A long request timeout: were the refusal retried as a connection failure, it would
        # surface as a timeout (RequestTimeout) at the end of it instead.
        async with open_client(broker.listeners["SASL_SSL"], security=security, request_timeout_s=600) as client:
            await client.refresh_metadata([])

    with pytest.raises(KafkaError) as refused:
        trio.run(login)
    assert refused.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "Invalid username or password" in str(refused.value)
