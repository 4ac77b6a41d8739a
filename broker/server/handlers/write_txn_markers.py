"""WriteTxnMarkers (API 27): a transaction coordinator's COMMIT and ABORT markers to partition
leaders, as Kafka's KafkaApis.handleWriteTxnMarkersRequest.

An inter-broker API: with an authorizer the sender needs ClusterAction on the cluster, else every
partition is answered CLUSTER_AUTHORIZATION_FAILED and nothing is written (a client cannot end
anyone's transaction). Each marker's partitions go through the one append path
(broker/replication/append.py) with the coordinator's origin (internal topics allowed), acks=-1
and ``request.timeout.ms``, as Kafka appends them: a partition not hosted here is
UNKNOWN_TOPIC_OR_PARTITION, one not led NOT_LEADER_OR_FOLLOWER, an older producer epoch
INVALID_PRODUCER_EPOCH, an older coordinator epoch TRANSACTION_COORDINATOR_FENCED, a mirror
topic (only its mirror writes it) Kafka's error for it. A marker for a producer with no ongoing
transaction in a partition is written all the same and answered NONE, as Kafka's (it ends an
empty transaction: a retried marker, or a partition the producer added but never wrote).

A marker written to a ``__consumer_offsets`` partition also decides the producer's held
transactional offset commits there (Kafka's handleTxnCompletion): committed at COMMIT, dropped
at ABORT. The transaction coordinator of this broker writes its local markers through
:func:`write_markers` without the round trip.
"""

from __future__ import annotations

from functools import partial

from broker.controller.model import TopicInfo
from broker.coordinator.coordinator import OFFSETS_TOPIC
from broker.protocol.api import ApiKey
from broker.protocol.control_records import ControlType
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.messages import WriteTxnMarkersRequest, WriteTxnMarkersResponse
from broker.replication.append import AppendEntry, AppendOrigin, TxnMarker, append_records
from broker.server.context import BrokerServices, RequestContext
from broker.server.handlers.base import ApiHandler
from broker.server.topic_configs import refuse_if_mirror
from security.acl import Operation

__all__ = ["HANDLER", "write_markers"]

MarkerResult = WriteTxnMarkersResponse.WritableTxnMarkerResult
TopicResult = WriteTxnMarkersResponse.WritableTxnMarkerTopicResult
PartitionResult = WriteTxnMarkersResponse.WritableTxnMarkerPartitionResult


def _check_topic(name: str, topic: TopicInfo | None) -> None:
    if topic is None:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    refuse_if_mirror(name, topic.configs)


def _every_partition(request: WriteTxnMarkersRequest, code: ErrorCode) -> WriteTxnMarkersResponse:
    """The answer that gives every partition of the request one error (Kafka's getErrorResponse)."""
    return WriteTxnMarkersResponse(markers=[
        MarkerResult(producer_id=marker.producer_id, topics=[
            TopicResult(name=topic.name, partitions=[PartitionResult(partition_index=index, error_code=code)
                                                     for index in topic.partition_indexes])
            for topic in marker.topics])
        for marker in request.markers])


async def handle(ctx: RequestContext, request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
    if not ctx.authorize_cluster(Operation.CLUSTER_ACTION):
        return _every_partition(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    return await write_markers(ctx.services, request)


async def write_markers(services: BrokerServices, request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
    """Append the request's markers as the partitions' leader (no authorization here)."""
    topics = services.controller.topics()
    entries: list[AppendEntry] = []
    for marker in request.markers:
        control_type = ControlType.COMMIT if marker.transaction_result else ControlType.ABORT
        records = TxnMarker(control_type, marker.producer_id, marker.producer_epoch, marker.coordinator_epoch)
        for topic in marker.topics:
            check = partial(_check_topic, topic.name, topics.get(topic.name))
            entries += [AppendEntry(topic.name, index, records, check=check) for index in topic.partition_indexes]
    results = await append_records(services.replicas, entries, origin=AppendOrigin.COORDINATOR,
                                   required_acks=-1, timeout_ms=services.config.request_timeout_ms)
    codes = [result.error_code for result in results]
    groups = services.groups
    if groups is not None:
        done = iter(range(len(codes)))
        for marker in request.markers:
            for topic in marker.topics:
                for index in topic.partition_indexes:
                    at = next(done)
                    if topic.name == OFFSETS_TOPIC and codes[at] == ErrorCode.NONE:
                        try:
                            await groups.complete_txn(marker.producer_id, index, marker.transaction_result)
                        except KafkaError as exc:
                            codes[at] = exc.code  # the coordinator sends the marker again
    appends = iter(codes)
    return WriteTxnMarkersResponse(markers=[
        MarkerResult(producer_id=marker.producer_id, topics=[
            TopicResult(name=topic.name, partitions=[
                PartitionResult(partition_index=index, error_code=next(appends))
                for index in topic.partition_indexes])
            for topic in marker.topics])
        for marker in request.markers])


HANDLER = ApiHandler(ApiKey.WRITE_TXN_MARKERS, 0, 1, handle)
