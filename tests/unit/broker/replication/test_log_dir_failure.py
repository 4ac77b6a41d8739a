"""A ZooKeeper-mode replica manager with two log dirs, one of which fails a write (JBOD, as
Kafka's handleLogDirFailure is for): only the replicas of the failed dir stop, LeaderAndIsr answers
KAFKA_STORAGE_ERROR for them (a new replica goes to the healthy dir instead), the controller is
told once, and the dir comes back by itself when its probe writes, told again, its replicas leading
again on the next LeaderAndIsr."""

from __future__ import annotations

import errno
import uuid
from pathlib import Path

import pytest
import trio

from broker.config import BrokerConfig
from broker.controller.model import PartitionInfo
from broker.protocol.errors import ErrorCode, KafkaError
from broker.replication.replica_manager import ReplicaManager, broker_log_config
from broker.storage import LogManager

TOPIC_ID = uuid.uuid4()


def _state(topic: str, epoch: int = 0) -> tuple[str, uuid.UUID, PartitionInfo, bool]:
    return topic, TOPIC_ID, PartitionInfo(0, 1, epoch, (1,), (1,)), False


async def test_one_failed_dir_goes_offline_alone_and_comes_back(tmp_path: Path) -> None:
    failing, healthy = tmp_path / "d1", tmp_path / "d2"
    config = BrokerConfig.from_properties({"log.dirs": f"{failing},{healthy}", "zookeeper.connect": "127.0.0.1:1",
                                           "node.id": "1"})
    logs = LogManager([failing, healthy], broker_log_config(config))
    replicas = ReplicaManager(config, logs)
    told: list[int] = []
    offline_told, online_told, checked = trio.Event(), trio.Event(), trio.Event()

    async def announce() -> None:
        told.append(len(told))
        if len(told) == 1:
            offline_told.set()
            await checked.wait()  # the test looks at the offline state before the probe runs
        else:
            online_told.set()

    replicas.on_log_dir_event(announce)
    async with trio.open_nursery() as nursery:
        await nursery.start(replicas.run)
        for topic in ("a", "b"):  # placed one per dir, the least-loaded first
            assert await replicas.apply_leader_and_isr(1, 1, [_state(topic)], {}) == {(topic, 0): ErrorCode.NONE}
        a, b = replicas.get("a", 0), replicas.get("b", 0)
        assert a.log.directory.parent == failing and b.log.directory.parent == healthy

        for _ in range(2):  # the episode's second failure hands nothing over again
            error = replicas.health.failed(failing, OSError(errno.ENOSPC, "No space left on device"), "appending")
            assert error.code == ErrorCode.KAFKA_STORAGE_ERROR
        with trio.fail_after(10):
            await offline_told.wait()  # the handler runs in the replica manager's own task
        assert not a.is_leader and b.is_leader
        with pytest.raises(KafkaError) as info:
            a.append(b"", now_ms=0)
        assert info.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        answers = await replicas.apply_leader_and_isr(1, 1, [_state("a"), _state("b"), _state("c")], {})
        # "c" is new: the failed dir holds as few as the other and comes first, but a new replica
        # goes only to an online dir (Kafka's live log dirs), where it leads.
        assert answers == {("a", 0): ErrorCode.KAFKA_STORAGE_ERROR, ("b", 0): ErrorCode.NONE,
                           ("c", 0): ErrorCode.NONE}
        assert replicas.get("c", 0).log.directory.parent == healthy and replicas.get("c", 0).is_leader
        assert len(told) == 1
        checked.set()

        with trio.fail_after(10):
            await online_told.wait()  # the probe writes in the (roomy) dir at once: back, and told again
        assert not replicas.health.is_offline(failing)
        answers = await replicas.apply_leader_and_isr(1, 1, [_state("a", epoch=1)], {})
        assert answers == {("a", 0): ErrorCode.NONE} and a.is_leader
        nursery.cancel_scope.cancel()
