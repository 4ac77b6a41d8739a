"""LogManager.place: a new partition goes to the online log dir holding the fewest, as Kafka's
LogManager creates logs only in its live dirs; with no dir online it is refused with
KAFKA_STORAGE_ERROR and nothing is placed. (The real-process test: tests/integration/
test_zk_jbod_log_dirs.py.)"""

from __future__ import annotations

import errno
import uuid
from pathlib import Path

import pytest

from broker.config import BrokerConfig
from broker.controller.model import PartitionInfo
from broker.protocol.errors import ErrorCode, KafkaError
from broker.replication.replica_manager import ReplicaManager, broker_log_config
from broker.storage import LogConfig, LogManager

NOW = 1_700_000_000_000


def _manager(*dirs: Path, offline: set[Path]) -> LogManager:
    manager = LogManager(list(dirs), LogConfig())
    manager.load_all(NOW)
    manager.place_only_online(offline.__contains__)
    return manager


def test_new_partitions_skip_an_offline_dir_even_when_it_holds_the_fewest(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    offline: set[Path] = set()
    manager = _manager(a, b, c, offline=offline)
    assert manager.place(3) == [a, b, c]  # nothing offline: the fewest first, ties to the first dir
    for index in range(2):
        manager.get_or_create("busy", index, LogConfig())  # a, then b
    offline.add(c)  # holds none, and is offline
    assert manager.place(4) == [a, b, a, b]
    assert manager.get_or_create("new", 0, LogConfig()).directory.parent == a
    offline.discard(c)  # back online: it holds the fewest again
    assert manager.place(1) == [c]


def test_no_dir_online_refuses_a_new_partition_with_a_storage_error(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    manager = _manager(a, b, offline={a, b})
    for create in (lambda: manager.place(1), lambda: manager.get_or_create("orders", 0, LogConfig())):
        with pytest.raises(KafkaError) as info:
            create()
        assert info.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert manager.logs() == {} and not (a / "orders-0").exists() and not (b / "orders-0").exists()


async def test_leader_and_isr_answers_a_storage_error_for_a_new_replica_only_when_no_dir_is_online(
        tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    config = BrokerConfig.from_properties({"log.dirs": f"{a},{b}", "zookeeper.connect": "127.0.0.1:1",
                                           "node.id": "1"})
    replicas = ReplicaManager(config, LogManager([a, b], broker_log_config(config)))
    topic_id = uuid.uuid4()

    def state(topic: str) -> tuple[str, uuid.UUID, PartitionInfo, bool]:
        return topic, topic_id, PartitionInfo(0, 1, 0, (1,), (1,)), True

    full = OSError(errno.ENOSPC, "No space left on device")
    replicas.health.failed(a, full, "appending")  # offline at once (ZooKeeper mode)
    assert await replicas.apply_leader_and_isr(1, 1, [state("one")], {}) == {("one", 0): ErrorCode.NONE}
    assert replicas.get("one", 0).log.directory.parent == b and replicas.get("one", 0).is_leader
    replicas.health.failed(b, full, "appending")
    answers = await replicas.apply_leader_and_isr(1, 1, [state("two")], {})
    assert answers == {("two", 0): ErrorCode.KAFKA_STORAGE_ERROR}
    assert not (a / "two-0").exists() and not (b / "two-0").exists()
