"""Fixtures of the compat tests (real Kafka clients and Kafka's own tools against Causeway)."""

from __future__ import annotations

import pytest

from deploy.broker_process import BrokerProcess


@pytest.fixture(scope="module")
def causeway(module_broker: BrokerProcess, kafka_jars: None) -> BrokerProcess:
    """The module's broker (tests/conftest.py module_broker), for Kafka's Java tools and clients:
    each of their runs costs a JVM start."""
    return module_broker
