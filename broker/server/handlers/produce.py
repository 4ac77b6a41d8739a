"""Produce: append record batches, as bytes, to partition logs.

No record is decoded here: each partition's records go to ``Partition.append`` which checks
batch headers and CRCs, the producer's sequence, patches base offsets and writes.

``acks=all`` (-1), as Kafka's DelayedProduce: refused with NOT_ENOUGH_REPLICAS before appending
when the ISR is smaller than ``min.insync.replicas``; otherwise every partition of the request is
appended first, then the answer waits, for all of them at once, until each one's high watermark
passes its batches (the ISR has them), at most the request's ``timeout_ms``: a partition still
waiting then is answered REQUEST_TIMED_OUT, one whose ISR fell below ``min.insync.replicas``
meanwhile NOT_ENOUGH_REPLICAS_AFTER_APPEND, one whose replica stopped leading
NOT_LEADER_OR_FOLLOWER. With an ISR of one (a standalone broker) the high watermark passes the
batches at the append and nothing waits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import trio

from broker.clock import now_ms
from broker.controller.model import is_internal_topic
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.messages import ProduceRequest, ProduceResponse
from broker.replication.partition import Partition
from broker.server.context import RequestContext
from broker.server.handlers.base import ApiHandler
from broker.server.topic_configs import refuse_if_mirror
from broker.storage.log import RecordErrors

PartitionResponse = ProduceResponse.PartitionProduceResponse
RecordError = ProduceResponse.BatchIndexAndErrorMessage


def _error(index: int, code: ErrorCode, message: str | None = None) -> PartitionResponse:
    return PartitionResponse(index=index, error_code=code, base_offset=-1, error_message=message)


def _refused(index: int, exc: KafkaError) -> PartitionResponse:
    """The answer for a refused append; records refused one by one are named (KIP-467, v8+:
    older versions drop the fields), so a client fails only those records."""
    response = _error(index, exc.code, exc.message or None)
    if isinstance(exc, RecordErrors):
        response.record_errors = [RecordError(batch_index=i, batch_index_error_message=m)
                                  for i, m in exc.record_errors]
    return response


class _Answer(Protocol):
    error_code: int


async def wait_for_replicas(waits: Sequence[tuple[_Answer, Partition, int]], timeout_ms: int) -> None:
    """Wait until each partition's high watermark reaches its required offset, all at once,
    at most ``timeout_ms``; sets each answer's error code (REQUEST_TIMED_OUT when unfinished).
    Produce's acks=all and LinkAppend wait this one way."""

    async def wait_one(response: _Answer, partition: Partition, required: int) -> None:
        response.error_code = await partition.wait_for_high_watermark(required)

    for response, _, _ in waits:
        response.error_code = ErrorCode.REQUEST_TIMED_OUT  # until its wait says otherwise
    with trio.move_on_after(max(timeout_ms, 0) / 1000):
        async with trio.open_nursery() as nursery:
            for response, partition, required in waits:
                nursery.start_soon(wait_one, response, partition, required)


async def handle(ctx: RequestContext, request: ProduceRequest) -> ProduceResponse | None:
    acks = request.acks
    replicas = ctx.services.replicas
    timestamp = now_ms()
    responses: list[ProduceResponse.TopicProduceResponse] = []
    waits: list[tuple[PartitionResponse, Partition, int]] = []
    for topic_data in request.topic_data:
        partitions: list[PartitionResponse] = []
        topic = ctx.services.controller.topics().get(topic_data.name)
        for data in topic_data.partition_data:
            if acks not in (-1, 0, 1):
                partitions.append(_error(data.index, ErrorCode.INVALID_REQUIRED_ACKS))
                continue
            if request.transactional_id is not None:
                partitions.append(
                    _error(data.index, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                           "transactions are not supported yet")
                )
                continue
            if is_internal_topic(topic_data.name):
                # Only the broker writes its internal topics (Kafka: internalTopicsAllowed).
                partitions.append(_error(data.index, ErrorCode.INVALID_TOPIC_EXCEPTION,
                                         f"Cannot append to internal topic {topic_data.name}"))
                continue
            if data.records is None or topic is None:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if topic is None else ErrorCode.CORRUPT_MESSAGE
                partitions.append(_error(data.index, code))
                continue
            try:
                refuse_if_mirror(topic_data.name, topic.configs)  # only its mirror writes it (LinkAppend)
                partition = replicas.get(topic_data.name, data.index)
                if not partition.is_leader:
                    raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
                if acks == -1:
                    isr = len(partition.isr)
                    min_isr = partition.log.config.min_insync_replicas
                    if isr < min_isr:
                        raise KafkaError(
                            ErrorCode.NOT_ENOUGH_REPLICAS,
                            f"ISR has {isr} replicas, min.insync.replicas is {min_isr}",
                        )
                result = partition.append(data.records, now_ms=timestamp,
                                          transactional=request.transactional_id is not None)
                await partition.wait_flushed(result)
            except KafkaError as exc:
                partitions.append(_refused(data.index, exc))
                continue
            answer = PartitionResponse(
                index=data.index,
                error_code=ErrorCode.NONE,
                base_offset=result.first_offset,
                log_append_time_ms=result.log_append_time,
                log_start_offset=result.log_start_offset,
            )
            partitions.append(answer)
            if acks == -1 and partition.high_watermark <= result.last_offset:
                waits.append((answer, partition, result.last_offset + 1))
        responses.append(
            ProduceResponse.TopicProduceResponse(name=topic_data.name, partition_responses=partitions)
        )
    if waits:
        await wait_for_replicas(waits, request.timeout_ms)
    if acks == 0:
        return None  # the client expects no answer at all
    return ProduceResponse(responses=responses)


HANDLER = ApiHandler(ApiKey.PRODUCE, 3, 11, handle)
