"""Topic administration: CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords.

With an authorizer, as Kafka 4's controller and KafkaApis (TOPIC_AUTHORIZATION_FAILED for each
topic refused, nothing done for it): CreateTopics needs Create on the cluster or on the topic, and
a created topic's configs (and partition count and replication factor) are answered only with
DescribeConfigs on it (else its config error is TOPIC_AUTHORIZATION_FAILED); DeleteTopics needs
Delete on the cluster or the topic, and a topic named without Describe on it is refused before
anyone learns whether it exists (asked for by id, its name is left out); CreatePartitions needs
Alter on the topic, DeleteRecords Delete on it.
"""

from __future__ import annotations

import uuid

import trio

from broker.config import BrokerConfig
from broker.controller.base import NewTopic
from broker.controller.model import is_internal_topic
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.messages import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from broker.protocol.primitives import ZERO_UUID
from broker.server.context import RequestContext
from broker.server.handlers.base import ApiHandler
from broker.server.topic_configs import describe_topic_configs, refuse_if_mirror, refuse_pause_outside_mirror
from broker.storage.topic_configs import validate_topic_configs
from security.acl import Operation, ResourceType

# CreateTopics: -1 partitions / replication factor means "the broker's default" (KIP-464).
_DEFAULT = -1


def _deadline(timeout_ms: int) -> float:
    """The trio-clock deadline of an admin request: the changes it asks for that are still
    pending then are answered REQUEST_TIMED_OUT (and go on); timeout_ms <= 0 gives one already
    past, so those are answered so right after they are asked for, as Kafka does."""
    return trio.current_time() + timeout_ms / 1000


class _RequestBudget:
    """max.partitions.per.request: the partitions one CreateTopics or CreatePartitions may add,
    counted topic by topic in request order; a topic that would pass it is refused
    (POLICY_VIOLATION) before anything is built for it, so an absurd count costs nothing. (A
    :class:`~broker.controller.base.PartitionBudget`: CreateTopics hands it to the controller.)"""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def take(self, partitions: int) -> None:
        if partitions > self.limit - self.used:
            raise KafkaError(
                ErrorCode.POLICY_VIOLATION,
                f"{partitions} new partitions would exceed max.partitions.per.request={self.limit}"
                + (f" ({self.used} already asked for earlier in this request)" if self.used else "")
                + "; create them in several requests, or raise max.partitions.per.request.",
            )

    def commit(self, partitions: int) -> None:
        self.used += partitions


def _new_topic(topic: CreateTopicsRequest.CreatableTopic, config: BrokerConfig) -> NewTopic:
    """What one topic of a CreateTopics asks for, with the broker's defaults filled in and its
    configs checked. Raises KafkaError (INVALID_REQUEST, INVALID_CONFIG)."""
    assignments: dict[int, list[int]] | None = None
    if topic.assignments:
        if topic.num_partitions != _DEFAULT or topic.replication_factor != _DEFAULT:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             "Both numPartitions or replicationFactor and replicasAssignments were set. "
                             "Both cannot be used at the same time.")
        assignments = {a.partition_index: list(a.broker_ids) for a in topic.assignments}
        partitions, factor = len(assignments), len(topic.assignments[0].broker_ids)
    else:
        partitions = config.num_partitions if topic.num_partitions == _DEFAULT else topic.num_partitions
        factor = config.default_replication_factor if topic.replication_factor == _DEFAULT else topic.replication_factor
    overrides = validate_topic_configs({c.name: c.value for c in topic.configs}, config)
    refuse_pause_outside_mirror(topic.name, overrides)
    return NewTopic(topic.name, partitions, factor, overrides, assignments)


def _may(ctx: RequestContext, operation: Operation, cluster_wide: bool, name: str) -> bool:
    """``operation`` on the topic, or on the cluster for every topic (``cluster_wide``)."""
    return cluster_wide or ctx.authorize(operation, ResourceType.TOPIC, name)


async def create_topics(ctx: RequestContext, request: CreateTopicsRequest) -> CreateTopicsResponse:
    config = ctx.config
    create_any = ctx.authorize_cluster(Operation.CREATE, log_denied=False)
    results = []
    asked: list[tuple[CreateTopicsResponse.CreatableTopicResult, NewTopic]] = []
    seen: set[str] = set()
    for topic in request.topics:
        result = CreateTopicsResponse.CreatableTopicResult(name=topic.name, error_code=ErrorCode.NONE)
        try:
            if topic.name in seen:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"Topic '{topic.name}' appears twice in the request")
            seen.add(topic.name)
            if not _may(ctx, Operation.CREATE, create_any, topic.name):
                raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
            asked.append((result, _new_topic(topic, config)))
        except KafkaError as exc:
            result.error_code = exc.code
            result.error_message = exc.message or None
        results.append(result)
    # All at once, decided in request order (the first topics win a partition limit), made durable
    # together: one metadata write for the request, as Kafka's controller writes it.
    outcomes = await ctx.services.controller.create_topics(
        [new for _, new in asked], validate_only=request.validate_only,
        deadline=_deadline(request.timeout_ms),  # one for the whole request, as Kafka's
        budget=_RequestBudget(config.max_partitions_per_request),
    )
    for (result, new), outcome in zip(asked, outcomes, strict=True):
        if isinstance(outcome, KafkaError):
            result.error_code = outcome.code
            result.error_message = outcome.message or None
            continue
        result.topic_id = outcome.topic_id
        if not ctx.authorize(Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC, new.name, log_denied=False):
            result.topic_config_error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            continue
        result.num_partitions = new.num_partitions
        result.replication_factor = new.replication_factor
        result.configs = [
            CreateTopicsResponse.CreatableTopicConfigs(
                name=name, value=value, read_only=False, config_source=source, is_sensitive=False
            )
            for name, value, source in describe_topic_configs(new.configs, config)
        ]
    return CreateTopicsResponse(topics=results)


async def delete_topics(ctx: RequestContext, request: DeleteTopicsRequest) -> DeleteTopicsResponse:
    controller = ctx.services.controller
    wanted: list[tuple[str | None, uuid.UUID | None]]
    if ctx.version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, None) for name in request.topic_names]
    results = []
    deleting: list[tuple[str, DeleteTopicsResponse.DeletableTopicResult]] = []
    deadline = _deadline(request.timeout_ms)
    delete_any = ctx.authorize_cluster(Operation.DELETE, log_denied=False)
    for name, topic_id in wanted:
        if name is not None:
            topic = controller.topics().get(name)
        else:
            topic = controller.topic_by_id(topic_id) if topic_id is not None else None
        result = DeleteTopicsResponse.DeletableTopicResult(
            name=name if name is not None else (topic.name if topic is not None else None),
            topic_id=topic.topic_id if topic is not None else (topic_id or ZERO_UUID),
            error_code=ErrorCode.NONE,
        )
        try:
            if not ctx.config.delete_topic_enable:
                raise KafkaError(ErrorCode.TOPIC_DELETION_DISABLED, "delete.topic.enable is false")
            if name is not None and not _may(ctx, Operation.DESCRIBE, delete_any, name):
                raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)  # exists or not: not told
            if topic is None:
                code = ErrorCode.UNKNOWN_TOPIC_ID if name is None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                raise KafkaError(code, "This server does not host this topic.")
            if not _may(ctx, Operation.DELETE, delete_any, topic.name):
                if name is None and not _may(ctx, Operation.DESCRIBE, delete_any, topic.name):
                    result.name = None  # asked for by id: the id is not secret, the name is
                raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            if is_internal_topic(topic.name):
                # Deleting __consumer_offsets loses every group's committed offsets. Kafka's tools
                # refuse it with these words; the broker refuses it for every client.
                raise KafkaError(
                    ErrorCode.INVALID_TOPIC_EXCEPTION,
                    f"Topic {topic.name} is a kafka internal topic and is not allowed to be marked for deletion.",
                )
        except KafkaError as exc:
            result.error_code = exc.code
            result.error_message = exc.message or None
        else:
            deleting.append((topic.name, result))
        results.append(result)

    async def delete(name: str, result: DeleteTopicsResponse.DeletableTopicResult) -> None:
        try:
            await controller.delete_topic(name, deadline=deadline)
        except KafkaError as exc:
            result.error_code = exc.code
            result.error_message = exc.message or None

    # Every topic is marked at once and waited for together, up to the request's one deadline
    # (Kafka's DelayedDeleteTopics), so one held-up deletion does not delay the others' marks.
    async with trio.open_nursery() as nursery:
        for name, result in deleting:
            nursery.start_soon(delete, name, result)
    return DeleteTopicsResponse(responses=results)


async def create_partitions(
    ctx: RequestContext, request: CreatePartitionsRequest
) -> CreatePartitionsResponse:
    results = []
    budget = _RequestBudget(ctx.config.max_partitions_per_request)
    deadline = _deadline(request.timeout_ms)
    for topic in request.topics:
        result = CreatePartitionsResponse.CreatePartitionsTopicResult(name=topic.name, error_code=ErrorCode.NONE)
        try:
            if not ctx.authorize(Operation.ALTER, ResourceType.TOPIC, topic.name):
                raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            if is_internal_topic(topic.name):
                # A group's coordinator partition is hash(group) % partition count: more partitions
                # would move every group away from its committed offsets.
                raise KafkaError(
                    ErrorCode.INVALID_TOPIC_EXCEPTION,
                    f"Topic {topic.name} is a kafka internal topic and its partitions cannot be changed.",
                )
            existing = ctx.services.controller.topics().get(topic.name)
            adding = topic.count - len(existing.partitions) if existing is not None else 0
            if adding > 0:
                budget.take(adding)
            await ctx.services.controller.create_partitions(
                topic.name, topic.count, validate_only=request.validate_only,
                assignments=[list(a.broker_ids) for a in topic.assignments] if topic.assignments else None,
                deadline=deadline,
            )
            budget.commit(max(adding, 0))
        except KafkaError as exc:
            result.error_code = exc.code
            result.error_message = exc.message or None
        results.append(result)
    return CreatePartitionsResponse(results=results)


async def delete_records(ctx: RequestContext, request: DeleteRecordsRequest) -> DeleteRecordsResponse:
    topics = []
    for topic in request.topics:
        partitions = []
        deletable = ctx.authorize(Operation.DELETE, ResourceType.TOPIC, topic.name)
        for req in topic.partitions:
            result = DeleteRecordsResponse.DeleteRecordsPartitionResult(
                partition_index=req.partition_index, low_watermark=-1, error_code=ErrorCode.NONE
            )
            try:
                if not deletable:
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                if is_internal_topic(topic.name):
                    raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                                     f"Cannot delete records of internal topic {topic.name}")
                info = ctx.services.controller.topics().get(topic.name)
                if info is not None:
                    refuse_if_mirror(topic.name, info.configs)  # the copy follows the source's log
                partition = ctx.services.replicas.get(topic.name, req.partition_index)
                # -1 means "up to the high watermark" (everything committed).
                offset = partition.high_watermark if req.offset == -1 else req.offset
                if offset < 0 or offset > partition.high_watermark:
                    raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE)
                partition.delete_records_before(offset)
                result.low_watermark = partition.log.log_start_offset
            except KafkaError as exc:
                result.error_code = exc.code
            partitions.append(result)
        topics.append(DeleteRecordsResponse.DeleteRecordsTopicResult(name=topic.name, partitions=partitions))
    return DeleteRecordsResponse(topics=topics)


HANDLERS = (
    ApiHandler(ApiKey.CREATE_TOPICS, 0, 7, create_topics),
    ApiHandler(ApiKey.DELETE_TOPICS, 0, 6, delete_topics),
    ApiHandler(ApiKey.CREATE_PARTITIONS, 0, 3, create_partitions),
    ApiHandler(ApiKey.DELETE_RECORDS, 0, 2, delete_records),
)
