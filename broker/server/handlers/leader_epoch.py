"""OffsetForLeaderEpoch: the end offset of a leader epoch, for log truncation (KIP-101/279/320).

A follower (``replica_id`` >= 0, v3+) asks the leader for the end offset of its own latest epoch
before fetching, and truncates what lies past it; a consumer (-1) asks to detect a truncated log.
Both are answered by the partition's leader only (NOT_LEADER_OR_FOLLOWER elsewhere), after the
KIP-320 check of ``current_leader_epoch``; the debugging id -2 (every request before v3) may ask
any replica, as in Kafka. The answer is (the largest epoch <= the one asked, the offset where the
next epoch starts or the log end), UNDEFINED_EPOCH_OFFSET (-1, -1) when the epoch is unknown.

With an authorizer, as Kafka's KafkaApis: ClusterAction on the cluster (a broker) or Describe on
the topic (a consumer, since KIP-320), whoever asks; else TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.messages import OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse
from broker.server.context import RequestContext
from broker.server.handlers.base import ApiHandler
from security.acl import Operation, ResourceType

EpochEndOffset = OffsetForLeaderEpochResponse.EpochEndOffset
DEBUGGING_REPLICA_ID = -2


async def handle(ctx: RequestContext, request: OffsetForLeaderEpochRequest) -> OffsetForLeaderEpochResponse:
    leader_only = request.replica_id != DEBUGGING_REPLICA_ID
    cluster_action = ctx.authorize_cluster(Operation.CLUSTER_ACTION, log_denied=False)
    topics = []
    for topic in request.topics:
        results = []
        describable = cluster_action or ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, topic.topic)
        for req in topic.partitions:
            try:
                if not describable:
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                partition = ctx.services.replicas.get(topic.topic, req.partition)
                partition.check_leader_epoch(req.current_leader_epoch)
                if leader_only and not partition.is_leader:
                    raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
                epoch, end_offset = partition.log.end_offset_for_epoch(req.leader_epoch)
                results.append(EpochEndOffset(partition=req.partition, leader_epoch=epoch, end_offset=end_offset))
            except KafkaError as exc:
                results.append(EpochEndOffset(partition=req.partition, error_code=exc.code))
        topics.append(OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult(topic=topic.topic, partitions=results))
    return OffsetForLeaderEpochResponse(topics=topics)


HANDLER = ApiHandler(ApiKey.OFFSET_FOR_LEADER_EPOCH, 0, 4, handle)
