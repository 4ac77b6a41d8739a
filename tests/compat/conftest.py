"""Fixtures of the compat tests (real Kafka clients and Kafka's own tools against Causeway)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from deploy.broker_process import BrokerProcess


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the module, its tests kept apart by topic names: a client's test is about
    the client, the broker's start is not the subject (a start and a stop per test were most of
    such a module's time). No initial rebalance delay, as in Kafka's own quick-start
    server.properties. It must stop cleanly."""
    process = BrokerProcess(tmp_path_factory.mktemp("causeway") / "broker",
                            overrides=("group.initial.rebalance.delay.ms=0",)).start()
    try:
        yield process
    finally:
        code = process.stop()
        assert code == 0, f"broker did not stop cleanly (exit {code}):\n{process.log_tail()}"


@pytest.fixture(scope="module")
def causeway(module_broker: BrokerProcess, kafka_jars: None) -> BrokerProcess:
    """The module's broker, for Kafka's Java tools and clients: each of their runs costs a JVM
    start."""
    return module_broker
