"""Produce: append record batches, as bytes, to partition logs.

No record is decoded here. Every partition of the request goes through the broker's one append
path (broker/replication/append.py, as a client's: ``AppendOrigin.CLIENT``): the required acks,
internal topics, leadership, ``min.insync.replicas`` with acks=all (-1), the append
(``Partition.append``: batch headers and CRCs, the producer's sequence, base offsets), the fsync
at ``flush.messages``, then with acks=all the wait, for all partitions at once and at most the
request's ``timeout_ms``, until each one's high watermark passes its batches (the ISR has them):
REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS_AFTER_APPEND, NOT_LEADER_OR_FOLLOWER as Kafka's
DelayedProduce answers. With an ISR of one (a standalone broker) the high watermark passes the
batches at the append and nothing waits.

A produce with a transactional id may carry transactional batches: the log opens each producer's
transaction at its first one (broker/storage/producer_state.py). There is no transaction
coordinator yet to verify that the partition was added to the transaction (KIP-890).

Here: the request's own checks of each topic (it exists; it is not a mirror topic, which only
its mirror writes, by LinkAppend) and the answer; acks=0 gets none at all.

With an authorizer, as Kafka's KafkaApis: a produce with a transactional id needs Write on it
(else every partition is answered TRANSACTIONAL_ID_AUTHORIZATION_FAILED and nothing is written);
each topic needs Write on it, decided once per topic (a partition of a topic refused is answered
TOPIC_AUTHORIZATION_FAILED and never reaches the append path; the others are written).
"""

from __future__ import annotations

from functools import partial

from broker.controller.model import TopicInfo
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.messages import ProduceRequest, ProduceResponse, Records
from broker.replication.append import AppendEntry, AppendOrigin, LeaderAppend, append_records
from broker.server import request_metrics
from broker.server.context import RequestContext
from broker.server.handlers.base import ApiHandler
from broker.server.topic_configs import refuse_if_mirror
from broker.storage.log import RecordErrors
from security.acl import Operation, ResourceType

PartitionResponse = ProduceResponse.PartitionProduceResponse
RecordError = ProduceResponse.BatchIndexAndErrorMessage


def _check_topic(name: str, topic: TopicInfo | None, records: Records | None) -> None:
    if topic is None:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    if records is None:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE)
    refuse_if_mirror(name, topic.configs)  # only its mirror writes it (LinkAppend)


def _refused(index: int, exc: KafkaError) -> PartitionResponse:
    """The answer for a refused append; records refused one by one are named (KIP-467, v8+:
    older versions drop the fields), so a client fails only those records."""
    response = PartitionResponse(index=index, error_code=exc.code, base_offset=-1, error_message=exc.message or None)
    if isinstance(exc, RecordErrors):
        response.record_errors = [RecordError(batch_index=i, batch_index_error_message=m)
                                  for i, m in exc.record_errors]
    return response


def _answer(appended: LeaderAppend) -> PartitionResponse:
    if appended.refused is not None:
        return _refused(appended.index, appended.refused)
    result = appended.result
    assert result is not None  # appended, as it was not refused
    return PartitionResponse(
        index=appended.index,
        error_code=appended.acks,  # the batches are in the leader's log whatever the ISR answered
        base_offset=result.first_offset,
        log_append_time_ms=result.log_append_time,
        log_start_offset=result.log_start_offset,
    )


def _denied(index: int, code: ErrorCode) -> PartitionResponse:
    return PartitionResponse(index=index, error_code=code, base_offset=-1)


async def handle(ctx: RequestContext, request: ProduceRequest) -> ProduceResponse | None:
    if request.transactional_id is not None and not ctx.authorize(Operation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                                                  request.transactional_id):
        if request.acks == 0:
            return None
        return ProduceResponse(responses=[
            ProduceResponse.TopicProduceResponse(name=t.name, partition_responses=[
                _denied(p.index, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED) for p in t.partition_data])
            for t in request.topic_data])
    writable = {name: ctx.authorize(Operation.WRITE, ResourceType.TOPIC, name)
                for name in {t.name for t in request.topic_data}}
    topics = ctx.services.controller.topics()
    entries = [AppendEntry(topic_data.name, data.index, data.records,
                           check=partial(_check_topic, topic_data.name, topics.get(topic_data.name), data.records))
               for topic_data in request.topic_data if writable[topic_data.name]
               for data in topic_data.partition_data]
    appended = await append_records(ctx.services.replicas, entries, origin=AppendOrigin.CLIENT,
                                    required_acks=request.acks, timeout_ms=request.timeout_ms,
                                    transactional=request.transactional_id is not None)
    request_metrics.count_appended(entries, appended)
    appends = iter(appended)
    if request.acks == 0:
        return None  # the client expects no answer at all
    return ProduceResponse(responses=[
        ProduceResponse.TopicProduceResponse(
            name=topic_data.name,
            partition_responses=[_answer(next(appends)) if writable[topic_data.name]
                                 else _denied(data.index, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                                 for data in topic_data.partition_data])
        for topic_data in request.topic_data
    ])


HANDLER = ApiHandler(ApiKey.PRODUCE, 3, 11, handle)
