"""LinkLeaderEpoch (Causeway's API key 10003): a link-mode mirror keeps its mirror topics' leader
epochs at or above the source's (KIP-1279's invariant).

A client that saw the source partition's leader epoch (its metadata, an offset it committed
there with that epoch) takes metadata with a lower epoch for stale: it asks again and again and
never uses the target (librdkafka and the Java client both ignore an older epoch). So the mirror
tells the target's controller each source partition's leader epoch as it last saw it, and the
controller raises the partition's epoch to ``max(current + 1, source)`` when it is below, through
the normal leader-epoch change (broker/controller/zk/leader_epochs.py; standalone: a
PartitionChangeRecord): the leader starts the new epoch at its log end, followers follow, the
leader-epoch cache records it at the next append. Never lowered; an epoch at or above the
source's is left alone.

Sent to the controller, as ElectLeaders: a ZooKeeper-mode broker that is not the controller
answers NOT_CONTROLLER for each partition. Per partition: the topic must be a mirror topic owned
by ``LinkName`` and not paused (INVALID_REQUEST saying why, as LinkAppend); a source epoch that
is negative or above ``MAX_SOURCE_LEADER_EPOCH`` is refused, INVALID_REQUEST, and logged: a
value near int32's end would leave no room for the target's own later elections, and no real
source gets there. Authorized as LinkAppend (Alter on the topic or ClusterAction on the cluster).
"""

from __future__ import annotations

import logging

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.messages import LinkLeaderEpochRequest, LinkLeaderEpochResponse
from broker.server.context import RequestContext
from broker.server.handlers.base import ApiHandler
from broker.server.handlers.link_append import check_owner, may_link

__all__ = ["HANDLER", "MAX_SOURCE_LEADER_EPOCH"]

log = logging.getLogger(__name__)

#: The highest source leader epoch taken: 2**30 leaves a billion of the target's own elections
#: before int32's end (Kafka's leader epochs are int32), far beyond any real cluster's epochs.
MAX_SOURCE_LEADER_EPOCH = 2**30

PartitionResponse = LinkLeaderEpochResponse.LinkLeaderEpochPartitionResponse
Result = tuple[ErrorCode, "str | None", int]


def _refusal(ctx: RequestContext, request: LinkLeaderEpochRequest, name: str, index: int, epoch: int
             ) -> Result | None:
    """Why this partition is not raised (before the controller looks), or None."""
    topic = ctx.services.controller.topics().get(name)
    if topic is None or not 0 <= index < len(topic.partitions):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"This server does not host topic-partition {name}-{index}", -1
    try:
        check_owner(name, topic, request.link_name)
    except KafkaError as exc:
        return exc.code, exc.message or None, -1
    if not 0 <= epoch <= MAX_SOURCE_LEADER_EPOCH:
        log.warning("mirror %s asked to raise the leader epoch of %s-%d to %d: refused (0..%d)", request.link_name,
                    name, index, epoch, MAX_SOURCE_LEADER_EPOCH)
        return (ErrorCode.INVALID_REQUEST, f"source leader epoch {epoch} of {name}-{index} is outside "
                                           f"0..{MAX_SOURCE_LEADER_EPOCH}", -1)
    return None


async def handle(ctx: RequestContext, request: LinkLeaderEpochRequest) -> LinkLeaderEpochResponse:
    allowed = may_link(ctx, {t.name for t in request.topics})
    results: dict[tuple[str, int], Result] = {}
    wanted: dict[tuple[str, int], int] = {}
    for topic in request.topics:
        for p in topic.partitions:
            key = (topic.name, p.index)
            if topic.name not in allowed:
                results[key] = (ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                f"LinkLeaderEpoch of topic {topic.name} needs Alter on the topic or ClusterAction on "
                                f"the cluster", -1)
                continue
            refused = _refusal(ctx, request, topic.name, p.index, p.source_leader_epoch)
            if refused is not None:
                results[key] = refused
            else:
                wanted[key] = max(wanted.get(key, -1), p.source_leader_epoch)
    if wanted:
        results.update(await ctx.services.controller.raise_leader_epochs(wanted))
    return LinkLeaderEpochResponse(topics=[
        LinkLeaderEpochResponse.LinkLeaderEpochTopicResponse(name=topic.name, partitions=[
            PartitionResponse(index=p.index, error_code=results[(topic.name, p.index)][0],
                              error_message=results[(topic.name, p.index)][1],
                              leader_epoch=results[(topic.name, p.index)][2])
            for p in topic.partitions])
        for topic in request.topics])


HANDLER = ApiHandler(ApiKey.LINK_LEADER_EPOCH, 0, 0, handle)
