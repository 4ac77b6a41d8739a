"""StandaloneController.create_topics: one CreateTopics request's topics are decided in request
order, each seeing the ones before it (names, collisions, partition limits, the request's
partition budget), and made durable in one metadata batch (issue 19 item 12). The real-process
tests: tests/integration/test_create_topics_one_write.py."""

from __future__ import annotations

from pathlib import Path

from broker.config import BrokerConfig
from broker.controller.base import NewTopic
from broker.controller.model import TopicInfo
from broker.controller.standalone import StandaloneController
from broker.protocol.errors import ErrorCode, KafkaError


class Budget:
    """max.partitions.per.request as the CreateTopics handler keeps it."""

    def __init__(self, limit: int) -> None:
        self.limit, self.used = limit, 0

    def take(self, partitions: int) -> None:
        if partitions > self.limit - self.used:
            raise KafkaError(ErrorCode.POLICY_VIOLATION, "over the request's budget")

    def commit(self, partitions: int) -> None:
        self.used += partitions


class Recorder:
    def __init__(self) -> None:
        self.changed: set[str] = set()

    async def on_topic_changed(self, topic: TopicInfo) -> None:
        self.changed.add(topic.name)

    async def on_topic_deleted(self, topic: TopicInfo) -> None:
        raise AssertionError(topic.name)


def codes(results: list[TopicInfo | KafkaError]) -> list[ErrorCode]:
    return [r.code if isinstance(r, KafkaError) else ErrorCode.NONE for r in results]


async def test_a_hundred_topics_are_one_batch_and_each_is_told_to_the_listener(tmp_path: Path) -> None:
    recorder = Recorder()
    controller = StandaloneController(BrokerConfig.from_properties({"log.dirs": str(tmp_path)}), recorder)
    before = controller.metadata_log.batches_written
    results = await controller.create_topics([NewTopic(f"t{i:03d}", 1 + i % 2, 1) for i in range(100)])
    assert codes(results) == [ErrorCode.NONE] * 100
    assert controller.metadata_log.batches_written == before + 1
    assert recorder.changed == {f"t{i:03d}" for i in range(100)}
    assert StandaloneController(BrokerConfig.from_properties({"log.dirs": str(tmp_path)})).topics().keys() == {
        f"t{i:03d}" for i in range(100)}

    checked = await controller.create_topics([NewTopic("only-checked", 1, 1)], validate_only=True)
    assert codes(checked) == [ErrorCode.NONE] and "only-checked" not in controller.topics()
    assert controller.metadata_log.batches_written == before + 1


async def test_the_first_topics_win_the_limits_in_request_order(tmp_path: Path) -> None:
    config = BrokerConfig.from_properties({"log.dirs": str(tmp_path), "max.broker.partitions": "9"})
    controller = StandaloneController(config)
    results = await controller.create_topics(
        [NewTopic("a", 4, 1), NewTopic("a", 1, 1), NewTopic("b.x", 4, 1), NewTopic("b_x", 1, 1), NewTopic("c", 3, 1),
         NewTopic("d", 2, 1), NewTopic("e", 0, 1), NewTopic("f", 1, 1)],
        budget=Budget(10))
    assert codes(results) == [
        ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS, ErrorCode.NONE, ErrorCode.INVALID_TOPIC_EXCEPTION,
        ErrorCode.POLICY_VIOLATION,  # 4 + 4 + 3 passes the request's 10
        ErrorCode.POLICY_VIOLATION,  # 4 + 4 + 2 fits the request's 10, not max.broker.partitions=9
        ErrorCode.INVALID_PARTITIONS, ErrorCode.NONE]
    assert isinstance(results[4], KafkaError) and results[4].message == "over the request's budget"
    assert isinstance(results[5], KafkaError) and "max.broker.partitions=9" in results[5].message
    assert sorted(controller.topics()) == ["a", "b.x", "f"]
    assert controller.partition_count() == 9
