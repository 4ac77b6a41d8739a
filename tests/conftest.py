"""Fixtures shared by every test folder.

Fake time: request ``autojump_clock`` (pytest-trio's fixture, ``MockClock(autojump_threshold=0)``);
a trio test that takes it runs on that clock, so sleeps, timeouts and backoff cost no real time.
It is the one such fixture: test files do not define their own.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.peers import PeerMissing, peer
from deploy.broker_process import BrokerProcess
from tests.support.standalone import standalone_broker
from tests.support.zookeeper import ZooKeeperServer, zookeeper_server


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A fresh standalone broker process on a free loopback port (tests/support/standalone.py: it
    forms consumer groups at once)."""
    with standalone_broker(tmp_path / "broker") as process:
        yield process


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the module, its tests kept apart by topic names: a client's test is about
    the client, the broker's start is not the subject (a start and a stop per test were most of
    such a module's time)."""
    with standalone_broker(tmp_path_factory.mktemp("causeway") / "broker") as process:
        yield process


@pytest.fixture(scope="module")
def kafka_jars() -> None:
    """Apache Kafka 4's jars (the `kafka4` peer, fetched by `make peers`) for a test that runs
    Kafka's own tools, clients or brokers; fails the test, naming what is missing, without them."""
    try:
        peer("kafka4").jars()
    except PeerMissing as exc:
        pytest.fail(str(exc))


@pytest.fixture
def zookeeper(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    """A real single-node ZooKeeper on a free loopback port, its data in tmp_path/zookeeper;
    `.connect` is "127.0.0.1:PORT" (tests/support/zookeeper.py)."""
    with zookeeper_server(tmp_path / "zookeeper") as server:
        yield server
