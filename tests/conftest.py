"""Fixtures shared by every test folder."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.broker import BrokerProcess


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A fresh standalone broker process on a free loopback port."""
    process = BrokerProcess(tmp_path / "broker").start()
    try:
        yield process
    finally:
        if process.proc is not None:
            code = process.stop()
            assert code == 0, f"broker did not stop cleanly (exit {code}):\n{process.log_tail()}"
