"""AlterPartitionReassignments (API 45) and ListPartitionReassignments (API 46), KIP-455.

As Kafka's ZooKeeper-mode broker: only the controller serves them (NOT_CONTROLLER as the
top-level error elsewhere, so the admin client finds the controller and asks again); the
controller starts, replaces or cancels each reassignment and answers at once, without waiting
for the data to move (broker/controller/zk/reassignment.py). A standalone broker has no other
broker to move a replica to: a target other than itself is INVALID_REPLICA_ASSIGNMENT, and
nothing is ever in progress.

With an authorizer, as Kafka: Alter on the cluster to change reassignments, Describe on the
cluster to list them, checked first (CLUSTER_AUTHORIZATION_FAILED, for the request and, in an
alteration, each partition; nothing changes).
"""

from __future__ import annotations

from broker.controller.base import ActiveController, ZooKeeperSupport
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.messages import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)
from broker.server.context import CLUSTER_DENIED, RequestContext
from broker.server.handlers.base import ApiHandler
from security.acl import Operation

__all__ = ["HANDLERS"]

Answers = dict[tuple[str, int], tuple[ErrorCode, str | None]]


def _active(ctx: RequestContext, zk: ZooKeeperSupport) -> ActiveController:
    """This broker's controller term; raises KafkaError(NOT_CONTROLLER) on any other broker."""
    active = zk.active_controller()
    if active is None:
        raise KafkaError(ErrorCode.NOT_CONTROLLER, f"broker {ctx.config.broker_id} is not the controller")
    return active


def _alter_answer(answers: Answers) -> AlterPartitionReassignmentsResponse:
    by_topic: dict[str, list[AlterPartitionReassignmentsResponse.ReassignablePartitionResponse]] = {}
    for (topic, p), (code, message) in answers.items():
        by_topic.setdefault(topic, []).append(AlterPartitionReassignmentsResponse.ReassignablePartitionResponse(
            partition_index=p, error_code=int(code), error_message=message))
    return AlterPartitionReassignmentsResponse(error_code=0, error_message=None, responses=[
        AlterPartitionReassignmentsResponse.ReassignableTopicResponse(name=t, partitions=ps)
        for t, ps in by_topic.items()])


def _standalone_alter(ctx: RequestContext, asked: list[tuple[str, int, list[int] | None]]) -> Answers:
    me = ctx.config.broker_id
    known = {(name, p.partition) for name, topic in ctx.services.controller.topics().items() for p in topic.partitions}
    answers: Answers = {}
    for name, p, replicas in asked:
        if (name, p) not in known:
            answers[(name, p)] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
        elif replicas is None:
            answers[(name, p)] = (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None)
        elif replicas != [me]:
            answers[(name, p)] = (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                  f"Replica assignment has brokers that are not alive. Replica list: "
                                  f"{[b for b in replicas if b != me]}, live broker list: [{me}]")
        else:
            answers[(name, p)] = (ErrorCode.NONE, None)
    return answers


async def alter(ctx: RequestContext, request: AlterPartitionReassignmentsRequest
                ) -> AlterPartitionReassignmentsResponse:
    asked = [(t.name, p.partition_index, None if p.replicas is None else list(p.replicas))
             for t in request.topics for p in t.partitions]
    if not ctx.authorize_cluster(Operation.ALTER):
        answer = _alter_answer({(name, p): (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED)
                                for name, p, _ in asked})
        answer.error_code, answer.error_message = ErrorCode.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED
        return answer
    zk = ctx.services.controller.zookeeper()
    if zk is None:
        return _alter_answer(_standalone_alter(ctx, asked))
    try:
        answers = await _active(ctx, zk).alter_partition_reassignments(asked)
    except KafkaError as exc:
        return AlterPartitionReassignmentsResponse(error_code=int(exc.code), error_message=None)
    return _alter_answer(answers)


async def list_(ctx: RequestContext, request: ListPartitionReassignmentsRequest
                ) -> ListPartitionReassignmentsResponse:
    if not ctx.authorize_cluster(Operation.DESCRIBE):
        return ListPartitionReassignmentsResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                                  error_message=CLUSTER_DENIED)
    zk = ctx.services.controller.zookeeper()
    if zk is None:
        return ListPartitionReassignmentsResponse(error_code=0, error_message=None)
    asked = None if request.topics is None else [(t.name, p) for t in request.topics for p in t.partition_indexes]
    try:
        ongoing = await _active(ctx, zk).list_partition_reassignments(asked)
    except KafkaError as exc:
        return ListPartitionReassignmentsResponse(error_code=int(exc.code), error_message=None)
    by_topic: dict[str, list[ListPartitionReassignmentsResponse.OngoingPartitionReassignment]] = {}
    for (topic, p), r in ongoing.items():
        by_topic.setdefault(topic, []).append(ListPartitionReassignmentsResponse.OngoingPartitionReassignment(
            partition_index=p, replicas=list(r.full), adding_replicas=list(r.adding),
            removing_replicas=list(r.removing)))
    return ListPartitionReassignmentsResponse(error_code=0, error_message=None, topics=[
        ListPartitionReassignmentsResponse.OngoingTopicReassignment(name=t, partitions=ps)
        for t, ps in by_topic.items()])


HANDLERS = (
    ApiHandler(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, 0, alter),
    ApiHandler(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, 0, list_),
)
