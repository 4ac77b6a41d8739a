"""DescribeTopicPartitions (API 75, KIP-966) against a real broker: Kafka's cursor pagination, its
partition limit, errors for missing topics and bad cursors, empty eligible-leader-replica lists."""

from __future__ import annotations

import socket

from confluent_kafka.admin import AdminClient, NewTopic

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
)
from deploy.broker_process import BrokerProcess
from deploy.kafka_socket import call, connect, decode_response, message_frame, read_frame

Request = DescribeTopicPartitionsRequest
Response = DescribeTopicPartitionsResponse
# Every operation a topic supports (READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS,
# ALTER_CONFIGS), as Kafka reports them when it runs no authorizer: 3576.
ALL_TOPIC_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))  # READ .. ALTER_CONFIGS


def describe(sock: socket.socket, request: Request) -> Response:
    """One DescribeTopicPartitions v0 round trip (flexible: header v2 out, header v1 back)."""
    sock.sendall(message_frame(request, 0, 7))
    frame = read_frame(sock)
    assert frame[4] == 0  # no tagged fields
    response: Response = decode_response(frame, ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, 7)  # checks correlation id 7
    return response


def walk(sock: socket.socket, names: list[str], limit: int) -> tuple[list[list[tuple[str, int]]], list[Response]]:
    """Follow the cursor to the end (bounded): the (topic, partition) pairs of each page."""
    pages, responses = [], []
    cursor = None
    for _ in range(20):
        response = describe(sock, Request(topics=[Request.TopicRequest(n) for n in names],
                                          response_partition_limit=limit, cursor=cursor))
        responses.append(response)
        pages.append([(t.name or "", p.partition_index) for t in response.topics for p in t.partitions])
        if response.next_cursor is None:
            return pages, responses
        cursor = Request.Cursor(response.next_cursor.topic_name, response.next_cursor.partition_index)
    raise AssertionError(f"no end after 20 pages: {pages}")


def test_pages_follow_kafkas_cursor(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic("dtp-a", 3, 1), NewTopic("dtp-b", 2, 1),
                                       NewTopic("dtp-c", 1, 1)]).values():
        future.result(timeout=30)
    with connect(broker.bootstrap, timeout_s=30) as sock:
        # Advertised, so Kafka 4.x's admin client uses it rather than Metadata.
        versions: ApiVersionsResponse = call(sock, ApiVersionsRequest(), 0, 1)
        offered = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
        assert offered[ApiKey.DESCRIBE_TOPIC_PARTITIONS] == (0, 0)

        # Asked out of order, with a topic that does not exist: answered sorted, two partitions a page;
        # a page that ends exactly at a topic's end points the cursor at the next topic's start.
        pages, responses = walk(sock, ["dtp-c", "dtp-a", "no-such-topic", "dtp-b"], 2)
        assert pages == [[("dtp-a", 0), ("dtp-a", 1)], [("dtp-a", 2), ("dtp-b", 0)], [("dtp-b", 1), ("dtp-c", 0)],
                         []], pages
        cursors = [(r.next_cursor.topic_name, r.next_cursor.partition_index) for r in responses if r.next_cursor]
        assert cursors == [("dtp-a", 2), ("dtp-b", 1), ("no-such-topic", 0)]
        missing = responses[-1].topics
        assert [(t.name, t.error_code) for t in missing] == [("no-such-topic", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]

        first = responses[0].topics[0]
        assert first.error_code == ErrorCode.NONE and first.topic_authorized_operations == ALL_TOPIC_OPERATIONS
        assert first.topic_id.int != 0 and not first.is_internal
        for p in first.partitions:
            assert (p.leader_id, p.replica_nodes, p.isr_nodes) == (0, [0], [0])
            assert p.eligible_leader_replicas == [] and p.last_known_elr == [] and p.offline_replicas == []

        # No topics named: every topic, one answer within Kafka's default limit; a limit of 0 counts as 1.
        everything = describe(sock, Request(topics=[], response_partition_limit=2000))
        names = [t.name for t in everything.topics]
        assert {"dtp-a", "dtp-b", "dtp-c"} <= set(names) and names == sorted(names)
        assert everything.next_cursor is None and "no-such-topic" not in names
        one = describe(sock, Request(topics=[Request.TopicRequest("dtp-b")], response_partition_limit=0))
        assert [len(t.partitions) for t in one.topics] == [1]
        assert one.next_cursor is not None and (one.next_cursor.topic_name, one.next_cursor.partition_index) == (
            "dtp-b", 1)

        # A cursor at a negative partition, or at a topic not asked for, is an invalid request.
        for cursor in (Request.Cursor("dtp-a", -1), Request.Cursor("dtp-z", 0)):
            bad = describe(sock, Request(topics=[Request.TopicRequest("dtp-a")], cursor=cursor))
            assert [(t.name, t.error_code) for t in bad.topics] == [("dtp-a", ErrorCode.INVALID_REQUEST)]
