"""LinkAppend (Causeway's API key 10000): a link-mode mirror appends the source's record batches
to a mirror topic, as they are.

Per partition, on its leader: the topic must be a mirror topic (``causeway.mirror.name`` set)
owned by the request's ``LinkName``, else INVALID_REQUEST saying why (a promoted topic, another
mirror's, a normal topic). The batches keep their offsets, timestamps and producer fields and are
stamped with this leader's epoch (``Partition.append_copied``): already-present batches are
skipped once seen to be the very batches held, a gap allowed only where the source has one, a
batch that would skip ahead of the log end, straddle it or differ from the one held refused
(OFFSET_OUT_OF_RANGE; broker/storage/link_offsets.py). Then the answer
waits as Produce's acks=all does: NOT_ENOUGH_REPLICAS before appending when the ISR is below
``min.insync.replicas``; the high watermark reaching the new log end within ``TimeoutMs``, else
REQUEST_TIMED_OUT. Each partition answers its log end, high watermark and log start offset, so
the mirror knows where the copy stands even after a refusal.

``LogStartOffset`` (the source partition's, -1: not given) then moves the copy's log start up to
it, as a Kafka follower follows its leader's log start from each fetch response: never backwards,
never past the high watermark (so only once the in-sync replicas hold what it keeps), and records
the source deleted (DeleteRecords, retention) leave the copy too. One past the copy's log end
(after the append) is refused, OFFSET_OUT_OF_RANGE: it would delete every record the copy holds.
A partition may carry no batches, only a log start (the source deleted records while nothing new
was written).

Version 0 does not say where the source's batch before the first one ended (PreviousEndOffset),
so a gap cannot be told from a skip ahead of the copy: every partition of a version 0 request is
refused, UNSUPPORTED_VERSION, saying so. (Refused rather than unlisted in ApiVersions: an older
mirror then says why in its status, instead of taking this broker for one that is not Causeway's.)
"""

from __future__ import annotations

from broker.clock import now_ms
from broker.controller.model import TopicInfo, is_internal_topic
from broker.protocol.api import ApiKey
from broker.protocol.constants import MIRROR_NAME_CONFIG
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.messages import LinkAppendRequest, LinkAppendResponse
from broker.replication.partition import Partition
from broker.server.context import RequestContext
from broker.server.handlers.base import ApiHandler
from broker.server.handlers.produce import wait_for_replicas
from broker.server.topic_configs import mirror_name
from broker.storage.link_offsets import check_copied_offsets, check_log_start

__all__ = ["HANDLER"]

PartitionResponse = LinkAppendResponse.LinkAppendPartitionResponse


def _check_owner(name: str, topic: TopicInfo, link_name: str) -> None:
    owner = mirror_name(topic.configs)
    if owner is None:
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         f"topic {name} is not a mirror topic ({MIRROR_NAME_CONFIG} is not set: never a mirror "
                         f"topic, or promoted): mirror {link_name} may not write to it")
    if owner != link_name:
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         f"topic {name} is the mirror topic of mirror {owner}, not of mirror {link_name}")


def _follow_log_start(partition: Partition, source_start: int) -> None:
    """Move the copy's log start up to the source's, within the high watermark (as Kafka's
    follower does with its leader's: ReplicaFetcherThread, maybeIncrementLogStartOffset)."""
    log = partition.log
    target = min(source_start, log.high_watermark)
    if partition.is_leader and target > log.log_start_offset:
        partition.delete_records_before(target)


def _positions(response: PartitionResponse, partition: Partition) -> None:
    log = partition.log
    response.log_end_offset = log.log_end_offset
    response.high_watermark = log.high_watermark
    response.log_start_offset = log.log_start_offset


def _check_version(version: int) -> None:
    if version < 1:
        raise KafkaError(ErrorCode.UNSUPPORTED_VERSION,
                         f"LinkAppend version {version} does not say where the source's batch before the first one "
                         f"ended (PreviousEndOffset, version 1), so a gap cannot be told from a skip ahead of the "
                         f"copy: this broker takes version 1; upgrade the mirror")


async def handle(ctx: RequestContext, request: LinkAppendRequest) -> LinkAppendResponse:
    replicas = ctx.services.replicas
    timestamp = now_ms()
    topics: list[LinkAppendResponse.LinkAppendTopicResponse] = []
    waits: list[tuple[PartitionResponse, Partition, int]] = []
    starts: list[tuple[PartitionResponse, Partition, int]] = []  # (answer, partition, source log start)
    for topic_data in request.topics:
        answers: list[PartitionResponse] = []
        topic = ctx.services.controller.topics().get(topic_data.name)
        for data in topic_data.partitions:
            answer = PartitionResponse(index=data.index, error_code=ErrorCode.NONE)
            answers.append(answer)
            partition: Partition | None = None
            try:
                if is_internal_topic(topic_data.name):
                    raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                                     f"Cannot append to internal topic {topic_data.name}")
                if topic is None:
                    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                     f"This server does not host topic-partition {topic_data.name}-{data.index}")
                _check_version(ctx.version)
                _check_owner(topic_data.name, topic, request.link_name)
                partition = replicas.get(topic_data.name, data.index)
                if not partition.is_leader:
                    raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
                has_records = data.records is not None and len(data.records) > 0
                if not has_records and data.log_start_offset < 0:
                    raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "the request carries no record batch")
                isr, min_isr = len(partition.isr), partition.log.config.min_insync_replicas
                if isr < min_isr:
                    raise KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS,
                                     f"ISR has {isr} replicas, min.insync.replicas is {min_isr}")
                if has_records:
                    assert data.records is not None
                    # Checked and appended with no await between: the log end cannot move meanwhile.
                    check_copied_offsets(partition.log, data.records, previous_end=data.previous_end_offset,
                                         source_log_start=data.log_start_offset)
                    result = partition.append_copied(data.records, now_ms=timestamp)
                    if result is not None:
                        await partition.wait_flushed(result)
                if data.log_start_offset >= 0:
                    check_log_start(f"{topic_data.name}-{data.index}", data.log_start_offset,
                                    partition.log.log_end_offset)
                    starts.append((answer, partition, data.log_start_offset))
            except KafkaError as exc:
                answer.error_code, answer.error_message = exc.code, exc.message or None
                if partition is not None and partition.is_leader:
                    _positions(answer, partition)
                continue
            # Wait for the ISR up to the log end, not only to this append's end: after a retried
            # request (every batch skipped) the mirror still learns when its copy is safe.
            required = partition.log.log_end_offset
            if partition.high_watermark < required:
                waits.append((answer, partition, required))
            else:
                _positions(answer, partition)
        topics.append(LinkAppendResponse.LinkAppendTopicResponse(name=topic_data.name, partitions=answers))
    if waits:
        await wait_for_replicas(waits, request.timeout_ms)
    for answer, partition, source_start in starts:
        if answer.error_code == ErrorCode.NONE:
            try:
                _follow_log_start(partition, source_start)
            except KafkaError as exc:
                answer.error_code, answer.error_message = exc.code, exc.message or None
            _positions(answer, partition)
    if waits:
        for answer, partition, required in waits:
            _positions(answer, partition)
            if answer.error_code == ErrorCode.REQUEST_TIMED_OUT:
                answer.error_message = (f"the in-sync replicas did not reach offset {required} within "
                                        f"{request.timeout_ms} ms (high watermark {answer.high_watermark}); "
                                        f"the batches are in the leader's log: send them again")
    return LinkAppendResponse(topics=topics)


HANDLER = ApiHandler(ApiKey.LINK_APPEND, 0, 1, handle)
