"""DescribeAcls, CreateAcls, DeleteAcls on a broker without an authorizer.

Causeway has no authorizer (every client may do everything), so it answers these three as Apache
Kafka does when `authorizer.class.name` is unset: SECURITY_DISABLED, "No Authorizer is
configured.", for the request or for each creation and filter. Clients rely on that exact answer:
MirrorMaker 2's topic-ACL sync reads it as "nothing to sync" and stops asking, and `kafka-acls`
prints it as the reason, where a broker that does not list the API at all makes MM2 log an error
on every sync round.
"""

from __future__ import annotations

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
from broker.server.context import RequestContext
from broker.server.handlers.base import ApiHandler

NO_AUTHORIZER = "No Authorizer is configured."


async def describe(ctx: RequestContext, request: DescribeAclsRequest) -> DescribeAclsResponse:
    return DescribeAclsResponse(error_code=ErrorCode.SECURITY_DISABLED, error_message=NO_AUTHORIZER)


async def create(ctx: RequestContext, request: CreateAclsRequest) -> CreateAclsResponse:
    return CreateAclsResponse(results=[
        CreateAclsResponse.AclCreationResult(error_code=ErrorCode.SECURITY_DISABLED, error_message=NO_AUTHORIZER)
        for _ in request.creations])


async def delete(ctx: RequestContext, request: DeleteAclsRequest) -> DeleteAclsResponse:
    return DeleteAclsResponse(filter_results=[
        DeleteAclsResponse.DeleteAclsFilterResult(error_code=ErrorCode.SECURITY_DISABLED, error_message=NO_AUTHORIZER)
        for _ in request.filters])


# Kafka 4.x serves versions 1-3 of each (v0 was removed by KIP-896).
HANDLERS = (
    ApiHandler(ApiKey.DESCRIBE_ACLS, 1, 3, describe),
    ApiHandler(ApiKey.CREATE_ACLS, 1, 3, create),
    ApiHandler(ApiKey.DELETE_ACLS, 1, 3, delete),
)
