"""The controller's requests to brokers, and the brokers' requests to the controller.

To every broker (from the elected controller): LeaderAndIsr (become leader or follower, through
the replica manager), UpdateMetadata (the metadata cache that answers clients), StopReplica
(stop and possibly delete a replica). To the controller (from brokers): ControlledShutdown and
AlterPartition (KIP-497 ISR changes).

Each request from a controller is checked before it changes anything: the controller id and
epoch must be ZooKeeper's current ones (STALE_CONTROLLER_EPOCH otherwise: a deposed controller,
or a client playing controller) and the broker epoch must be this broker's registration
(STALE_BROKER_EPOCH: a request meant for an earlier life of this broker). A standalone broker has
no controller but itself and refuses them all the same way. Malformed requests never get here:
the dispatcher closes the connection on what it cannot decode.

With an authorizer, each needs ClusterAction on the cluster, as Kafka's KafkaApis checks it before
anything else: CLUSTER_AUTHORIZATION_FAILED (the top-level error, and each partition's where the
response has them, as Kafka's error responses) and nothing changes. Brokers log in as a principal
in ``super.users`` or one granted ClusterAction.

Only versions that carry broker epochs and topic ids are served (Kafka's inter-broker protocol
2.8+): LeaderAndIsr 5-7, UpdateMetadata 7-8, StopReplica 3-4, ControlledShutdown 2-3,
AlterPartition 2-3.
"""

from __future__ import annotations

import logging

from broker.controller.base import ActiveController
from broker.controller.model import PartitionInfo
from broker.log_limits import limiter
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.messages import (
    AlterPartitionRequest,
    AlterPartitionResponse,
    ControlledShutdownRequest,
    ControlledShutdownResponse,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)
from broker.server.context import RequestContext
from broker.server.handlers.base import ApiHandler
from security.acl import Operation

__all__ = ["HANDLERS"]

log = logging.getLogger(__name__)
# Anyone who can reach a listener can send these: each refusal is one line per window, then counted.
_limited = limiter(log)


def _cluster_action(ctx: RequestContext) -> bool:
    """May the principal send the brokers' requests (ClusterAction on the cluster)? A denial
    is logged by the authorizer's logger."""
    return ctx.authorize_cluster(Operation.CLUSTER_ACTION)


def _to_controller(ctx: RequestContext) -> ActiveController | ErrorCode:
    """The controller term a request sent to the controller is for; the error to answer when
    the principal may not send it (CLUSTER_AUTHORIZATION_FAILED) or this broker is not the
    ZooKeeper controller (NOT_CONTROLLER)."""
    if not _cluster_action(ctx):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    zk = ctx.services.controller.zookeeper()
    active = zk.active_controller() if zk is not None else None
    return ErrorCode.NOT_CONTROLLER if active is None else active


async def _check_controller(ctx: RequestContext, controller_id: int, controller_epoch: int, broker_epoch: int,
                            is_kraft: bool) -> ErrorCode:
    """NONE when the request comes from ZooKeeper's current controller to this broker's current
    registration; the error to answer otherwise."""
    zk = ctx.services.controller.zookeeper()
    if zk is None or is_kraft:
        _limited.warning("controller request refused", "refused a controller request (controller %d, epoch %d) "
                         "from %s: this broker has no ZooKeeper controller", controller_id, controller_epoch,
                         ctx.connection.peer)
        return ErrorCode.STALE_CONTROLLER_EPOCH
    code = await zk.check_controller(controller_id, controller_epoch, broker_epoch)
    if code != ErrorCode.NONE:
        _limited.warning("controller request refused", "refused a controller request from %s: controller %d, "
                         "epoch %d, broker epoch %d (%s)", ctx.connection.peer, controller_id, controller_epoch,
                         broker_epoch, code.name)
    return code


# -- LeaderAndIsr ------------------------------------------------------------------------------


def _leader_and_isr_answer(request: LeaderAndIsrRequest, code: ErrorCode,
                           per_partition: dict[tuple[str, int], ErrorCode] | None = None) -> LeaderAndIsrResponse:
    topics = []
    for topic in request.topic_states:
        errors = [
            LeaderAndIsrResponse.LeaderAndIsrPartitionError(
                topic_name=topic.topic_name, partition_index=p.partition_index,
                error_code=int((per_partition or {}).get((topic.topic_name, p.partition_index), code)))
            for p in topic.partition_states
        ]
        topics.append(LeaderAndIsrResponse.LeaderAndIsrTopicError(topic_id=topic.topic_id, partition_errors=errors))
    return LeaderAndIsrResponse(error_code=int(code) if per_partition is None else 0, topics=topics)


async def leader_and_isr(ctx: RequestContext, request: LeaderAndIsrRequest) -> LeaderAndIsrResponse:
    if not _cluster_action(ctx):
        return _leader_and_isr_answer(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    code = await _check_controller(ctx, request.controller_id, request.controller_epoch, request.broker_epoch,
                                   request.is_k_raft_controller)
    if code != ErrorCode.NONE:
        return _leader_and_isr_answer(request, code)
    zk = ctx.services.controller.zookeeper()
    assert zk is not None
    states = []
    for topic in request.topic_states:
        for p in topic.partition_states:
            info = PartitionInfo(partition=p.partition_index, leader=p.leader, leader_epoch=p.leader_epoch,
                                 replicas=tuple(p.replicas), isr=tuple(p.isr), partition_epoch=p.partition_epoch)
            states.append((topic.topic_name, topic.topic_id, info, p.is_new))
    brokers = zk.brokers_for_leader_and_isr(request.live_leaders)
    await zk.before_leader_and_isr(states)
    results = await ctx.services.replicas.apply_leader_and_isr(
        request.controller_id, request.controller_epoch, states, brokers)
    return _leader_and_isr_answer(request, ErrorCode.NONE, {k: ErrorCode(v) for k, v in results.items()})


# -- UpdateMetadata ----------------------------------------------------------------------------


async def update_metadata(ctx: RequestContext, request: UpdateMetadataRequest) -> UpdateMetadataResponse:
    if not _cluster_action(ctx):
        return UpdateMetadataResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    code = await _check_controller(ctx, request.controller_id, request.controller_epoch, request.broker_epoch,
                                   request.is_k_raft_controller)
    if code != ErrorCode.NONE:
        return UpdateMetadataResponse(error_code=int(code))
    zk = ctx.services.controller.zookeeper()
    assert zk is not None
    await zk.apply_update_metadata(request)
    return UpdateMetadataResponse(error_code=0)


# -- StopReplica -------------------------------------------------------------------------------


async def stop_replica(ctx: RequestContext, request: StopReplicaRequest) -> StopReplicaResponse:
    if not _cluster_action(ctx):
        # Kafka's error answer names each partition with the error.
        denied = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return StopReplicaResponse(error_code=denied, partition_errors=[
            StopReplicaResponse.StopReplicaPartitionError(topic_name=topic.topic_name,
                                                          partition_index=p.partition_index, error_code=denied)
            for topic in request.topic_states for p in topic.partition_states])
    code = await _check_controller(ctx, request.controller_id, request.controller_epoch, request.broker_epoch,
                                   request.is_k_raft_controller)
    errors = []
    for topic in request.topic_states:
        for p in topic.partition_states:
            if code == ErrorCode.NONE:
                result = await ctx.services.replicas.stop_replica(topic.topic_name, p.partition_index,
                                                                  delete=p.delete_partition)
            else:
                result = code
            errors.append(StopReplicaResponse.StopReplicaPartitionError(
                topic_name=topic.topic_name, partition_index=p.partition_index, error_code=int(result)))
    return StopReplicaResponse(error_code=int(code), partition_errors=errors if code == ErrorCode.NONE else [])


# -- ControlledShutdown (to the controller) -----------------------------------------------------


async def controlled_shutdown(ctx: RequestContext, request: ControlledShutdownRequest) -> ControlledShutdownResponse:
    active = _to_controller(ctx)
    if isinstance(active, ErrorCode):
        return ControlledShutdownResponse(error_code=active)
    try:
        remaining = await active.controlled_shutdown(request.broker_id, request.broker_epoch)
    except KafkaError as exc:
        return ControlledShutdownResponse(error_code=int(exc.code))
    return ControlledShutdownResponse(
        error_code=0,
        remaining_partitions=[ControlledShutdownResponse.RemainingPartition(topic_name=t, partition_index=p)
                              for t, p in remaining])


# -- AlterPartition (to the controller) ---------------------------------------------------------


async def alter_partition(ctx: RequestContext, request: AlterPartitionRequest) -> AlterPartitionResponse:
    active = _to_controller(ctx)
    if isinstance(active, ErrorCode):
        return AlterPartitionResponse(error_code=active)
    if not await active.broker_epoch_is_current(request.broker_id, request.broker_epoch):
        return AlterPartitionResponse(error_code=ErrorCode.STALE_BROKER_EPOCH)
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            new_isr = [b.broker_id for b in p.new_isr_with_epochs] if ctx.version >= 3 else list(p.new_isr)
            answer = AlterPartitionResponse.PartitionData(partition_index=p.partition_index)
            try:
                state = await active.alter_partition(request.broker_id, topic.topic_id, p.partition_index,
                                                     p.leader_epoch, new_isr, p.partition_epoch)
            except KafkaError as exc:
                answer.error_code = int(exc.code)
            else:
                answer.leader_id = state.leader
                answer.leader_epoch = state.leader_epoch
                answer.isr = list(state.isr)
                answer.partition_epoch = state.partition_epoch
            partitions.append(answer)
        topics.append(AlterPartitionResponse.TopicData(topic_id=topic.topic_id, partitions=partitions))
    return AlterPartitionResponse(error_code=0, topics=topics)


HANDLERS = (
    ApiHandler(ApiKey.LEADER_AND_ISR, 5, 7, leader_and_isr),
    ApiHandler(ApiKey.UPDATE_METADATA, 7, 8, update_metadata),
    ApiHandler(ApiKey.STOP_REPLICA, 3, 4, stop_replica),
    ApiHandler(ApiKey.CONTROLLED_SHUTDOWN, 2, 3, controlled_shutdown),
    ApiHandler(ApiKey.ALTER_PARTITION, 2, 3, alter_partition),
)
