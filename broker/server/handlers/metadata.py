"""Metadata: brokers, controller, topics and partition leaders; creates topics on demand.

With an authorizer, as Kafka's KafkaApis: a topic is answered only to a principal with Describe
on it. A request for all topics leaves the others out; a topic named (or asked for by id) and not
describable is answered TOPIC_AUTHORIZATION_FAILED without its id (by id: without its name),
whether it exists or not, and is never created. Creating a missing topic
(``auto.create.topics.enable``) also needs Create on the cluster or on the topic, else
TOPIC_AUTHORIZATION_FAILED. The authorized-operations fields are filled when asked for (v8+; the
cluster's only in v8-10, and 0 without Describe on the cluster).
"""

from __future__ import annotations

import logging

from broker.controller.base import NewTopic
from broker.controller.model import TopicInfo, is_internal_topic, validate_topic_name
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, ProtocolError
from broker.protocol.messages import MetadataRequest, MetadataResponse
from broker.server.context import RequestContext
from broker.server.handlers.base import ApiHandler
from security.acl import CLUSTER_NAME, Operation, ResourceType
from security.authorizer import OPERATIONS_NOT_REQUESTED

log = logging.getLogger(__name__)

Topic = MetadataResponse.MetadataResponseTopic
PartitionMeta = MetadataResponse.MetadataResponsePartition


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
    answered: list[Topic] = []  # the topics answered under a describable name: they get their operations

    def describable(name: str, *, log_denied: bool = True) -> bool:
        return ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, name, log_denied=log_denied)

    # v0: an empty list means all topics; v1+: null means all, empty means none.
    if request.topics is None or (version == 0 and not request.topics):
        # Every topic: those not describable are left out, silently (as Kafka, no denial logged).
        topics = answered = [topic_response(ctx, t) for t in sorted(known.values(), key=lambda t: t.name)
                             if describable(t.name, log_denied=False)]
    else:
        allow_auto = ctx.config.auto_create_topics_enable and (
            version < 4 or request.allow_auto_topic_creation
        )
        if version < 12 and any(wanted.name is None for wanted in request.topics):
            # v10-11 carry topic ids but cannot answer by id: a topic's name may not be null
            # in their response, so Kafka refuses the request (found by deploy/fuzz).
            raise ProtocolError(f"topic name is null in Metadata v{version}; lookup by topic id needs v12")
        # Describe decides first: whether a topic not describable exists is not disclosed.
        allowed = {name: describable(name) for name in dict.fromkeys(w.name for w in request.topics
                                                                       if w.name is not None)}
        created: dict[str, TopicInfo | ErrorCode] = {}
        if allow_auto:
            missing = [name for name, ok in allowed.items() if ok and name not in known]
            if missing and not ctx.authorize_cluster(Operation.CREATE, log_denied=False):
                created = {name: ErrorCode.TOPIC_AUTHORIZATION_FAILED for name in missing
                           if not ctx.authorize(Operation.CREATE, ResourceType.TOPIC, name)}
                missing = [name for name in missing if name not in created]
            created.update(await auto_create_all(ctx, missing))
        for wanted in request.topics:
            if wanted.name is None:
                found = controller.topic_by_id(wanted.topic_id)
                if found is None:
                    topics.append(
                        Topic(error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=wanted.topic_id)
                    )
                elif not describable(found.name):
                    # A topic id is not secret; its name is.
                    topics.append(Topic(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=None,
                                        topic_id=wanted.topic_id))
                else:
                    topics.append(topic_response(ctx, found))
                    answered.append(topics[-1])
                continue
            if not allowed[wanted.name]:
                topics.append(Topic(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=wanted.name))
                continue
            topic = known.get(wanted.name)
            outcome = created.get(wanted.name)
            if topic is not None:
                topics.append(topic_response(ctx, topic))
            elif isinstance(outcome, TopicInfo):
                topics.append(topic_response(ctx, outcome))
            elif outcome == ErrorCode.TOPIC_AUTHORIZATION_FAILED:  # not creatable: no operations
                topics.append(Topic(error_code=outcome, name=wanted.name, is_internal=is_internal_topic(wanted.name)))
                continue
            elif outcome is not None:
                topics.append(Topic(error_code=outcome, name=wanted.name))
            else:
                topics.append(Topic(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=wanted.name))
            answered.append(topics[-1])
    if version >= 8 and request.include_topic_authorized_operations:
        for entry in answered:
            assert entry.name is not None
            entry.topic_authorized_operations = ctx.authorized_operations(True, ResourceType.TOPIC, entry.name)
    cluster_operations = OPERATIONS_NOT_REQUESTED
    if 8 <= version <= 10 and request.include_cluster_authorized_operations:
        cluster_operations = (ctx.authorized_operations(True, ResourceType.CLUSTER, CLUSTER_NAME)
                              if ctx.authorize_cluster(Operation.DESCRIBE) else 0)
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
        cluster_authorized_operations=cluster_operations,
    )


HANDLER = ApiHandler(ApiKey.METADATA, 0, 12, handle)
