"""A standalone broker for a test, as the shared fixtures start it:

    with standalone_broker(tmp_path / "broker") as broker:   # started, on a free loopback port
        ...                                                   # stopped after; it must stop cleanly

It forms consumer groups at once, as Kafka's test brokers do (group.initial.rebalance.delay.ms=0:
a test that joins a group waits for the join, not for Kafka's 3 s default, which no test here is
about); `overrides` come after, so a test may set one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from deploy.broker_process import BrokerProcess

__all__ = ["standalone_broker"]


@contextmanager
def standalone_broker(data_dir: Path, *overrides: str) -> Iterator[BrokerProcess]:
    process = BrokerProcess(data_dir, overrides=("group.initial.rebalance.delay.ms=0", *overrides)).start()
    try:
        yield process
    finally:
        if process.proc is not None:
            code = process.stop()
            assert code == 0, f"broker did not stop cleanly (exit {code}):\n{process.log_tail()}"
