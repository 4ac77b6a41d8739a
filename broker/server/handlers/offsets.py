"""Committed offsets: OffsetCommit, OffsetFetch, OffsetDelete.

With an authorizer, as Kafka's KafkaApis: OffsetCommit needs Read on the group (else every
partition GROUP_AUTHORIZATION_FAILED, nothing committed) and Read on each topic (else its
partitions TOPIC_AUTHORIZATION_FAILED, checked before whether the topic exists); OffsetFetch
Describe on the group (GROUP_AUTHORIZATION_FAILED where the version has room for it) and
Describe on each topic (a fetch of every offset leaves the other topics out; a topic named
gets TOPIC_AUTHORIZATION_FAILED); OffsetDelete Delete on the group and Read on each topic.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from broker.clock import now_ms
from broker.coordinator.coordinator import GroupCoordinator
from broker.coordinator.offsets_records import OffsetCommitValue
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.messages import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from broker.server.context import RequestContext
from broker.server.handlers.base import ApiHandler
from security.acl import Operation, ResourceType

__all__ = ["HANDLERS", "coordinator_of"]

# OffsetCommit v2-v4 carry a retention time; -1 means "the broker's default".
DEFAULT_RETENTION = -1
LONG_MAX = 2**63 - 1

T = TypeVar("T")


def coordinator_of(ctx: RequestContext) -> GroupCoordinator:
    coordinator = ctx.services.groups
    if coordinator is None:
        raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the group coordinator is not running")
    return coordinator


def _may(ctx: RequestContext, operation: Operation, topic_names: set[str]) -> set[str]:
    """The topics of ``topic_names`` the principal may do ``operation`` on (each asked once)."""
    return {name for name in topic_names if ctx.authorize(operation, ResourceType.TOPIC, name)}


async def offset_commit(ctx: RequestContext, request: OffsetCommitRequest) -> OffsetCommitResponse:
    if not ctx.authorize(Operation.READ, ResourceType.GROUP, request.group_id):
        return OffsetCommitResponse(topics=[
            OffsetCommitResponse.OffsetCommitResponseTopic(name=topic.name, partitions=[
                OffsetCommitResponse.OffsetCommitResponsePartition(
                    partition_index=p.partition_index, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
                for p in topic.partitions])
            for topic in request.topics])
    readable = _may(ctx, Operation.READ, {t.name for t in request.topics})
    now = now_ms()
    topics = ctx.services.controller.topics()
    max_metadata = ctx.config.offset_metadata_max_bytes
    errors: dict[tuple[str, int], ErrorCode] = {}
    accepted: dict[tuple[str, int], OffsetCommitValue] = {}
    for topic in request.topics:
        known = topics.get(topic.name)
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            metadata = p.committed_metadata or ""
            if topic.name not in readable:
                errors[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif known is None or not 0 <= p.partition_index < len(known.partitions):
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif len(metadata.encode()) > max_metadata:
                errors[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
            else:
                expire = -1
                if 2 <= ctx.version <= 4 and request.retention_time_ms != DEFAULT_RETENTION:
                    # The peer picks the retention: near 2**63 the sum would not fit the record's
                    # int64 (found by deploy/fuzz), so it saturates: kept as long as can be said.
                    expire = min(now + request.retention_time_ms, LONG_MAX)
                commit_ts = p.commit_timestamp if ctx.version == 1 and p.commit_timestamp >= 0 else now
                accepted[tp] = OffsetCommitValue(p.committed_offset, metadata, commit_ts,
                                                 p.committed_leader_epoch if ctx.version >= 6 else -1, expire)
                errors[tp] = ErrorCode.NONE
    try:
        await coordinator_of(ctx).commit(request.group_id, request.generation_id_or_member_epoch, request.member_id,
                                       request.group_instance_id if ctx.version >= 7 else None, accepted)
    except KafkaError as exc:
        for tp in accepted:
            errors[tp] = exc.code
    return OffsetCommitResponse(topics=[
        OffsetCommitResponse.OffsetCommitResponseTopic(name=topic.name, partitions=[
            OffsetCommitResponse.OffsetCommitResponsePartition(
                partition_index=p.partition_index, error_code=errors[(topic.name, p.partition_index)])
            for p in topic.partitions
        ])
        for topic in request.topics
    ])


Fetched = dict[str, list[tuple[int, OffsetCommitValue | None, ErrorCode]]]


def _fetch_one(ctx: RequestContext, coordinator: GroupCoordinator | None, group_id: str,
               wanted: list[tuple[str, list[int]]] | None, require_stable: bool = False) -> Fetched:
    """One group's committed offsets by topic, as (partition, value, error): every one the
    principal may see when ``wanted`` is None. With ``require_stable`` (KIP-447), a partition
    with a transactional commit not yet decided, or a plain one not yet replicated, is
    UNSTABLE_OFFSET_COMMIT (the client asks again).
    Raises KafkaError for the group: no Describe on it (GROUP_AUTHORIZATION_FAILED), no
    coordinator here."""
    if not ctx.authorize(Operation.DESCRIBE, ResourceType.GROUP, group_id):
        raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed.")
    if coordinator is None:
        raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the group coordinator is not running")
    by_topic: Fetched = {}
    if wanted is None:
        found = coordinator.fetch_offsets(group_id, None)
        visible = _may(ctx, Operation.DESCRIBE, {topic for topic, _ in found})
    else:
        visible = _may(ctx, Operation.DESCRIBE, {topic for topic, _ in wanted})
        for topic, partitions in wanted:
            if topic not in visible:
                by_topic.setdefault(topic, []).extend((p, None, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                                                      for p in partitions)
        found = coordinator.fetch_offsets(group_id, [(t, p) for t, ps in wanted if t in visible for p in ps])
    unstable = coordinator.unstable_offsets(group_id) if require_stable else set()
    for (topic, partition), value in found.items():
        if topic in visible:
            if (topic, partition) in unstable:
                by_topic.setdefault(topic, []).append((partition, None, ErrorCode.UNSTABLE_OFFSET_COMMIT))
            else:
                by_topic.setdefault(topic, []).append((partition, value, ErrorCode.NONE))
    return by_topic


async def offset_fetch(ctx: RequestContext, request: OffsetFetchRequest) -> OffsetFetchResponse:
    """Committed offsets. A group this broker does not coordinate now (NOT_COORDINATOR,
    COORDINATOR_LOAD_IN_PROGRESS) or the principal may not Describe gets the error where the
    version has room for it: per group (v8+), for the whole response (v2-v7), or in every
    partition asked for (v0-v1)."""
    coordinator = ctx.services.groups
    if ctx.version >= 8:
        groups = []
        for g in request.groups:
            wanted = None if g.topics is None else [(t.name, list(t.partition_indexes)) for t in g.topics]
            try:
                by_topic = _fetch_one(ctx, coordinator, g.group_id, wanted, request.require_stable)
            except KafkaError as exc:
                groups.append(OffsetFetchResponse.OffsetFetchResponseGroup(group_id=g.group_id,
                                                                          error_code=exc.code))
                continue
            groups.append(OffsetFetchResponse.OffsetFetchResponseGroup(group_id=g.group_id, topics=_fetched(
                by_topic, OffsetFetchResponse.OffsetFetchResponseTopics,
                OffsetFetchResponse.OffsetFetchResponsePartitions)))
        return OffsetFetchResponse(groups=groups)
    # A null topic list (v2+) asks for every committed offset of the group.
    wanted = None if request.topics is None else [(t.name, list(t.partition_indexes)) for t in request.topics]
    try:
        by_topic = _fetch_one(ctx, coordinator, request.group_id, wanted,
                              ctx.version >= 7 and request.require_stable)
    except KafkaError as exc:
        if ctx.version >= 2:
            return OffsetFetchResponse(error_code=exc.code)
        return OffsetFetchResponse(topics=[
            OffsetFetchResponse.OffsetFetchResponseTopic(name=topic, partitions=[
                OffsetFetchResponse.OffsetFetchResponsePartition(
                    partition_index=p, committed_offset=-1, metadata="", error_code=exc.code)
                for p in partitions
            ])
            for topic, partitions in wanted or []
        ])
    return OffsetFetchResponse(topics=_fetched(by_topic, OffsetFetchResponse.OffsetFetchResponseTopic,
                                               OffsetFetchResponse.OffsetFetchResponsePartition))


def _fetched(by_topic: dict[str, list[tuple[int, OffsetCommitValue | None, ErrorCode]]], topic: Callable[..., T],
             partition: Callable[..., Any]) -> list[T]:
    """The committed offsets as an OffsetFetch answer's topics, by name and partition (-1 and ""
    where none is committed): v8+ (per group) and v0-v7 have classes of their own for them."""
    return [
        topic(name=name, partitions=[
            partition(partition_index=p, committed_offset=v.offset if v else -1,
                      committed_leader_epoch=v.leader_epoch if v else -1, metadata=v.metadata if v else "",
                      error_code=code)
            for p, v, code in sorted(parts, key=_by_partition)
        ])
        for name, parts in sorted(by_topic.items())
    ]


def _by_partition(item: tuple[int, OffsetCommitValue | None, ErrorCode]) -> int:
    return item[0]


async def offset_delete(ctx: RequestContext, request: OffsetDeleteRequest) -> OffsetDeleteResponse:
    if not ctx.authorize(Operation.DELETE, ResourceType.GROUP, request.group_id):
        return OffsetDeleteResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    readable = _may(ctx, Operation.READ, {t.name for t in request.topics})
    wanted = [(t.name, p.partition_index) for t in request.topics if t.name in readable for p in t.partitions]
    try:
        codes = await coordinator_of(ctx).delete_offsets(request.group_id, wanted)
    except KafkaError as exc:
        return OffsetDeleteResponse(error_code=exc.code)
    return OffsetDeleteResponse(topics=[
        OffsetDeleteResponse.OffsetDeleteResponseTopic(name=t.name, partitions=[
            OffsetDeleteResponse.OffsetDeleteResponsePartition(
                partition_index=p.partition_index,
                error_code=codes[(t.name, p.partition_index)] if t.name in readable
                else ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            for p in t.partitions
        ])
        for t in request.topics
    ])


HANDLERS = (
    # v9 of both is the first that KIP-848 consumer groups may use. For a classic group Kafka
    # treats it as v8: OffsetCommit v9 has v8's fields (the generation in the epoch field) and
    # OffsetFetch v9 adds a member id and epoch that classic groups do not check. v10 (topic
    # ids) is not in our schemas.
    ApiHandler(ApiKey.OFFSET_COMMIT, 0, 9, offset_commit),
    ApiHandler(ApiKey.OFFSET_FETCH, 0, 9, offset_fetch),
    ApiHandler(ApiKey.OFFSET_DELETE, 0, 0, offset_delete),
)
