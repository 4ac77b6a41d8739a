"""DescribeProducers (API 61, KIP-664): the producers a replica of a partition tracks, as Kafka's
KafkaApis.handleDescribeProducersRequest, for `kafka-transactions describe-producers` and
`find-hanging`.

Read on the topic, else TOPIC_AUTHORIZATION_FAILED; a partition not hosted here is
UNKNOWN_TOPIC_OR_PARTITION. Leader and followers alike answer from their own log, as Kafka's
Partition.activeProducerState: `--broker-id` asks one replica, and `find-hanging --broker-id`
asks a broker for every partition it holds a replica of, led or not. Each producer: its
epoch, last sequence and the timestamp of its last batch (-1 for a producer known only from a
marker), the coordinator epoch of its last marker, and the first offset of its open transaction
(-1 when none is open): a transaction open for long is a hanging one.
"""

from __future__ import annotations

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.messages import DescribeProducersRequest, DescribeProducersResponse
from broker.server.context import RequestContext
from broker.server.handlers.base import ApiHandler
from broker.storage.producer_state import ProducerStateManager
from security.acl import Operation, ResourceType

__all__ = ["HANDLER"]

PartitionResponse = DescribeProducersResponse.PartitionResponse
ProducerState = DescribeProducersResponse.ProducerState


def _producers(state: ProducerStateManager) -> list[ProducerState]:
    out = []
    for producer_id, entry in sorted(state.producers.items()):
        last = entry.batches[-1] if entry.batches else None
        out.append(ProducerState(producer_id=producer_id, producer_epoch=entry.epoch, last_sequence=entry.last_seq,
                                 last_timestamp=last.timestamp if last is not None else -1,
                                 coordinator_epoch=entry.coordinator_epoch,
                                 current_txn_start_offset=state.ongoing.get(producer_id, -1)))
    return out


async def handle(ctx: RequestContext, request: DescribeProducersRequest) -> DescribeProducersResponse:
    topics = []
    for topic in request.topics:
        allowed = ctx.authorize(Operation.READ, ResourceType.TOPIC, topic.name)
        results = []
        for index in topic.partition_indexes:
            try:
                if not allowed:
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                partition = ctx.services.replicas.get(topic.name, index)
                results.append(PartitionResponse(partition_index=index,
                                                  active_producers=_producers(partition.log.producers)))
            except KafkaError as exc:
                results.append(PartitionResponse(partition_index=index, error_code=exc.code,
                                                 error_message=str(exc) if exc.args else None))
        topics.append(DescribeProducersResponse.TopicResponse(name=topic.name, partitions=results))
    return DescribeProducersResponse(topics=topics)


HANDLER = ApiHandler(ApiKey.DESCRIBE_PRODUCERS, 0, 0, handle)
