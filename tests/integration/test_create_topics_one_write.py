"""Issue 19 item 12, the rest, against real standalone broker processes: one CreateTopics request
is one metadata write however many topics it names (it was one write and one fsync per topic, as
Kafka's controller writes a request's records as one batch), and its topics are still decided in
request order: the first of them win a partition limit (max.partitions.per.request,
max.broker.partitions), a refused topic takes nothing from the later ones. A Metadata request
that auto-creates topics past max.broker.partitions creates its first topics and refuses the later
ones (the order had become whatever the scheduler picked)."""

from __future__ import annotations

import json
from pathlib import Path

from broker.protocol.errors import ErrorCode
from broker.protocol.messages import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    MetadataRequest,
    MetadataResponse,
)
from deploy.broker_process import BrokerProcess
from deploy.kafka_socket import ask

LOG = "cluster-metadata.log"
# One partition for __consumer_offsets, so the limits below leave known room; offset checkpoints
# and snapshots do not matter here.
SMALL = ("num.partitions=1", "offsets.topic.num.partitions=1")
Creatable = CreateTopicsRequest.CreatableTopic
Config = CreateTopicsRequest.CreatableTopicConfig


def batches(data_dir: Path) -> list[list[str]]:
    """The names of the topics each line of the metadata log (one write and fsync) created."""
    path = data_dir / LOG
    lines = path.read_bytes().splitlines() if path.exists() else []
    return [[r["name"] for r in json.loads(line.split(b" ", 1)[1])["records"]] for line in lines]


def create(broker: BrokerProcess, topics: list[Creatable], *, validate_only: bool = False
           ) -> list[tuple[str, int, str]]:
    """One CreateTopics (v5); each topic's name, error code and message, in request order."""
    request = CreateTopicsRequest(topics=topics, timeout_ms=60_000, validate_only=validate_only)
    response: CreateTopicsResponse = ask(broker.bootstrap, request, 5)
    return [(t.name, t.error_code, t.error_message or "") for t in response.topics]


def topic(name: str, partitions: int, **configs: str) -> Creatable:
    return Creatable(name=name, num_partitions=partitions, replication_factor=1,
                     configs=[Config(name=k.replace("_", "."), value=v) for k, v in configs.items()])


def existing(broker: BrokerProcess) -> dict[str, int]:
    """Every topic the broker has, with its partition count."""
    response: MetadataResponse = ask(broker.bootstrap, MetadataRequest(topics=None), 9)
    return {t.name: len(t.partitions) for t in response.topics if t.name is not None}


def test_one_create_topics_request_of_100_topics_is_one_metadata_write(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", overrides=SMALL).start()
    try:
        hundred = [topic(f"orders-{i:03d}", 1 + i % 3, **({"retention_ms": str(1000 + i)} if i % 2 else {}))
                   for i in range(100)]
        before = batches(broker.data_dir)
        assert all(code == ErrorCode.NONE for _, code, _ in create(broker, hundred))
        assert batches(broker.data_dir)[len(before):] == [[t.name for t in hundred]]  # one line, in order

        # Validating only writes nothing.
        checked = create(broker, [topic(f"checked-{i}", 2) for i in range(50)], validate_only=True)
        assert all(code == ErrorCode.NONE for _, code, _ in checked)
        assert len(batches(broker.data_dir)) == len(before) + 1

        # 60 new among 40 that exist, a bad config and a bad name: the 60 new in one write.
        mixed = ([topic(f"orders-{i:03d}", 1) for i in range(40)] + [topic(f"more-{i:03d}", 2) for i in range(60)]
                 + [topic("bad-config", 1, cleanup_policy="sideways"), topic("bad/name", 1)])
        answers = create(broker, mixed)
        assert [code for _, code, _ in answers] == (
            [ErrorCode.TOPIC_ALREADY_EXISTS] * 40 + [ErrorCode.NONE] * 60
            + [ErrorCode.INVALID_CONFIG, ErrorCode.INVALID_TOPIC_EXCEPTION])
        assert batches(broker.data_dir)[len(before) + 1:] == [[f"more-{i:03d}" for i in range(60)]]

        assert broker.stop() == 0  # every acknowledged topic is back after a restart
        topics = existing(broker.start())
        assert {name: count for name, count in topics.items() if not name.startswith("__")} == {
            **{f"orders-{i:03d}": 1 + i % 3 for i in range(100)}, **{f"more-{i:03d}": 2 for i in range(60)}}
    finally:
        broker.kill()


def test_the_first_topics_of_a_create_topics_request_win_the_partition_limits(tmp_path: Path) -> None:
    # Room for 15 partitions beside __consumer_offsets; at most 10 new ones per request.
    limits = ("max.broker.partitions=16", "max.partitions.per.request=10")
    broker = BrokerProcess(tmp_path / "data", overrides=SMALL + limits).start()
    try:
        # A topic refused for its config takes nothing from the budget; the one asking for more
        # than is left of it is refused, a later smaller one fits.
        answers = create(broker, [topic("a1", 6, cleanup_policy="sideways"), topic("a2", 8), topic("a3", 3),
                                  topic("a4", 2), topic("a2", 1)])
        assert [(name, code) for name, code, _ in answers] == [
            ("a1", ErrorCode.INVALID_CONFIG), ("a2", ErrorCode.NONE), ("a3", ErrorCode.POLICY_VIOLATION),
            ("a4", ErrorCode.NONE), ("a2", ErrorCode.INVALID_REQUEST)]
        assert "max.partitions.per.request=10" in answers[2][2]
        # The broker's limit: an existing topic counts nothing new, of two colliding names the
        # first is created, of two topics the first fits and the later is refused.
        answers = create(broker, [topic("a2", 5), topic("b.x", 2), topic("b_x", 1), topic("b1", 2), topic("b2", 3),
                                  topic("b3", 1)])
        assert [(name, code) for name, code, _ in answers] == [
            ("a2", ErrorCode.TOPIC_ALREADY_EXISTS), ("b.x", ErrorCode.NONE), ("b_x", ErrorCode.INVALID_TOPIC_EXCEPTION),
            ("b1", ErrorCode.NONE), ("b2", ErrorCode.POLICY_VIOLATION), ("b3", ErrorCode.NONE)]
        assert "max.broker.partitions=16" in answers[4][2]
        assert {n: c for n, c in existing(broker).items() if not n.startswith("__")} == {
            "a2": 8, "a4": 2, "b.x": 2, "b1": 2, "b3": 1}
    finally:
        broker.kill()


def auto_create(broker: BrokerProcess, names: list[str]) -> dict[str, int]:
    """One Metadata request (v9) naming `names`, auto-creating them: each name's error code."""
    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in names],
                              allow_auto_topic_creation=True)
    response: MetadataResponse = ask(broker.bootstrap, request, 9)
    return {t.name: t.error_code for t in response.topics if t.name is not None}


def test_auto_creation_past_max_broker_partitions_creates_the_first_topics_of_the_request(tmp_path: Path) -> None:
    # Room for 3 one-partition topics beside __consumer_offsets.
    broker = BrokerProcess(tmp_path / "data", overrides=(*SMALL, "max.broker.partitions=4")).start()
    try:
        # Several rounds, the names in different orders: the scheduler ran the creations in
        # request order or in reverse order, at random, each time.
        for round_ in range(6):
            names = [f"r{round_}-{i}" for i in range(9)]
            if round_ % 2:
                names.reverse()
            elif round_:
                names = names[4:] + names[:4]
            answers = auto_create(broker, names)
            assert [answers[n] for n in names[3:]] == [ErrorCode.POLICY_VIOLATION] * 6, (names, answers)
            assert {answers[n] for n in names[:3]} <= {ErrorCode.NONE, ErrorCode.LEADER_NOT_AVAILABLE}
            assert sorted(n for n in existing(broker) if not n.startswith("__")) == sorted(names[:3])
            deleted: DeleteTopicsResponse = ask(
                broker.bootstrap, DeleteTopicsRequest(topic_names=names[:3], timeout_ms=60_000), 4)
            assert {r.error_code for r in deleted.responses} == {ErrorCode.NONE}
    finally:
        broker.kill()
