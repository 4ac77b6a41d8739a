"""DescribeTopicPartitions (API 75, KIP-966): topics and partitions, paged by a cursor.

Kafka 4.x's admin client (and so ``kafka-topics --describe``) asks this first and falls back to
Metadata only when a broker does not offer it. Pagination follows Kafka's broker: topics sorted by
name, the answer stops after ``ResponsePartitionLimit`` partitions (capped by
``max.request.partition.size.limit``, 2000, and at least 1) and names the next partition as
``NextCursor``. Causeway has no eligible leader replicas (KIP-966's ELR needs unclean-election
machinery it does not run), so both ELR lists are empty, as Kafka reports them with ELR off.

With an authorizer, as Kafka's handler: only topics with Describe are answered (with the
principal's operations on them); a request for all topics leaves the others out, a topic named
and not describable is answered TOPIC_AUTHORIZATION_FAILED (its existence not disclosed).
"""

from __future__ import annotations

from broker.controller.model import TopicInfo, validate_topic_name
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages import DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse
from broker.server.context import RequestContext
from broker.server.handlers.base import ApiHandler
from security.acl import Operation, ResourceType

__all__ = ["HANDLER", "MAX_PARTITION_LIMIT"]

Response = DescribeTopicPartitionsResponse
Topic = DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponseTopic
Partition = DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponsePartition

# Kafka's max.request.partition.size.limit default: the most partitions one answer carries.
MAX_PARTITION_LIMIT = 2000


def _partitions(topic: TopicInfo, start: int, limit: int) -> tuple[list[Partition], int]:
    """Up to ``limit`` partitions of ``topic`` from index ``start``; and the next index, -1 if none."""
    chosen = [p for p in topic.partitions if p.partition >= start]
    chosen.sort(key=lambda p: p.partition)
    more = len(chosen) > limit
    chosen = chosen[:limit]
    partitions = [
        Partition(
            error_code=ErrorCode.NONE,
            partition_index=p.partition,
            leader_id=p.leader,
            leader_epoch=p.leader_epoch,
            replica_nodes=list(p.replicas),
            isr_nodes=list(p.isr),
            eligible_leader_replicas=[],
            last_known_elr=[],
            offline_replicas=[],
        )
        for p in chosen
    ]
    return partitions, (chosen[-1].partition + 1 if more else -1)


def _invalid(request: DescribeTopicPartitionsRequest) -> Response:
    # Kafka answers a malformed request (an empty topic name, a cursor at a negative partition or
    # at a topic not asked for) with INVALID_REQUEST on every topic it named.
    return Response(topics=[Topic(error_code=ErrorCode.INVALID_REQUEST, name=t.name)
                            for t in request.topics])


async def handle(ctx: RequestContext, request: DescribeTopicPartitionsRequest) -> Response:
    known = ctx.services.controller.topics()
    fetch_all = not request.topics
    cursor = request.cursor
    if any(not t.name for t in request.topics):
        return _invalid(request)
    names = set(known) if fetch_all else {t.name for t in request.topics}
    if cursor is not None:
        if cursor.partition_index < 0:
            return _invalid(request)
        if not fetch_all and cursor.topic_name not in names:
            return _invalid(request)
    ordered = sorted(n for n in names if cursor is None or n >= cursor.topic_name)
    remaining = max(min(MAX_PARTITION_LIMIT, request.response_partition_limit), 1)
    response = Response(topics=[])
    for name in ordered:
        # First: a cursor never names a topic the principal may not describe.
        if not ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, name):
            if not fetch_all:
                response.topics.append(Topic(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name))
            continue
        if remaining == 0:
            # The previous topic filled the answer exactly: carry on at this topic's start.
            response.next_cursor = Response.Cursor(topic_name=name, partition_index=0)
            break
        topic = known.get(name)
        if topic is None:
            if not fetch_all:
                error = (ErrorCode.INVALID_TOPIC_EXCEPTION if validate_topic_name(name) is not None
                         else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                response.topics.append(Topic(error_code=error, name=name))
            continue
        start = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        partitions, next_index = _partitions(topic, start, remaining)
        response.topics.append(Topic(
            error_code=ErrorCode.NONE,
            name=topic.name,
            topic_id=topic.topic_id,
            is_internal=topic.is_internal,
            partitions=partitions,
            topic_authorized_operations=ctx.authorized_operations(True, ResourceType.TOPIC, topic.name),
        ))
        if next_index != -1:
            response.next_cursor = Response.Cursor(topic_name=name, partition_index=next_index)
            break
        remaining -= len(partitions)
    return response


HANDLER = ApiHandler(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, 0, handle)
