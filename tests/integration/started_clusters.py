"""A ZooKeeper-mode test cluster started for a fixture and closed whatever happens.

    @pytest.fixture
    def cluster(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[ZkCluster]:
        with started(ZkCluster(zookeeper, tmp_path, OVERRIDES)) as running:
            yield running
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeVar

from tests.support.cluster import ZkCluster

__all__ = ["started"]

C = TypeVar("C", bound=ZkCluster)


@contextmanager
def started(cluster: C) -> Iterator[C]:
    """`cluster` started, then closed on the way out, also when its start fails half-way (the
    brokers it did start are stopped)."""
    try:
        yield cluster.start()
    finally:
        cluster.close()
