"""LinkAppend (Causeway's API key 10000): a link-mode mirror appends the source's record batches
to a mirror topic, as they are.

Per partition, on its leader: the topic must be a mirror topic (``causeway.mirror.name`` set)
owned by the request's ``LinkName`` and not paused (``causeway.mirror.state``), else
INVALID_REQUEST saying why (a promoted topic, another mirror's, a normal topic, a paused one).
The batches keep their offsets, timestamps and producer fields and are
stamped with this leader's epoch (``Partition.append_copied``): already-present batches are
skipped once seen to be the very batches held, a gap allowed only where the source has one, a
batch that would skip ahead of the log end, straddle it or differ from the one held refused
(OFFSET_OUT_OF_RANGE; broker/storage/link_offsets.py). They go through the broker's one append
path (broker/replication/append.py, as a link's: ``AppendOrigin.LINK``), which answers as
Produce's acks=all does: NOT_ENOUGH_REPLICAS before appending when the ISR is below
``min.insync.replicas``; the high watermark reaching the new log end within ``TimeoutMs``, else
REQUEST_TIMED_OUT. The checks that only a link has stay here: the topic's owner and the
request's version (this module), where the batches may go (the append path's link step). Each
partition answers its log end, high watermark and log start offset, so the mirror knows where
the copy stands even after a refusal.

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

Authorization (Causeway's definition; Kafka has no such API): with an authorizer, a principal may
append to a topic, and move its log start, when it has Alter on the topic or ClusterAction on the
cluster. Not Write: a producer granted Write on a topic must not be able to forge its copy (nor
delete its records, which LogStartOffset does); a link is replication between clusters, which is
what ClusterAction grants a broker within one. A partition of a topic the principal may not
Alter is answered TOPIC_AUTHORIZATION_FAILED, with no positions, before anything else is checked
(whether the topic exists, is a mirror topic, is this mirror's), and nothing changes.
"""

from __future__ import annotations

from functools import partial

from broker.controller.model import TopicInfo
from broker.protocol.api import ApiKey
from broker.protocol.constants import MIRROR_NAME_CONFIG, MIRROR_PAUSED, MIRROR_STATE_CONFIG
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.messages import LinkAppendRequest, LinkAppendResponse
from broker.replication.append import AppendEntry, AppendOrigin, CopiedBatches, LeaderAppend, append_records
from broker.replication.partition import Partition
from broker.server import request_metrics
from broker.server.context import RequestContext
from broker.server.handlers.base import ApiHandler
from broker.server.topic_configs import mirror_name, mirror_paused
from security.acl import Operation, ResourceType

__all__ = ["HANDLER", "check_mirror_of", "check_owner", "may_link"]

PartitionResponse = LinkAppendResponse.LinkAppendPartitionResponse


def check_mirror_of(name: str, topic: TopicInfo, link_name: str) -> None:
    """Raises INVALID_REQUEST, saying why, unless `topic` is mirror `link_name`'s mirror topic
    (never one, promoted, or another mirror's)."""
    owner = mirror_name(topic.configs)
    if owner is None:
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         f"topic {name} is not a mirror topic (never one, or promoted), {MIRROR_NAME_CONFIG} is not "
                         f"set: mirror {link_name} may not write to it")
    if owner != link_name:
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         f"topic {name} is the mirror topic of mirror {owner}, not of mirror {link_name}")


def check_owner(name: str, topic: TopicInfo, link_name: str) -> None:
    """`check_mirror_of`, and INVALID_REQUEST for a paused mirror topic too."""
    check_mirror_of(name, topic, link_name)
    if mirror_paused(topic.configs):
        # Checked here, on the leader, so a pause holds whatever the mirror process knows: a
        # mirror that has not yet noticed it (or an older one) copies nothing more.
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         f"mirror topic {name} is paused ({MIRROR_STATE_CONFIG}={MIRROR_PAUSED}): mirror {link_name} "
                         f"copies nothing into it until it is resumed (causeway mirror resume)")


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


def _check_topic(version: int, name: str, index: int, topic: TopicInfo | None, link_name: str) -> None:
    if topic is None:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                         f"This server does not host topic-partition {name}-{index}")
    _check_version(version)
    check_owner(name, topic, link_name)


def _answer(appended: LeaderAppend, source_start: int, timeout_ms: int) -> PartitionResponse:
    answer = PartitionResponse(index=appended.index, error_code=appended.error_code)
    partition = appended.partition
    if appended.refused is not None:
        answer.error_message = appended.refused.message or None
        if partition is not None and partition.is_leader:
            _positions(answer, partition)
        return answer
    assert partition is not None  # found, as it was not refused
    if answer.error_code == ErrorCode.NONE and source_start >= 0:
        # Once the in-sync replicas hold the copy: the log start never passes the high watermark.
        try:
            _follow_log_start(partition, source_start)
        except KafkaError as exc:
            answer.error_code, answer.error_message = exc.code, exc.message or None
    _positions(answer, partition)
    if answer.error_code == ErrorCode.REQUEST_TIMED_OUT:
        answer.error_message = (f"the in-sync replicas did not reach offset {appended.required_offset} within "
                                f"{timeout_ms} ms (high watermark {answer.high_watermark}); "
                                f"the batches are in the leader's log: send them again")
    return answer


def may_link(ctx: RequestContext, names: set[str]) -> set[str]:
    """The topics of ``names`` the principal may LinkAppend to (or LinkTruncate): Alter on the topic, or
    ClusterAction on the cluster (that check only widens, so its denial is not logged)."""
    if ctx.authorize_cluster(Operation.CLUSTER_ACTION, log_denied=False):
        return names
    return {name for name in names if ctx.authorize(Operation.ALTER, ResourceType.TOPIC, name)}


def _denied(name: str, index: int) -> PartitionResponse:
    return PartitionResponse(index=index, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                             error_message=f"LinkAppend to topic {name} needs Alter on the topic or ClusterAction "
                                           f"on the cluster")


async def handle(ctx: RequestContext, request: LinkAppendRequest) -> LinkAppendResponse:
    topics = ctx.services.controller.topics()
    allowed = may_link(ctx, {t.name for t in request.topics})
    entries = [AppendEntry(topic_data.name, data.index,
                           CopiedBatches(data.records, data.previous_end_offset, data.log_start_offset),
                           check=partial(_check_topic, ctx.version, topic_data.name, data.index,
                                         topics.get(topic_data.name), request.link_name))
               for topic_data in request.topics if topic_data.name in allowed for data in topic_data.partitions]
    appended = await append_records(ctx.services.replicas, entries, origin=AppendOrigin.LINK, required_acks=-1,
                                    timeout_ms=request.timeout_ms)
    request_metrics.count_appended(entries, appended)
    appends = iter(appended)
    return LinkAppendResponse(topics=[
        LinkAppendResponse.LinkAppendTopicResponse(
            name=topic_data.name,
            partitions=[_answer(next(appends), data.log_start_offset, request.timeout_ms)
                        if topic_data.name in allowed else _denied(topic_data.name, data.index)
                        for data in topic_data.partitions])
        for topic_data in request.topics
    ])


HANDLER = ApiHandler(ApiKey.LINK_APPEND, 0, 1, handle)
