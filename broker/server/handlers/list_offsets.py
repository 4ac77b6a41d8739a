"""ListOffsets: earliest, latest, by timestamp (and the max-timestamp lookup of KIP-734).

With isolation_level 1 (read_committed, v2+) latest is the last stable offset, as Kafka answers,
and a timestamp lookup finds no offset at or past it (offset -1).

With an authorizer each topic needs Describe (TOPIC_AUTHORIZATION_FAILED for its partitions), as
Kafka's KafkaApis checks it.
"""

from __future__ import annotations

from broker.protocol.api import ApiKey
from broker.protocol.constants import EARLIEST, EARLIEST_LOCAL, LATEST, LATEST_TIERED, MAX_TIMESTAMP
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.messages import ListOffsetsRequest, ListOffsetsResponse
from broker.server.context import RequestContext
from broker.server.handlers.base import ApiHandler
from security.acl import Operation, ResourceType

PartitionResponse = ListOffsetsResponse.ListOffsetsPartitionResponse


def _lagging(topic: str, index: int, start: int, high_watermark: int) -> KafkaError:
    return KafkaError(ErrorCode.OFFSET_NOT_AVAILABLE,
                      f"{topic}-{index}: the high watermark {high_watermark} lags behind the start offset {start} "
                      f"of this leader's epoch (a leader just elected): ask again shortly")


def _lookup(ctx: RequestContext, topic: str, req: ListOffsetsRequest.ListOffsetsPartition, *,
            read_committed: bool, client: bool) -> PartitionResponse:
    partition = ctx.services.replicas.get(topic, req.partition_index)
    partition.check_leader_epoch(req.current_leader_epoch)
    log = partition.log
    epoch = partition.leader_epoch
    ts = req.timestamp
    # Consumers see up to the high watermark; read_committed ones up to the last stable offset.
    fetchable = partition.last_stable_offset if read_committed else partition.high_watermark
    # A leader just elected (after every broker restarted, say) holds records below its log end
    # that its high watermark has not reached yet: it may start at a checkpoint far behind. Its
    # "latest" would be a position below records it will soon expose, so a client is told to ask
    # again (retriable), as Kafka's Partition.fetchOffsetForTimestamp does.
    lagging = client and partition.leader_epoch_start_offset > partition.high_watermark
    if ts == LATEST:
        if lagging:
            raise _lagging(topic, req.partition_index, partition.leader_epoch_start_offset, partition.high_watermark)
        return PartitionResponse(partition_index=req.partition_index, timestamp=-1, offset=fetchable,
                                 leader_epoch=epoch)
    if ts in (EARLIEST, EARLIEST_LOCAL):
        return PartitionResponse(partition_index=req.partition_index, timestamp=-1,
                                 offset=log.log_start_offset, leader_epoch=epoch)
    if ts == LATEST_TIERED:
        return PartitionResponse(partition_index=req.partition_index, timestamp=-1,
                                 offset=log.log_start_offset - 1, leader_epoch=epoch)
    if ts == MAX_TIMESTAMP:
        found = log.offset_of_max_timestamp()
    elif ts < 0:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"unknown special timestamp {ts}")
    else:
        found = log.offset_for_timestamp(ts)
    if lagging and (found is None or found[0] >= fetchable):
        # Not below what is fetchable: the answer may be a record the watermark has yet to reach.
        raise _lagging(topic, req.partition_index, partition.leader_epoch_start_offset, partition.high_watermark)
    if found is None or (read_committed and found[0] >= fetchable):
        # No record at or after that time: Kafka answers offset -1, timestamp -1.
        return PartitionResponse(partition_index=req.partition_index, timestamp=-1, offset=-1,
                                 leader_epoch=-1)
    offset, timestamp = found
    return PartitionResponse(partition_index=req.partition_index, timestamp=timestamp,
                             offset=offset, leader_epoch=epoch)


async def handle(ctx: RequestContext, request: ListOffsetsRequest) -> ListOffsetsResponse:
    read_committed = ctx.version >= 2 and request.isolation_level == 1
    client = request.replica_id == -1  # a consumer's, not a debugging tool's (-2)
    topics = []
    for topic in request.topics:
        partitions = []
        describable = ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, topic.name)
        for req in topic.partitions:
            try:
                if not describable:
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                partitions.append(_lookup(ctx, topic.name, req, read_committed=read_committed, client=client))
            except KafkaError as exc:
                partitions.append(PartitionResponse(partition_index=req.partition_index,
                                                    error_code=exc.code, timestamp=-1, offset=-1))
        topics.append(ListOffsetsResponse.ListOffsetsTopicResponse(name=topic.name, partitions=partitions))
    return ListOffsetsResponse(topics=topics)


HANDLER = ApiHandler(ApiKey.LIST_OFFSETS, 1, 10, handle)
