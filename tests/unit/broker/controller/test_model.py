"""BrokerInfo.inter_broker_endpoint: where the controller and the brokers reach a broker."""

from __future__ import annotations

from broker.config import BrokerConfig, ListenerSpec
from broker.controller.model import BrokerInfo

INTERNAL = ListenerSpec("INTERNAL", "10.0.0.1", 9093)
EXTERNAL = ListenerSpec("EXTERNAL", "198.51.100.1", 9092)

TWO_LISTENERS = {"listeners": "EXTERNAL://127.0.0.1:0,INTERNAL://127.0.0.1:0",
                 "listener.security.protocol.map": "EXTERNAL:PLAINTEXT,INTERNAL:PLAINTEXT"}


def test_the_inter_broker_listener_is_taken_when_the_broker_advertises_it() -> None:
    config = BrokerConfig.from_properties({**TWO_LISTENERS, "inter.broker.listener.name": "internal"})
    assert BrokerInfo(1, (EXTERNAL, INTERNAL)).inter_broker_endpoint(config) == INTERNAL


def test_without_inter_broker_listener_name_the_first_listener_is_the_inter_broker_one() -> None:
    config = BrokerConfig.from_properties(TWO_LISTENERS)
    assert BrokerInfo(1, (INTERNAL, EXTERNAL)).inter_broker_endpoint(config) == EXTERNAL


def test_a_broker_without_that_listener_is_reached_at_its_first_endpoint() -> None:
    config = BrokerConfig.from_properties({**TWO_LISTENERS, "inter.broker.listener.name": "INTERNAL"})
    assert BrokerInfo(1, (EXTERNAL,)).inter_broker_endpoint(config) == EXTERNAL


def test_a_broker_that_advertises_nothing_has_no_endpoint() -> None:
    assert BrokerInfo(1, ()).inter_broker_endpoint(BrokerConfig.from_properties({})) is None
