"""broker.config's SSL keys: Kafka's names and defaults, per-listener overrides, secrets kept out
of reprs, and the keys that do not belong refused by name."""

from __future__ import annotations

import re

import pytest

from broker.config import BrokerConfig, ConfigError

TWO_LISTENERS = {"listeners": "SSL://:9093,INTERNAL://:9094",
                 "listener.security.protocol.map": "SSL:SSL,INTERNAL:SSL"}


def test_kafka_defaults_apply_to_an_ssl_listener() -> None:
    ssl = BrokerConfig.from_properties({"listeners": "SSL://:9093"}).ssl_for("SSL")
    assert ssl is not None
    assert (ssl.keystore_type, ssl.truststore_type, ssl.client_auth) == ("JKS", "JKS", "none")
    assert ssl.enabled_protocols == ("TLSv1.2", "TLSv1.3") and ssl.protocol == "TLSv1.3"
    assert ssl.endpoint_identification_algorithm == "https"


def test_a_listener_key_overrides_the_broker_wide_one_for_that_listener_only() -> None:
    config = BrokerConfig.from_properties({
        **TWO_LISTENERS, "ssl.client.auth": "requested", "ssl.keystore.location": "/k.pem",
        "listener.name.internal.ssl.client.auth": "required"})
    internal, outer = config.ssl_for("INTERNAL"), config.ssl_for("SSL")
    assert internal is not None and outer is not None
    assert (internal.client_auth, outer.client_auth) == ("required", "requested")
    assert internal.keystore_location == outer.keystore_location == "/k.pem"


def test_a_plaintext_listener_has_no_ssl_config_and_refuses_listener_ssl_keys() -> None:
    config = BrokerConfig.from_properties({"listeners": "PLAINTEXT://:9092", "ssl.client.auth": "required"})
    assert config.ssl_for("PLAINTEXT") is None
    with pytest.raises(ConfigError, match="listener PLAINTEXT is PLAINTEXT, not SSL"):
        BrokerConfig.from_properties({"listeners": "PLAINTEXT://:9092",
                                      "listener.name.plaintext.ssl.client.auth": "required"})


def test_passwords_stay_out_of_the_repr() -> None:
    ssl = BrokerConfig.from_properties({"listeners": "SSL://:9093", "ssl.keystore.password": "hunter2",
                                        "ssl.key.password": "hunter3"}).ssl_for("SSL")
    assert ssl is not None and ssl.keystore_password == "hunter2"
    assert "hunter" not in repr(ssl)


def test_ssl_keys_survive_a_dynamic_config_update() -> None:
    config = BrokerConfig.from_properties({"listeners": "SSL://:9093", "ssl.client.auth": "required"})
    updated = config.with_dynamic({"log.retention.ms": "1000"}, {})
    ssl = updated.ssl_for("SSL")
    assert ssl is not None and ssl.client_auth == "required"


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"ssl.client.auth": "always"}, "ssl.client.auth: 'always' is not one of none, requested, required"),
        ({"ssl.enabled.protocols": "TLSv1,TLSv1.2"}, "ssl.enabled.protocols"),
        ({"ssl.keystore.type": "BKS"}, "ssl.keystore.type"),
        ({"ssl.trustore.location": "/x"}, "did you mean 'ssl.truststore.location'"),
        ({"listener.name.ssl.sasl.enabled.mechanisms": "PLAIN"},
         "listener.name.ssl.sasl.enabled.mechanisms: listener SSL is SSL, not SASL"),
        ({"listener.name.ssl.socket.timeout": "1"}, "per-listener keys are listener.name.<listener>.ssl.*"),
    ],
)
def test_bad_ssl_keys_are_named(props: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        BrokerConfig.from_properties({"listeners": "SSL://:9093", **props})


def test_java_only_keys_are_accepted_without_effect() -> None:
    config = BrokerConfig.from_properties({"listeners": "SSL://:9093", "ssl.keymanager.algorithm": "SunX509"})
    assert config.ssl_for("SSL") is not None


def test_brokers_of_a_zookeeper_cluster_may_reach_each_other_over_ssl() -> None:
    base = {"zookeeper.connect": "127.0.0.1:2181", "listeners": "SSL://:9093,INTERNAL://:9094",
            "listener.security.protocol.map": "SSL:SSL,INTERNAL:PLAINTEXT"}
    assert BrokerConfig.from_properties(base).inter_broker_protocol == "SSL"
    config = BrokerConfig.from_properties({**base, "inter.broker.listener.name": "INTERNAL"})
    assert config.inter_broker_protocol == "PLAINTEXT"
    assert config.ssl_for("SSL") is not None and config.ssl_for("INTERNAL") is None
