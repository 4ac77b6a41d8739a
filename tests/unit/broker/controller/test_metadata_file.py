"""cluster-metadata.json read strictly: anything but what `encode` writes is a StartupError that
names the file and what is wrong."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from broker.config import BrokerConfig, StartupError
from broker.controller import metadata_file
from broker.controller.model import PartitionInfo, TopicInfo
from broker.controller.standalone import StandaloneController
from broker.protocol.errors import ErrorCode, KafkaError


def _topic(name: str, partitions: int) -> TopicInfo:
    return TopicInfo(name, uuid.uuid4(), tuple(PartitionInfo(i, 0, 0, (0,), (0,)) for i in range(partitions)),
                     {"retention.ms": "1000"})


def test_what_encode_writes_decodes_back() -> None:
    topics = {"a": _topic("a", 3), "b": _topic("b", 1)}
    stored = metadata_file.decode(metadata_file.encode("cid", 2000, topics).encode())
    assert stored.producer_id_block_end == 2000
    assert stored.topics == topics


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"", "the file is empty"),
        (b"\xff\xfe\x00garbage", "not UTF-8"),
        (b'{"version": 1, "topics": {', "not valid JSON at line 1"),
        (b"[1, 2]", "the document: expected an object, got a list"),
        (b'{"version": 3, "topics": {}}', "format version 3"),
        (b'{"version": 1, "topics": []}', "topics: expected an object, got a list"),
        (b'{"version": 1, "producer_id_block_end": "x", "topics": {}}', "producer_id_block_end: expected a number"),
        (b'{"version": 1, "topics": {"t": {"topic_id": "nope", "partitions": []}}}', "topics.t.topic_id: not a UUID"),
        (b'{"version": 1, "topics": {"t": {"topic_id": "%s", "partitions": [{"partition": 1}]}}}'
         % str(uuid.uuid4()).encode(), "topics.t.partitions[0].partition: 1, expected 0"),
        (b"[" * 100_000, "nested too deeply"),
    ],
)
def test_damage_is_named(tmp_path: Path, content: bytes, problem: str) -> None:
    path = tmp_path / "cluster-metadata.json"
    path.write_bytes(content)
    with pytest.raises(StartupError) as info:
        metadata_file.read(path)
    assert str(path) in str(info.value)
    assert problem in str(info.value)


def test_a_missing_file_is_a_new_data_dir(tmp_path: Path) -> None:
    assert metadata_file.read(tmp_path / "cluster-metadata.json") is None


async def test_partition_limits_refuse_before_building(tmp_path: Path) -> None:
    config = BrokerConfig.from_properties({"log.dirs": str(tmp_path), "max.broker.partitions": "10"})
    controller = StandaloneController(config)
    await controller.create_topic("a", 6, 1, {})
    with pytest.raises(KafkaError) as info:
        await controller.create_topic("b", 5, 1, {})
    assert info.value.code == ErrorCode.POLICY_VIOLATION
    assert "max.broker.partitions=10" in info.value.message
    with pytest.raises(KafkaError) as info:
        await controller.create_partitions("a", 500_000)
    assert info.value.code == ErrorCode.POLICY_VIOLATION
    await controller.create_partitions("a", 10)
    assert "b" not in controller.topics() and len(controller.topics()["a"].partitions) == 10
