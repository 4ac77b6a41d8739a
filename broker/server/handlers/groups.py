"""Consumer groups: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, ListGroups,
DescribeGroups, DeleteGroups. The state machine lives in broker.coordinator; FindCoordinator also finds
the transaction coordinator of a transactional id (key type 1).

With an authorizer, each is checked as Kafka's KafkaApis checks it, before the coordinator sees
it: FindCoordinator needs Describe on the group (GROUP_AUTHORIZATION_FAILED) or transactional id
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED), per key; JoinGroup, SyncGroup, Heartbeat and LeaveGroup
need Read on the group; DescribeGroups Describe on each group; DeleteGroups Delete on each group;
ListGroups lists every group to a principal with Describe on the cluster, else only the groups it
may Describe.
"""

from __future__ import annotations

from broker.address import parse_host_port
from broker.coordinator.coordinator import OFFSETS_TOPIC, GroupCoordinator, MemberIdRequired
from broker.coordinator.group import GroupState
from broker.coordinator.offsets_records import partition_for
from broker.coordinator.txn_records import TXN_STATE_TOPIC
from broker.protocol.api import ApiKey
from broker.protocol.constants import CoordinatorType
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.messages import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from broker.server.context import RequestContext
from broker.server.handlers.base import ApiHandler
from security.acl import Operation, ResourceType
from security.authorizer import OPERATIONS_NOT_REQUESTED

__all__ = ["HANDLERS"]

def _coordinator(ctx: RequestContext) -> GroupCoordinator:
    coordinator = ctx.services.groups
    if coordinator is None:
        raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the group coordinator is not running")
    return coordinator


def _leader_of(ctx: RequestContext, key: str, topic_name: str, running: bool,
               what: str) -> FindCoordinatorResponse.Coordinator:
    """The broker leading the key's partition of `topic_name` (Kafka: Utils.abs of the key's
    Java hashCode, modulo the partition count), at the listener the request came on;
    COORDINATOR_NOT_AVAILABLE while the coordinator is not running, the topic or that partition
    has no leader, or the leader has no such listener."""
    controller = ctx.services.controller
    topic = controller.topics().get(topic_name)
    leader = partition = -1
    if running and topic is not None and topic.partitions:
        partition = partition_for(key, len(topic.partitions))
        leader = topic.leader_of(partition)
    broker = next((b for b in controller.brokers() if b.broker_id == leader), None) if leader >= 0 else None
    endpoint = broker.endpoint(ctx.connection.listener_name) if broker is not None else None
    if broker is None or endpoint is None:
        why = (f"the {what} coordinator is not running" if not running
               else f"{topic_name} does not exist yet" if topic is None
               else f"partition {partition} of {topic_name} has no leader" if leader < 0
               else f"broker {leader} (leader of the {what}'s partition) is not reachable on this listener")
        return FindCoordinatorResponse.Coordinator(key=key, node_id=-1, host="", port=-1,
                                                   error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message=why)
    return FindCoordinatorResponse.Coordinator(key=key, node_id=broker.broker_id, host=endpoint.host,
                                               port=endpoint.port)


def _group_coordinator(ctx: RequestContext, key: str) -> FindCoordinatorResponse.Coordinator:
    return _leader_of(ctx, key, OFFSETS_TOPIC, ctx.services.groups is not None, "group")


async def _transaction_coordinator(ctx: RequestContext, key: str) -> FindCoordinatorResponse.Coordinator:
    """The leader of the id's `__transaction_state` partition. As Kafka, the first request
    creates that topic; the client hears COORDINATOR_NOT_AVAILABLE until its leaders serve."""
    coordinator = ctx.services.transactions
    if coordinator is not None and TXN_STATE_TOPIC not in ctx.services.controller.topics():
        try:
            await coordinator.ensure_topic()
        except KafkaError as exc:
            return _coordinator_refused(key, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                        f"creating {TXN_STATE_TOPIC}: {exc}")
    return _leader_of(ctx, key, TXN_STATE_TOPIC, coordinator is not None, "transaction")


def _coordinator_refused(key: str, code: ErrorCode, message: str) -> FindCoordinatorResponse.Coordinator:
    return FindCoordinatorResponse.Coordinator(key=key, node_id=-1, host="", port=-1, error_code=code,
                                               error_message=message)


async def find_coordinator(ctx: RequestContext, request: FindCoordinatorRequest) -> FindCoordinatorResponse:
    keys = request.coordinator_keys if ctx.version >= 4 else [request.key]
    results = []
    for key in keys:
        if request.key_type not in (CoordinatorType.GROUP, CoordinatorType.TRANSACTION):
            results.append(_coordinator_refused(key, ErrorCode.INVALID_REQUEST,
                                                f"unknown coordinator key type {request.key_type}"))
        elif request.key_type == CoordinatorType.GROUP and not ctx.authorize(Operation.DESCRIBE,
                                                                               ResourceType.GROUP, key):
            results.append(_coordinator_refused(key, ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                                "Group authorization failed."))
        elif request.key_type == CoordinatorType.TRANSACTION and not ctx.authorize(
                Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
            results.append(_coordinator_refused(key, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                                "Transactional Id authorization failed."))
        elif request.key_type == CoordinatorType.TRANSACTION:
            results.append(await _transaction_coordinator(ctx, key))
        else:
            results.append(_group_coordinator(ctx, key))
    if ctx.version >= 4:
        return FindCoordinatorResponse(coordinators=results)
    only = results[0]
    return FindCoordinatorResponse(error_code=only.error_code, error_message=only.error_message,
                                   node_id=only.node_id, host=only.host, port=only.port)


def _client_host(peer: str) -> str:
    """A member's client host (DescribeGroups): the peer's address without its port, or the peer
    text as it is when the address could not be read ("?")."""
    try:
        return parse_host_port(peer)[0]
    except ValueError:
        return peer


def _may_read(ctx: RequestContext, group_id: str) -> bool:
    """JoinGroup, SyncGroup, Heartbeat, LeaveGroup: Read on the group."""
    return ctx.authorize(Operation.READ, ResourceType.GROUP, group_id)


async def join_group(ctx: RequestContext, request: JoinGroupRequest) -> JoinGroupResponse:
    if not _may_read(ctx, request.group_id):
        # Kafka's error answer: no member id, no protocol (null from v7).
        return JoinGroupResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, generation_id=-1,
                                 protocol_name=None if ctx.version >= 7 else "")
    try:
        # v0 had no rebalance timeout: the session timeout served for both.
        rebalance_timeout = request.rebalance_timeout_ms if ctx.version >= 1 else request.session_timeout_ms
        result = await _coordinator(ctx).join(
            request.group_id,
            request.member_id,
            request.group_instance_id,
            ctx.header.client_id or "",
            _client_host(ctx.connection.peer),
            request.session_timeout_ms,
            rebalance_timeout,
            request.protocol_type,
            [(p.name, bytes(p.metadata)) for p in request.protocols],
            require_known_member_id=ctx.version >= 4,
        )
    except MemberIdRequired as exc:
        return JoinGroupResponse(error_code=ErrorCode.MEMBER_ID_REQUIRED, member_id=exc.member_id,
                                 generation_id=-1)
    except KafkaError as exc:
        return JoinGroupResponse(error_code=exc.code, member_id=request.member_id, generation_id=-1)
    # Before v9 a client cannot be told to skip the assignment, so a static leader that came
    # back sees no members (its SyncGroup then gets the stored assignment, as with Kafka).
    members = result.members if ctx.version >= 9 or not result.skip_assignment else []
    return JoinGroupResponse(
        generation_id=result.generation,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        leader=result.leader,
        skip_assignment=result.skip_assignment and ctx.version >= 9,
        member_id=result.member_id,
        members=[JoinGroupResponse.JoinGroupResponseMember(member_id=m, group_instance_id=i, metadata=md)
                 for m, i, md in members],
    )


async def sync_group(ctx: RequestContext, request: SyncGroupRequest) -> SyncGroupResponse:
    if not _may_read(ctx, request.group_id):
        return SyncGroupResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    try:
        protocol_type, protocol_name, assignment = await _coordinator(ctx).sync(
            request.group_id, request.generation_id, request.member_id, request.group_instance_id,
            {a.member_id: bytes(a.assignment) for a in request.assignments},
            request.protocol_type if ctx.version >= 5 else None,
            request.protocol_name if ctx.version >= 5 else None,
        )
    except KafkaError as exc:
        return SyncGroupResponse(error_code=exc.code)
    return SyncGroupResponse(protocol_type=protocol_type, protocol_name=protocol_name, assignment=assignment)


async def heartbeat(ctx: RequestContext, request: HeartbeatRequest) -> HeartbeatResponse:
    if not _may_read(ctx, request.group_id):
        return HeartbeatResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    try:
        _coordinator(ctx).heartbeat(request.group_id, request.generation_id, request.member_id,
                                    request.group_instance_id)
    except KafkaError as exc:
        return HeartbeatResponse(error_code=exc.code)
    return HeartbeatResponse()


async def leave_group(ctx: RequestContext, request: LeaveGroupRequest) -> LeaveGroupResponse:
    if not _may_read(ctx, request.group_id):
        return LeaveGroupResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    batched = ctx.version >= 3
    wanted: list[tuple[str, str | None]] = (
        [(m.member_id, m.group_instance_id) for m in request.members] if batched else [(request.member_id, None)]
    )
    try:
        codes = await _coordinator(ctx).leave(request.group_id, wanted)
    except KafkaError as exc:
        return LeaveGroupResponse(error_code=exc.code)
    if not batched:
        return LeaveGroupResponse(error_code=codes[0])
    return LeaveGroupResponse(members=[
        LeaveGroupResponse.MemberResponse(member_id=m, group_instance_id=i, error_code=code)
        for (m, i), code in zip(wanted, codes, strict=True)
    ])


async def list_groups(ctx: RequestContext, request: ListGroupsRequest) -> ListGroupsResponse:
    """The groups of the partitions this broker leads and has loaded; while any is still being
    loaded, they come with COORDINATOR_LOAD_IN_PROGRESS (Kafka's answer: the list is partial).
    Without Describe on the cluster, only the groups the principal may Describe (Kafka: the
    checks only filter, so a denial is not logged)."""
    try:
        coordinator = _coordinator(ctx)
    except KafkaError as exc:
        return ListGroupsResponse(error_code=exc.code)
    every_group = ctx.authorize_cluster(Operation.DESCRIBE, log_denied=False)
    states = {s.lower() for s in request.states_filter} if ctx.version >= 4 else set()
    types = {t.lower() for t in request.types_filter} if ctx.version >= 5 else set()
    listed = []
    for group in coordinator.groups.values():
        if group.state == GroupState.DEAD:
            continue
        if states and group.state.value.lower() not in states:
            continue
        if types and "classic" not in types:
            continue
        if not every_group and not ctx.authorize(Operation.DESCRIBE, ResourceType.GROUP, group.group_id,
                                                 log_denied=False):
            continue
        listed.append(ListGroupsResponse.ListedGroup(group_id=group.group_id,
                                                     protocol_type=group.protocol_type or "",
                                                     group_state=group.state.value, group_type="classic"))
    code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if coordinator.is_loading else ErrorCode.NONE
    return ListGroupsResponse(error_code=code, groups=listed)


def _group_error(group_id: str, code: ErrorCode, state: str) -> DescribeGroupsResponse.DescribedGroup:
    return DescribeGroupsResponse.DescribedGroup(group_id=group_id, error_code=code, group_state=state,
                                                 authorized_operations=OPERATIONS_NOT_REQUESTED)


async def describe_groups(ctx: RequestContext, request: DescribeGroupsRequest) -> DescribeGroupsResponse:
    """Each group the principal may Describe (else GROUP_AUTHORIZATION_FAILED, state "" as
    Kafka's), with its authorized operations when asked for (v3+)."""
    try:
        coordinator = _coordinator(ctx)
    except KafkaError as exc:
        return DescribeGroupsResponse(groups=[_group_error(g, exc.code, GroupState.DEAD.value)
                                              for g in request.groups])
    with_operations = ctx.version >= 3 and request.include_authorized_operations
    described = []
    for group_id in request.groups:
        if not ctx.authorize(Operation.DESCRIBE, ResourceType.GROUP, group_id):
            described.append(_group_error(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED, ""))
            continue
        code = coordinator.coordinator_error(group_id)
        if code != ErrorCode.NONE:
            # Kept by another broker, or still loading here: the client asks again (Kafka).
            described.append(_group_error(group_id, code, GroupState.DEAD.value))
            continue
        operations = ctx.authorized_operations(with_operations, ResourceType.GROUP, group_id)
        group = coordinator.groups.get(group_id)
        if group is None:
            # Kafka describes an unknown group as Dead (v0-v5), with no error.
            described.append(DescribeGroupsResponse.DescribedGroup(
                group_id=group_id, group_state=GroupState.DEAD.value, authorized_operations=operations))
            continue
        stable = group.state == GroupState.STABLE
        members = [
            DescribeGroupsResponse.DescribedGroupMember(
                member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                client_host=f"/{m.client_host}", member_metadata=m.metadata_for(group.protocol_name),
                member_assignment=m.assignment if stable else b"",
            )
            for m in group.members.values()
        ]
        described.append(DescribeGroupsResponse.DescribedGroup(
            group_id=group_id, group_state=group.state.value, protocol_type=group.protocol_type or "",
            protocol_data=group.protocol_name or "" if stable else "", members=members,
            authorized_operations=operations))
    return DescribeGroupsResponse(groups=described)


async def delete_groups(ctx: RequestContext, request: DeleteGroupsRequest) -> DeleteGroupsResponse:
    """Each group the principal may Delete (else GROUP_AUTHORIZATION_FAILED, nothing done)."""
    results = []
    for group_id in request.groups_names:
        code = ErrorCode.NONE
        if not ctx.authorize(Operation.DELETE, ResourceType.GROUP, group_id):
            code = ErrorCode.GROUP_AUTHORIZATION_FAILED
        else:
            try:
                await _coordinator(ctx).delete_group(group_id)
            except KafkaError as exc:
                code = exc.code
        results.append(DeleteGroupsResponse.DeletableGroupResult(group_id=group_id, error_code=code))
    return DeleteGroupsResponse(results=results)


HANDLERS = (
    # FindCoordinator v6 adds share-group keys (KIP-932); not served.
    ApiHandler(ApiKey.FIND_COORDINATOR, 0, 5, find_coordinator),
    ApiHandler(ApiKey.JOIN_GROUP, 0, 9, join_group),
    ApiHandler(ApiKey.SYNC_GROUP, 0, 5, sync_group),
    ApiHandler(ApiKey.HEARTBEAT, 0, 4, heartbeat),
    ApiHandler(ApiKey.LEAVE_GROUP, 0, 5, leave_group),
    ApiHandler(ApiKey.LIST_GROUPS, 0, 5, list_groups),
    ApiHandler(ApiKey.DESCRIBE_GROUPS, 0, 5, describe_groups),
    ApiHandler(ApiKey.DELETE_GROUPS, 0, 2, delete_groups),
)
