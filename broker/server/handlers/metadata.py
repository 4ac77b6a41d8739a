"""Metadata: brokers, controller, topics and partition leaders; creates topics on demand."""

from __future__ import annotations

import logging

import trio

from broker.controller.model import TopicInfo, validate_topic_name
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, KafkaError, ProtocolError
from broker.protocol.messages import MetadataRequest, MetadataResponse
from broker.server.context import RequestContext
from broker.server.handlers.base import ApiHandler

log = logging.getLogger(__name__)

Topic = MetadataResponse.MetadataResponseTopic
PartitionMeta = MetadataResponse.MetadataResponsePartition
# Authorized operations are not computed yet; Kafka's "not requested" value.
_NO_OPERATIONS = -2147483648
# Topics of one request auto-created at once: their metadata changes share one write and fsync.
# A bound on the tasks a request can start, far above what the partition limits let through.
_AUTO_CREATE_AT_ONCE = 1000


def topic_response(ctx: RequestContext, topic: TopicInfo) -> Topic:
    """The topic as the controller knows it. A partition this broker leads whose log is still
    being created (creation runs in a worker thread) is answered LEADER_NOT_AVAILABLE with no
    leader, as Kafka answers before a new leader is ready: clients wait and ask again, instead of
    sending requests that would find no partition."""
    me = ctx.config.broker_id
    replicas = ctx.services.replicas
    partitions = []
    for p in topic.partitions:
        ready = p.leader != me or replicas.hosts(topic.name, p.partition)
        partitions.append(
            PartitionMeta(
                error_code=ErrorCode.NONE if ready else ErrorCode.LEADER_NOT_AVAILABLE,
                partition_index=p.partition,
                leader_id=p.leader if ready else -1,
                leader_epoch=p.leader_epoch,
                replica_nodes=list(p.replicas),
                isr_nodes=list(p.isr),
                offline_replicas=[],
            )
        )
    return Topic(
        error_code=ErrorCode.NONE,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=topic.is_internal,
        partitions=partitions,
        topic_authorized_operations=_NO_OPERATIONS,
    )


async def auto_create(ctx: RequestContext, name: str) -> TopicInfo | ErrorCode:
    """Create ``name`` with the broker's defaults, as auto.create.topics.enable does."""
    problem = validate_topic_name(name)
    if problem is not None:
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    config = ctx.config
    try:
        topic = await ctx.services.controller.create_topic(
            name, config.num_partitions, config.default_replication_factor, {}
        )
    except KafkaError as exc:
        if exc.code == ErrorCode.TOPIC_ALREADY_EXISTS:
            existing = ctx.services.controller.topics().get(name)
            return existing if existing is not None else ErrorCode.LEADER_NOT_AVAILABLE
        return exc.code
    log.info("auto-created topic %s with %d partitions", name, config.num_partitions)
    return topic


async def auto_create_all(ctx: RequestContext, names: list[str]) -> dict[str, TopicInfo | ErrorCode]:
    """``auto_create`` for each name, concurrently (in groups of ``_AUTO_CREATE_AT_ONCE``): the
    controller writes the metadata of changes made together in one batch, so a request naming
    100 new topics costs one fsync, not 100 in a row. A name that folds to an earlier one's
    ('.' and '_' are the same in metric names) waits for it, so the first in the request wins,
    as it does one at a time. (Which topics fit under max.broker.partitions, when the request
    would pass it, is decided in no particular order.)"""
    results: dict[str, TopicInfo | ErrorCode] = {}

    async def create(name: str) -> None:
        results[name] = await auto_create(ctx, name)

    first: dict[str, str] = {}
    later: list[str] = []
    for name in dict.fromkeys(names):
        folded = name.replace(".", "_")
        if folded in first:
            later.append(name)
        else:
            first[folded] = name
    together = list(first.values())
    for start in range(0, len(together), _AUTO_CREATE_AT_ONCE):
        async with trio.open_nursery() as nursery:
            for name in together[start:start + _AUTO_CREATE_AT_ONCE]:
                nursery.start_soon(create, name)
    for name in later:
        await create(name)
    return results


async def handle(ctx: RequestContext, request: MetadataRequest) -> MetadataResponse:
    controller = ctx.services.controller
    version = ctx.version
    known = controller.topics()
    topics: list[Topic] = []
    # v0: an empty list means all topics; v1+: null means all, empty means none.
    if request.topics is None or (version == 0 and not request.topics):
        topics = [topic_response(ctx, t) for t in sorted(known.values(), key=lambda t: t.name)]
    else:
        allow_auto = ctx.config.auto_create_topics_enable and (
            version < 4 or request.allow_auto_topic_creation
        )
        if version < 12 and any(wanted.name is None for wanted in request.topics):
            # v10-11 carry topic ids but cannot answer by id: a topic's name may not be null
            # in their response, so Kafka refuses the request (found by deploy/fuzz).
            raise ProtocolError(f"topic name is null in Metadata v{version}; lookup by topic id needs v12")
        created: dict[str, TopicInfo | ErrorCode] = {}
        if allow_auto:
            created = await auto_create_all(ctx, [w.name for w in request.topics
                                                  if w.name is not None and w.name not in known])
        for wanted in request.topics:
            if wanted.name is None:
                found = controller.topic_by_id(wanted.topic_id)
                if found is None:
                    topics.append(
                        Topic(error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=wanted.topic_id)
                    )
                else:
                    topics.append(topic_response(ctx, found))
                continue
            topic = known.get(wanted.name)
            outcome = created.get(wanted.name)
            if topic is not None:
                topics.append(topic_response(ctx, topic))
            elif isinstance(outcome, TopicInfo):
                topics.append(topic_response(ctx, outcome))
            elif outcome is not None:
                topics.append(Topic(error_code=outcome, name=wanted.name))
            else:
                topics.append(Topic(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=wanted.name))
    brokers = []
    for broker in controller.brokers():
        endpoint = broker.endpoint(ctx.connection.listener_name)
        if endpoint is None:
            continue  # not reachable on this listener; Kafka leaves such brokers out
        brokers.append(
            MetadataResponse.MetadataResponseBroker(
                node_id=broker.broker_id, host=endpoint.host, port=endpoint.port, rack=broker.rack
            )
        )
    return MetadataResponse(
        brokers=brokers,
        cluster_id=controller.cluster_id,
        controller_id=controller.controller_id,
        topics=topics,
        cluster_authorized_operations=_NO_OPERATIONS,
    )


HANDLER = ApiHandler(ApiKey.METADATA, 0, 12, handle)
