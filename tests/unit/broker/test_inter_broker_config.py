"""Which listener brokers reach each other on and how they log in there: Kafka's
inter.broker.listener.name, security.inter.broker.protocol and sasl.mechanism.inter.broker.protocol."""

from __future__ import annotations

import pytest

from broker.config import BrokerConfig, ConfigError

ZK = {"zookeeper.connect": "127.0.0.1:2181"}
SCRAM_JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" '
              'password="broker-secret";')
SASL_SSL = {**ZK, "listeners": "SASL_SSL://:9094", "security.inter.broker.protocol": "SASL_SSL",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": SCRAM_JAAS}


@pytest.mark.parametrize(("props", "listener"), [
    # Kafka's default: the listener security.inter.broker.protocol (PLAINTEXT) names.
    ({"listeners": "EXTERNAL://:1,PLAINTEXT://:2",
      "listener.security.protocol.map": "EXTERNAL:SSL,PLAINTEXT:PLAINTEXT"}, "PLAINTEXT"),
    # No listener called PLAINTEXT, where Kafka refuses to start: the first one.
    ({"listeners": "INTERNAL://:1,EXTERNAL://:2",
      "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT"}, "INTERNAL"),
    ({"listeners": "PLAINTEXT://:1,SSL://:2", "security.inter.broker.protocol": "ssl"}, "SSL"),
    ({"listeners": "PLAINTEXT://:1,SSL://:2", "inter.broker.listener.name": "ssl"}, "SSL"),
])
def test_the_inter_broker_listener_is_picked_as_kafka_picks_it(props: dict[str, str], listener: str) -> None:
    config = BrokerConfig.from_properties({**ZK, **props})
    assert config.inter_broker_listener == listener
    assert config.inter_broker_protocol == config.security_protocols[listener]


@pytest.mark.parametrize(("props", "message"), [
    ({"listeners": "SSL://:1", "security.inter.broker.protocol": "SSL", "inter.broker.listener.name": "SSL"},
     "security.inter.broker.protocol: only one of inter.broker.listener.name and security.inter.broker.protocol"),
    ({"listeners": "PLAINTEXT://:1", "security.inter.broker.protocol": "SSL"},
     "security.inter.broker.protocol: SSL names no listener"),
    ({"listeners": "SSL://:1", "security.inter.broker.protocol": "TLS"},
     "security.inter.broker.protocol: 'TLS' is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
    # Kafka's default mechanism is GSSAPI, which brokers here cannot log in with.
    (SASL_SSL, "sasl.mechanism.inter.broker.protocol: GSSAPI: inter-broker listener "
     "SASL_SSL is SASL and brokers log in to each other with PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 only"),
    ({**SASL_SSL, "sasl.mechanism.inter.broker.protocol": "PLAIN"},
     r"sasl.mechanism.inter.broker.protocol: PLAIN must be one of the mechanisms the inter-broker listener "
     r"SASL_SSL enables \(SCRAM-SHA-512\)"),
])
def test_inter_broker_settings_that_cannot_work_are_refused_naming_the_key(props: dict[str, str],
                                                                           message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        BrokerConfig.from_properties({**ZK, **props})


def test_a_sasl_inter_broker_listener_takes_its_mechanism_and_a_standalone_broker_never_dials_one() -> None:
    config = BrokerConfig.from_properties({**SASL_SSL, "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512"})
    assert (config.inter_broker_listener, config.inter_broker_protocol) == ("SASL_SSL", "SASL_SSL")
    assert config.sasl_mechanism_inter_broker_protocol == "SCRAM-SHA-512"
    # Standalone: no peer, so Kafka's GSSAPI default stands unchecked (the SASL listener still serves).
    standalone = BrokerConfig.from_properties({k: v for k, v in SASL_SSL.items() if k != "zookeeper.connect"})
    assert standalone.sasl_mechanism_inter_broker_protocol == "GSSAPI"


def test_a_plaintext_inter_broker_listener_ignores_the_sasl_mechanism() -> None:
    config = BrokerConfig.from_properties({**ZK, "listeners": "PLAINTEXT://:1,SASL_SSL://:2",
                                           "sasl.enabled.mechanisms": "PLAIN"})
    assert config.inter_broker_protocol == "PLAINTEXT"
