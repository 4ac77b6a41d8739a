"""LinkOffsetCommit (Causeway's API key 10002): a link-mode mirror commits a source group's
offsets on its mirror topics, fenced by the promotion.

A link-mode mirror copies each source group's committed offsets to the same group at the target
(mirror/link_groups.py). Once a topic is promoted (``causeway.mirror.name`` deleted: the DR
site's own topic), its group offsets are its consumers' own: a commit of the mirror landing
after that, from a pass that read the source before the promotion, from a mirror process that
is slow, cut off or stale, would move a moved group back or ahead (re-reads, skips). So the
broker where the commit lands refuses it, as LinkAppend refuses a copy into a promoted topic:
each partition is committed only while its topic is the mirror topic of ``LinkName``, else
INVALID_REQUEST saying why (promoted, a normal topic, another mirror's). A paused topic is
still the mirror's: its offsets may be carried.

The check reads this broker's applied topic configs and the commit's record is appended to
``__consumer_offsets`` in the same step of the event loop (no await between them), so either
the promotion was applied here first and the commit is refused, or the record precedes it in
the log: a promotion that waited for every broker to apply it (mirror/promote.py) fences every
mirror commit that reaches the coordinator after it, and its own last copy of the offsets,
written after that, is the later record.

Otherwise the commit is OffsetCommit's from outside the group (generation -1, no member, as the
mirror's OffsetCommit was): taken only while the group has no active members (UNKNOWN_MEMBER_ID
otherwise), OFFSET_METADATA_TOO_LARGE past ``offset.metadata.max.bytes``, UNKNOWN_TOPIC_OR_PARTITION
for a partition the topic lacks, the coordinator's errors (NOT_COORDINATOR, ...) for every
partition. The source's leader epoch is not carried (mirror/link_groups.py says why).

Authorization (Causeway's definition; Kafka has no such API): Read on the group, as OffsetCommit
(else every partition GROUP_AUTHORIZATION_FAILED, nothing committed), and on each topic what
LinkAppend needs (Alter on the topic or ClusterAction on the cluster), else its partitions
TOPIC_AUTHORIZATION_FAILED, checked before anything else about the topic.
"""

from __future__ import annotations

from broker.clock import now_ms
from broker.controller.model import TopicInfo
from broker.coordinator.offsets_records import OffsetCommitValue
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.messages import LinkOffsetCommitRequest, LinkOffsetCommitResponse
from broker.server.context import RequestContext
from broker.server.handlers.base import ApiHandler
from broker.server.handlers.link_append import check_mirror_of, may_link
from broker.server.handlers.offsets import coordinator_of
from security.acl import Operation, ResourceType

__all__ = ["HANDLER"]

Refusal = tuple[ErrorCode, str | None]


def _refused(name: str, index: int, topic: TopicInfo | None, link_name: str) -> Refusal | None:
    """Why this partition's offset is not the mirror's to commit; None when it is."""
    if topic is None or not 0 <= index < len(topic.partitions):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"This server does not host topic-partition {name}-{index}"
    try:
        check_mirror_of(name, topic, link_name)  # a paused one is still the mirror's
    except KafkaError as exc:
        return exc.code, exc.message or None
    return None


async def handle(ctx: RequestContext, request: LinkOffsetCommitRequest) -> LinkOffsetCommitResponse:
    answers: dict[tuple[str, int], Refusal] = {}
    accepted: dict[tuple[str, int], OffsetCommitValue] = {}
    if not ctx.authorize(Operation.READ, ResourceType.GROUP, request.group_id):
        for topic in request.topics:
            for p in topic.partitions:
                answers[(topic.name, p.partition_index)] = (ErrorCode.GROUP_AUTHORIZATION_FAILED, None)
        return _response(request, answers)
    allowed = may_link(ctx, {t.name for t in request.topics})
    topics = ctx.services.controller.topics()  # as applied here: read in the step that appends
    max_metadata = ctx.config.offset_metadata_max_bytes
    now = now_ms()
    for topic in request.topics:
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            metadata = p.committed_metadata or ""
            if topic.name not in allowed:
                answers[tp] = (ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                               f"LinkOffsetCommit on topic {topic.name} needs Alter on the topic or ClusterAction "
                               f"on the cluster")
            elif (refusal := _refused(topic.name, p.partition_index, topics.get(topic.name),
                                      request.link_name)) is not None:
                answers[tp] = refusal
            elif p.committed_offset < 0:
                answers[tp] = (ErrorCode.INVALID_REQUEST, f"offset {p.committed_offset} of {topic.name}-"
                                                          f"{p.partition_index} is negative")
            elif len(metadata.encode()) > max_metadata:
                answers[tp] = (ErrorCode.OFFSET_METADATA_TOO_LARGE, None)
            else:
                accepted[tp] = OffsetCommitValue(p.committed_offset, metadata, now, -1, -1)
                answers[tp] = (ErrorCode.NONE, None)
    try:
        # No await before this call appends the record (GroupCoordinator.commit): the fence above
        # holds for it (the module says why).
        await coordinator_of(ctx).commit(request.group_id, -1, "", None, accepted)
    except KafkaError as exc:
        for tp in accepted:
            answers[tp] = (exc.code, exc.message or None)
    return _response(request, answers)


def _response(request: LinkOffsetCommitRequest, answers: dict[tuple[str, int], Refusal]) -> LinkOffsetCommitResponse:
    partition = LinkOffsetCommitResponse.LinkOffsetCommitPartitionResponse
    return LinkOffsetCommitResponse(topics=[
        LinkOffsetCommitResponse.LinkOffsetCommitTopicResponse(name=topic.name, partitions=[
            partition(partition_index=p.partition_index, error_code=answers[(topic.name, p.partition_index)][0],
                      error_message=answers[(topic.name, p.partition_index)][1])
            for p in topic.partitions])
        for topic in request.topics])


HANDLER = ApiHandler(ApiKey.LINK_OFFSET_COMMIT, 0, 0, handle)
