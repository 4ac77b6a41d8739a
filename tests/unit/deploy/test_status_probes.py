"""Issue 19, item 17: `causeway status` asks every broker, ZooKeeper node and the WAN API at once,
each for at most PROBE_TIMEOUT_S. Frozen processes are listeners that never answer (the kernel
accepts their connections, nobody reads them); trio's autojump clock makes the waiting virtual,
so the test shows the questions overlap without waiting for real seconds."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
import trio
import trio.testing

from deploy.launcher import control
from deploy.launcher.cluster_view import read_views
from deploy.launcher.state_file import BrokerRecord, ClusterRecord, LaunchStateFile, WanRecord, ZooKeeperRecord


@pytest.fixture
def silent() -> Iterator[list[str]]:
    """Eight addresses that accept connections and never answer."""
    listeners = [socket.create_server(("127.0.0.1", 0)) for _ in range(8)]
    try:
        yield [f"127.0.0.1:{s.getsockname()[1]}" for s in listeners]
    finally:
        for s in listeners:
            s.close()


def _state(addresses: list[str]) -> LaunchStateFile:
    def cluster(brokers: list[str], zookeeper: str) -> ClusterRecord:
        return ClusterRecord(datacenter="dc", bootstrap=",".join(brokers),
                             brokers=[BrokerRecord(id=i, address=a) for i, a in enumerate(brokers, start=1)],
                             zookeeper=ZooKeeperRecord(connect=f"{zookeeper}/c"))

    return LaunchStateFile(name="frozen", wan=WanRecord(api=addresses[0]),
                           clusters={"east": cluster(addresses[1:4], addresses[4]),
                                     "west": cluster(addresses[5:7], addresses[7])})


def test_every_probe_runs_at_once_each_bounded(silent: list[str]) -> None:
    async def ask() -> tuple[control.ProbeAnswers, float]:
        start = trio.current_time()
        answers = await control.ask_all(_state(silent))
        return answers, trio.current_time() - start

    answers, elapsed = trio.run(ask, clock=trio.testing.MockClock(autojump_threshold=0))
    # Eleven questions, none answered: together they took one probe's bound, not eleven.
    assert elapsed == pytest.approx(control.PROBE_TIMEOUT_S)
    assert answers.wan is None
    assert answers.zookeeper == {"east": {silent[4]: None}, "west": {silent[7]: None}}
    for name, count in (("east", 3), ("west", 2)):
        views = answers.views[name]
        assert len(views) == count and all(isinstance(v, str) and "no answer" in v for v in views), views


def test_a_broker_that_answers_nothing_is_given_up_after_the_bound(silent: list[str]) -> None:
    async def ask() -> tuple[list[object], float]:
        start = trio.current_time()
        views = await read_views(silent[:1], timeout_s=0.5)
        return list(views), trio.current_time() - start

    views, elapsed = trio.run(ask, clock=trio.testing.MockClock(autojump_threshold=0))
    assert elapsed == pytest.approx(0.5) and "no answer" in str(views[0])
