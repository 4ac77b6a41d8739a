"""Fixtures of the integration tests: the two clusters a mirror runs between, and a broker for
consumer-group tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.broker_process import BrokerProcess


@pytest.fixture
def east(tmp_path: Path) -> Iterator[BrokerProcess]:
    # No initial rebalance delay: the mirror's checks join groups, and 3 s each is no part of them.
    process = BrokerProcess(tmp_path / "east", topics=("orders:3",),
                            overrides=("group.initial.rebalance.delay.ms=0",)).start()
    yield process
    process.stop()


@pytest.fixture
def west(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "west", overrides=("group.initial.rebalance.delay.ms=0",)).start()
    yield process
    process.stop()


@pytest.fixture
def group_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A standalone broker that forms consumer groups at once (no 3 s initial rebalance delay, as
    Kafka's default has) and keeps them in 5 offsets partitions; it must stop cleanly."""
    process = BrokerProcess(tmp_path / "broker", overrides=(
        "group.initial.rebalance.delay.ms=0", "offsets.topic.num.partitions=5")).start()
    yield process
    if process.proc is not None:
        assert process.stop() == 0, process.log_tail()
