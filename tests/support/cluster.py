"""A ZooKeeper-mode cluster for a test: N real broker processes registered in one ZooKeeper, and
a kazoo client to read the znodes the controller writes.

    cluster = ZkCluster(zookeeper, tmp_path, overrides=("min.insync.replicas=2",)).start()
    try:
        cluster.bootstrap()              # "127.0.0.1:P1,127.0.0.1:P2,..." of the running brokers
        cluster.controller()             # (controller id, epoch), (-1, -1) during an election
        cluster.state("orders", 0)       # the partition's state znode, with its "zk_version"
        cluster.leader("orders", 0)      # its leader, -1 without one
        cluster.brokers[2].kill()
    finally:
        cluster.close()

Test files subclass it for what only they ask of the cluster. `own_zookeeper_cluster` gives one
its own ZooKeeper too (for a module-scoped fixture, which cannot use the `zookeeper` fixture).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Self, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from deploy.broker_process import BrokerProcess
from tests.support.polling import wait_until
from tests.support.zookeeper import ZooKeeperServer, zookeeper_server

__all__ = ["ZkCluster", "own_zookeeper_cluster"]

C = TypeVar("C", bound="ZkCluster")


class ZkCluster:
    def __init__(self, zookeeper: ZooKeeperServer, root: Path, overrides: Iterable[str] = (),
                 ids: Iterable[int] = (1, 2, 3)) -> None:
        self.zookeeper = zookeeper
        self.root = root
        self.overrides = tuple(overrides)
        self.brokers: dict[int, BrokerProcess] = {i: self.broker(i) for i in ids}
        self.zk = KazooClient(hosts=zookeeper.connect)
        self.zk.start(timeout=15)

    def broker(self, broker_id: int) -> BrokerProcess:
        """A new (not started) broker process with this id, its data under root/broker-<id>. It
        forms consumer groups at once (no initial rebalance delay, as Kafka's test brokers);
        `overrides` come after, so a test may set one."""
        return BrokerProcess(self.root / f"broker-{broker_id}", overrides=(
            f"zookeeper.connect={self.zookeeper.connect}", f"node.id={broker_id}",
            "group.initial.rebalance.delay.ms=0", *self.overrides))

    def start(self, timeout_s: float = 30) -> Self:
        """Start every broker at once; return once ZooKeeper names a controller."""
        with ThreadPoolExecutor(len(self.brokers)) as pool:
            list(pool.map(lambda b: b.start(), self.brokers.values()))
        wait_until(lambda: self.controller()[0] != -1, what="a controller", timeout_s=timeout_s)
        return self

    def bootstrap(self, *ids: int) -> str:
        """The running brokers' addresses (of these ids, or of all)."""
        return ",".join(self.brokers[i].bootstrap for i in (ids or self.brokers) if self.brokers[i].proc is not None)

    def controller(self) -> tuple[int, int]:
        """(controller id, controller epoch); (-1, -1) while nobody is the controller."""
        try:
            epoch, _ = self.zk.get("/controller_epoch")
            data, _ = self.zk.get("/controller")
        except NoNodeError:  # the first election, or a new one, is under way
            return -1, -1
        return json.loads(data)["brokerid"], int(epoch)

    def state(self, topic: str, partition: int = 0) -> dict[str, object]:
        """The partition's state znode (leader, isr, epochs) and its "zk_version". Raises
        NoNodeError before the controller wrote it."""
        data, stat = self.zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")
        return {**json.loads(data), "zk_version": stat.version}

    def leader(self, topic: str, partition: int = 0) -> int:
        """The partition's leader as its state znode names it; -1 without one (none elected,
        or the znode not written yet)."""
        try:
            return int(self.state(topic, partition)["leader"])  # type: ignore[call-overload]
        except NoNodeError:
            return -1

    def close(self) -> None:
        for process in self.brokers.values():
            if process.proc is not None:
                process.stop()
        self.zk.stop()
        self.zk.close()


@contextmanager
def own_zookeeper_cluster(cls: type[C], root: Path, overrides: Iterable[str] = (),
                          timeout_s: float = 30) -> Iterator[C]:
    """A ZooKeeper of its own under root/zookeeper and a started cluster of `cls` on it; both are
    stopped on the way out."""
    with zookeeper_server(root / "zookeeper") as zookeeper:
        cluster = cls(zookeeper, root, overrides)
        try:
            yield cluster.start(timeout_s)
        finally:
            cluster.close()
