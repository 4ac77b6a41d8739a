"""Metadata: brokers, controller, topics and partition leaders; creates topics on demand."""

from __future__ import annotations

import logging

from broker.controller.base import NewTopic
from broker.controller.model import TopicInfo, validate_topic_name
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, ProtocolError
from broker.protocol.messages import MetadataRequest, MetadataResponse
from broker.server.context import RequestContext
from broker.server.handlers.base import ApiHandler

log = logging.getLogger(__name__)

Topic = MetadataResponse.MetadataResponseTopic
PartitionMeta = MetadataResponse.MetadataResponsePartition
# Authorized operations are not computed yet; Kafka's "not requested" value.
_NO_OPERATIONS = -2147483648


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


async def auto_create_all(ctx: RequestContext, names: list[str]) -> dict[str, TopicInfo | ErrorCode]:
    """Create each of ``names`` with the broker's defaults, as auto.create.topics.enable does.

    One call to the controller for them all: it decides them in request order, each seeing the
    ones before it (of two names that fold to the same metric name ('.' and '_'), the first wins;
    when the request would pass max.broker.partitions, its first topics are created and the later
    ones refused), and writes their metadata in one batch, so a request naming 100 new topics costs
    one fsync, not 100 in a row."""
    config = ctx.config
    results: dict[str, TopicInfo | ErrorCode] = {}
    wanted: list[NewTopic] = []
    for name in dict.fromkeys(names):
        if validate_topic_name(name) is not None:
            results[name] = ErrorCode.INVALID_TOPIC_EXCEPTION
        else:
            wanted.append(NewTopic(name, config.num_partitions, config.default_replication_factor))
    outcomes = await ctx.services.controller.create_topics(wanted)
    for new, outcome in zip(wanted, outcomes, strict=True):
        if isinstance(outcome, TopicInfo):
            log.info("auto-created topic %s with %d partitions", new.name, new.num_partitions)
            results[new.name] = outcome
        elif outcome.code == ErrorCode.TOPIC_ALREADY_EXISTS:  # a concurrent request created it
            existing = ctx.services.controller.topics().get(new.name)
            results[new.name] = existing if existing is not None else ErrorCode.LEADER_NOT_AVAILABLE
        else:
            results[new.name] = outcome.code
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
