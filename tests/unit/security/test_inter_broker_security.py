"""security.client.inter_broker_security: a broker's client side toward its peers, built from its
inter-broker listener's own TLS and SASL configs, as Kafka builds it."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.config import INTER_BROKER_SASL_MECHANISMS, BrokerConfig, ConfigError
from security.certs import Identity, create_certificates
from security.client import inter_broker_security
from security.sasl import PLAIN
from security.scram import MECHANISMS


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("certs")
    create_certificates(out, [Identity("broker", "broker", ("127.0.0.1",))])
    return out


def _config(certs: Path, **extra: str) -> BrokerConfig:
    return BrokerConfig.from_properties({
        "zookeeper.connect": "127.0.0.1:2181", "listeners": "PLAINTEXT://:1,SASL_SSL://:2,SSL://:3",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs / "broker.pem"),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs / "ca.crt"),
        "ssl.client.auth": "required", "sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule '
                                                         'required user_alice="alice-secret";',
        **extra})


def test_a_plaintext_inter_broker_listener_needs_neither_tls_nor_a_login(certs: Path) -> None:
    security = inter_broker_security(_config(certs))
    assert (security.protocol, security.ssl_context, security.sasl) == ("PLAINTEXT", None, None)


def test_an_ssl_inter_broker_listener_checks_the_peer_unless_told_not_to(certs: Path) -> None:
    security = inter_broker_security(_config(certs, **{"security.inter.broker.protocol": "SSL"}))
    assert security.protocol == "SSL" and security.sasl is None
    assert security.ssl_context is not None and security.ssl_context.check_hostname
    unchecked = inter_broker_security(_config(certs, **{
        "inter.broker.listener.name": "SSL", "listener.name.ssl.ssl.endpoint.identification.algorithm": ""}))
    assert unchecked.ssl_context is not None and not unchecked.ssl_context.check_hostname


def test_a_sasl_ssl_inter_broker_listener_logs_in_with_its_own_jaas_username_and_password(certs: Path) -> None:
    security = inter_broker_security(_config(certs, **{
        "security.inter.broker.protocol": "SASL_SSL", "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config":
            'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" '
            'password="broker-secret";'}))
    assert security.protocol == "SASL_SSL" and security.ssl_context is not None
    assert security.sasl is not None
    assert (security.sasl.mechanism, security.sasl.username, security.sasl.password) == (
        "SCRAM-SHA-512", "broker", "broker-secret")
    assert "broker-secret" not in repr(security)


@pytest.mark.parametrize(("extra", "message"), [
    ({}, "listener.name.sasl_ssl.plain.sasl.jaas.config: the broker's own login to its peers: "
         "needs username and password options"),
    ({"listener.name.sasl_ssl.ssl.keystore.location": "/nonexistent.pem"}, "ssl.keystore.location"),
])
def test_an_inter_broker_login_that_cannot_work_stops_the_start_naming_the_key(
        certs: Path, extra: dict[str, str], message: str) -> None:
    config = _config(certs, **{"security.inter.broker.protocol": "SASL_SSL",
                               "sasl.mechanism.inter.broker.protocol": "PLAIN", **extra})
    with pytest.raises(ConfigError, match=message):
        inter_broker_security(config)


def test_the_config_allows_exactly_the_mechanisms_the_client_speaks() -> None:
    assert set(INTER_BROKER_SASL_MECHANISMS) == {PLAIN, *MECHANISMS}
