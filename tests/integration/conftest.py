"""Fixtures of the integration tests: the two clusters a mirror runs between."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.broker import BrokerProcess


@pytest.fixture
def east(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "east", topics=("orders:3",)).start()
    yield process
    process.stop()


@pytest.fixture
def west(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "west").start()
    yield process
    process.stop()
