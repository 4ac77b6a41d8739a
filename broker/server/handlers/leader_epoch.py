"""OffsetForLeaderEpoch: the end offset of a leader epoch, for log truncation (KIP-101/320)."""

from __future__ import annotations

from broker.protocol.api import ApiKey
from broker.protocol.errors import KafkaError
from broker.protocol.messages import OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse
from broker.server.context import RequestContext
from broker.server.handlers.base import ApiHandler

EpochEndOffset = OffsetForLeaderEpochResponse.EpochEndOffset


async def handle(ctx: RequestContext, request: OffsetForLeaderEpochRequest) -> OffsetForLeaderEpochResponse:
    topics = []
    for topic in request.topics:
        results = []
        for req in topic.partitions:
            try:
                partition = ctx.services.replicas.get(topic.topic, req.partition)
                partition.check_leader_epoch(req.current_leader_epoch)
                epoch, end_offset = partition.log.end_offset_for_epoch(req.leader_epoch)
                results.append(EpochEndOffset(partition=req.partition, leader_epoch=epoch, end_offset=end_offset))
            except KafkaError as exc:
                results.append(EpochEndOffset(partition=req.partition, error_code=exc.code))
        topics.append(OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult(topic=topic.topic, partitions=results))
    return OffsetForLeaderEpochResponse(topics=topics)


HANDLER = ApiHandler(ApiKey.OFFSET_FOR_LEADER_EPOCH, 0, 4, handle)
