"""Consumer groups: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, ListGroups,
DescribeGroups, DeleteGroups. The state machine lives in broker.coordinator."""

from __future__ import annotations

from broker.coordinator.coordinator import GroupCoordinator, MemberIdRequired
from broker.coordinator.group import GroupState
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

__all__ = ["HANDLERS"]

# Why a transactional producer is refused, in the words a client shows its user.
TRANSACTIONS_UNSUPPORTED = ("Causeway does not support transactions yet (no transaction coordinator): "
                            "produce without transactional.id; idempotence works")
# Authorized-operations bitfield "not requested", as Kafka reports it.
OPERATIONS_NOT_REQUESTED = -(2**31)


def _coordinator(ctx: RequestContext) -> GroupCoordinator:
    coordinator = ctx.services.groups
    if coordinator is None:
        raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the group coordinator is not running")
    return coordinator


async def find_coordinator(ctx: RequestContext, request: FindCoordinatorRequest) -> FindCoordinatorResponse:
    keys = request.coordinator_keys if ctx.version >= 4 else [request.key]
    me = next((b for b in ctx.services.controller.brokers() if b.broker_id == ctx.config.broker_id), None)
    endpoint = me.endpoint(ctx.connection.listener_name) if me is not None else None
    results = []
    for key in keys:
        if request.key_type not in (CoordinatorType.GROUP, CoordinatorType.TRANSACTION):
            results.append(FindCoordinatorResponse.Coordinator(
                key=key, node_id=-1, host="", port=-1, error_code=ErrorCode.INVALID_REQUEST,
                error_message=f"unknown coordinator key type {request.key_type}"))
        elif request.key_type != CoordinatorType.GROUP:
            # No transaction coordinator exists. COORDINATOR_NOT_AVAILABLE would be retried by
            # every client until its deadline (60 s in the Java producer); UNSUPPORTED_VERSION is
            # final, and the Java producer fails at once showing this message (Redpanda answers
            # the same with transactions disabled). librdkafka retries every error here but an
            # authorization failure, so its init_transactions() ends at its own timeout.
            results.append(FindCoordinatorResponse.Coordinator(
                key=key, node_id=-1, host="", port=-1, error_code=ErrorCode.UNSUPPORTED_VERSION,
                error_message=TRANSACTIONS_UNSUPPORTED))
        elif endpoint is None or ctx.services.groups is None:
            results.append(FindCoordinatorResponse.Coordinator(
                key=key, node_id=-1, host="", port=-1, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE))
        else:
            results.append(FindCoordinatorResponse.Coordinator(
                key=key, node_id=me.broker_id if me else -1, host=endpoint.host, port=endpoint.port))
    if ctx.version >= 4:
        return FindCoordinatorResponse(coordinators=results)
    only = results[0]
    return FindCoordinatorResponse(error_code=only.error_code, error_message=only.error_message,
                                   node_id=only.node_id, host=only.host, port=only.port)


async def join_group(ctx: RequestContext, request: JoinGroupRequest) -> JoinGroupResponse:
    try:
        # v0 had no rebalance timeout: the session timeout served for both.
        rebalance_timeout = request.rebalance_timeout_ms if ctx.version >= 1 else request.session_timeout_ms
        result = await _coordinator(ctx).join(
            request.group_id,
            request.member_id,
            request.group_instance_id,
            ctx.header.client_id or "",
            ctx.connection.peer.rsplit(":", 1)[0],
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
    try:
        _coordinator(ctx).heartbeat(request.group_id, request.generation_id, request.member_id,
                                    request.group_instance_id)
    except KafkaError as exc:
        return HeartbeatResponse(error_code=exc.code)
    return HeartbeatResponse()


async def leave_group(ctx: RequestContext, request: LeaveGroupRequest) -> LeaveGroupResponse:
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
    coordinator = _coordinator(ctx)
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
        listed.append(ListGroupsResponse.ListedGroup(group_id=group.group_id,
                                                     protocol_type=group.protocol_type or "",
                                                     group_state=group.state.value, group_type="classic"))
    return ListGroupsResponse(groups=listed)


async def describe_groups(ctx: RequestContext, request: DescribeGroupsRequest) -> DescribeGroupsResponse:
    coordinator = _coordinator(ctx)
    described = []
    for group_id in request.groups:
        group = coordinator.groups.get(group_id)
        if group is None:
            # Kafka describes an unknown group as Dead (v0-v5), with no error.
            described.append(DescribeGroupsResponse.DescribedGroup(
                group_id=group_id, group_state=GroupState.DEAD.value,
                authorized_operations=OPERATIONS_NOT_REQUESTED))
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
            authorized_operations=OPERATIONS_NOT_REQUESTED))
    return DescribeGroupsResponse(groups=described)


async def delete_groups(ctx: RequestContext, request: DeleteGroupsRequest) -> DeleteGroupsResponse:
    coordinator = _coordinator(ctx)
    results = []
    for group_id in request.groups_names:
        code = ErrorCode.NONE
        try:
            await coordinator.delete_group(group_id)
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
