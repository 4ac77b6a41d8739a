"""DescribeAcls, CreateAcls, DeleteAcls.

Without an authorizer (``authorizer.class.name`` unset) they are answered as Apache Kafka answers
them: SECURITY_DISABLED, "No Authorizer is configured.", for the request or for each creation and
filter. Clients rely on that exact answer: MirrorMaker 2's topic-ACL sync reads it as "nothing to
sync" and stops asking, and ``kafka-acls`` prints it as the reason.

With one, as Kafka's ``AclApis``: DescribeAcls needs Describe on the cluster, the other two Alter
on the cluster; each creation and filter is checked on its own (INVALID_REQUEST naming what is
wrong), and the valid ones are stored together.
"""

from __future__ import annotations

import logging

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages import (
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
)
from broker.server.context import CLUSTER_DENIED, RequestContext
from broker.server.handlers.base import ApiHandler
from security.acl import (
    AclBinding,
    AclBindingFilter,
    AclError,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
    binding_from_wire,
    from_wire,
)

NO_AUTHORIZER = "No Authorizer is configured."

log = logging.getLogger(__name__)


def _filter(resource_type: int, name: str | None, pattern_type: int, principal: str | None, host: str | None,
            operation: int, permission: int) -> AclBindingFilter:
    selected = AclBindingFilter(from_wire(ResourceType, resource_type), name, from_wire(PatternType, pattern_type),
                                principal, host, from_wire(Operation, operation), from_wire(Permission, permission))
    selected.check()
    return selected


async def describe(ctx: RequestContext, request: DescribeAclsRequest) -> DescribeAclsResponse:
    acls = ctx.services.acls
    if acls is None:
        return DescribeAclsResponse(error_code=ErrorCode.SECURITY_DISABLED, error_message=NO_AUTHORIZER)
    if not ctx.authorize_cluster(Operation.DESCRIBE):
        return DescribeAclsResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                    error_message=CLUSTER_DENIED)
    try:
        selected = _filter(request.resource_type_filter, request.resource_name_filter, request.pattern_type_filter,
                           request.principal_filter, request.host_filter, request.operation, request.permission_type)
    except AclError as exc:
        return DescribeAclsResponse(error_code=ErrorCode.INVALID_REQUEST, error_message=str(exc))
    resources: dict[ResourcePattern, list[DescribeAclsResponse.AclDescription]] = {}
    for binding in acls.authorizer.bindings(selected):
        entry = binding.entry
        resources.setdefault(binding.pattern, []).append(DescribeAclsResponse.AclDescription(
            principal=entry.principal, host=entry.host, operation=entry.operation, permission_type=entry.permission))
    return DescribeAclsResponse(resources=[
        DescribeAclsResponse.DescribeAclsResource(resource_type=p.resource_type, resource_name=p.name,
                                                  pattern_type=p.pattern_type, acls=found)
        for p, found in resources.items()])


async def create(ctx: RequestContext, request: CreateAclsRequest) -> CreateAclsResponse:
    acls = ctx.services.acls
    if acls is None or not ctx.authorize_cluster(Operation.ALTER):
        code = ErrorCode.SECURITY_DISABLED if acls is None else ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        message = NO_AUTHORIZER if acls is None else CLUSTER_DENIED
        return CreateAclsResponse(results=[CreateAclsResponse.AclCreationResult(error_code=code, error_message=message)
                                           for _ in request.creations])
    results: list[tuple[ErrorCode, str | None]] = []
    valid: list[AclBinding] = []
    for c in request.creations:
        binding = binding_from_wire(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal, c.host,
                                    c.operation, c.permission_type)
        try:
            binding.check()
        except AclError as exc:
            results.append((ErrorCode.INVALID_REQUEST, f"invalid ACL: {exc}"))
            continue
        valid.append(binding)
        results.append((ErrorCode.NONE, None))
    if valid:
        try:
            await acls.create(valid)
        except Exception as exc:  # the store's IO: the ACLs are not in force, and the client is told
            log.warning("could not store %d ACLs: %s", len(valid), exc)
            results = [(ErrorCode.UNKNOWN_SERVER_ERROR, f"could not store the ACL: {exc}") if code == ErrorCode.NONE
                       else (code, message) for code, message in results]
        else:
            log.info("%s created ACLs: %s", ctx.connection.principal, "; ".join(map(str, valid)))
    return CreateAclsResponse(results=[CreateAclsResponse.AclCreationResult(error_code=code, error_message=message)
                                       for code, message in results])


async def delete(ctx: RequestContext, request: DeleteAclsRequest) -> DeleteAclsResponse:
    acls = ctx.services.acls
    if acls is None or not ctx.authorize_cluster(Operation.ALTER):
        code = ErrorCode.SECURITY_DISABLED if acls is None else ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        message = NO_AUTHORIZER if acls is None else CLUSTER_DENIED
        return DeleteAclsResponse(filter_results=[
            DeleteAclsResponse.DeleteAclsFilterResult(error_code=code, error_message=message) for _ in request.filters])
    checked: list[AclBindingFilter | AclError] = []
    for f in request.filters:
        try:
            checked.append(_filter(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter,
                                   f.principal_filter, f.host_filter, f.operation, f.permission_type))
        except AclError as exc:
            checked.append(exc)
    valid = [f for f in checked if isinstance(f, AclBindingFilter)]
    try:
        removed = iter(await acls.delete(valid)) if valid else iter(())
    except Exception as exc:  # the store's IO
        log.warning("could not delete ACLs: %s", exc)
        return DeleteAclsResponse(filter_results=[DeleteAclsResponse.DeleteAclsFilterResult(
            error_code=ErrorCode.UNKNOWN_SERVER_ERROR, error_message=f"could not delete the ACLs: {exc}")
            for _ in request.filters])
    results = []
    for item in checked:
        if isinstance(item, AclError):
            results.append(DeleteAclsResponse.DeleteAclsFilterResult(error_code=ErrorCode.INVALID_REQUEST,
                                                                     error_message=str(item)))
            continue
        results.append(DeleteAclsResponse.DeleteAclsFilterResult(matching_acls=[
            DeleteAclsResponse.DeleteAclsMatchingAcl(
                resource_type=b.pattern.resource_type, resource_name=b.pattern.name,
                pattern_type=b.pattern.pattern_type, principal=b.entry.principal, host=b.entry.host,
                operation=b.entry.operation, permission_type=b.entry.permission)
            for b in next(removed)]))
    return DeleteAclsResponse(filter_results=results)


# Kafka 4.x serves versions 1-3 of each (v0 was removed by KIP-896).
HANDLERS = (
    ApiHandler(ApiKey.DESCRIBE_ACLS, 1, 3, describe),
    ApiHandler(ApiKey.CREATE_ACLS, 1, 3, create),
    ApiHandler(ApiKey.DELETE_ACLS, 1, 3, delete),
)
