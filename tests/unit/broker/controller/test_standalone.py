from pathlib import Path

import pytest

from broker.config import BrokerConfig
from broker.controller.model import TopicInfo
from broker.controller.standalone import PRODUCER_ID_BLOCK, StandaloneController
from broker.protocol.errors import ErrorCode, KafkaError


def _config(tmp_path: Path, **extra: str) -> BrokerConfig:
    return BrokerConfig.from_properties({"log.dirs": str(tmp_path), **extra})


class Recorder:
    def __init__(self) -> None:
        self.changed: list[str] = []
        self.deleted: list[str] = []

    async def on_topic_changed(self, topic: TopicInfo) -> None:
        self.changed.append(f"{topic.name}/{len(topic.partitions)}")

    async def on_topic_deleted(self, topic: TopicInfo) -> None:
        self.deleted.append(topic.name)


async def test_topics_survive_a_restart(tmp_path: Path) -> None:
    recorder = Recorder()
    controller = StandaloneController(_config(tmp_path), recorder)
    created = await controller.create_topic("orders", 3, 1, {"retention.ms": "1000"})
    await controller.create_partitions("orders", 5)
    await controller.create_topic("gone", 1, 1, {})
    await controller.delete_topic("gone")
    assert recorder.changed == ["orders/3", "orders/5", "gone/1"]
    assert recorder.deleted == ["gone"]

    again = StandaloneController(_config(tmp_path))
    assert again.cluster_id == controller.cluster_id
    topic = again.topics()["orders"]
    assert topic.topic_id == created.topic_id
    assert len(topic.partitions) == 5
    assert topic.configs == {"retention.ms": "1000"}
    assert "gone" not in again.topics()
    assert (tmp_path / "meta.properties").read_text().count("cluster.id=") == 1


@pytest.mark.parametrize(
    ("name", "partitions", "factor", "code"),
    [
        ("bad name", 1, 1, ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("..", 1, 1, ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("x" * 250, 1, 1, ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("ok", 0, 1, ErrorCode.INVALID_PARTITIONS),
        ("ok", 1, 2, ErrorCode.INVALID_REPLICATION_FACTOR),
        ("a_b", 1, 1, ErrorCode.INVALID_TOPIC_EXCEPTION),  # collides with a.b
        ("a.b", 1, 1, ErrorCode.TOPIC_ALREADY_EXISTS),
    ],
)
async def test_create_topic_errors(tmp_path: Path, name: str, partitions: int, factor: int, code: ErrorCode) -> None:
    controller = StandaloneController(_config(tmp_path))
    await controller.create_topic("a.b", 1, 1, {})
    with pytest.raises(KafkaError) as info:
        await controller.create_topic(name, partitions, factor, {})
    assert info.value.code == code


async def test_partitions_only_grow(tmp_path: Path) -> None:
    controller = StandaloneController(_config(tmp_path))
    await controller.create_topic("t", 2, 1, {})
    with pytest.raises(KafkaError) as info:
        await controller.create_partitions("t", 2)
    assert info.value.code == ErrorCode.INVALID_PARTITIONS


async def test_producer_ids_are_never_reused_across_restarts(tmp_path: Path) -> None:
    controller = StandaloneController(_config(tmp_path))
    first = [await controller.allocate_producer_id() for _ in range(3)]
    assert first == [0, 1, 2]
    again = StandaloneController(_config(tmp_path))
    assert await again.allocate_producer_id() == PRODUCER_ID_BLOCK


def test_data_dir_of_another_broker_is_refused(tmp_path: Path) -> None:
    StandaloneController(_config(tmp_path))
    with pytest.raises(RuntimeError, match="belongs to broker 0"):
        StandaloneController(_config(tmp_path, **{"node.id": "1"}))
