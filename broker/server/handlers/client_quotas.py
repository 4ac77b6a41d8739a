"""DescribeClientQuotas: Causeway enforces no client quotas yet, so there are none to describe.

Answered (with no entries) rather than refused because Kafka's tools ask it on the way to other
things: ``kafka-configs --describe --entity-type users`` describes a user's quotas and then its
SCRAM credentials, and fails outright on a broker that does not serve the API.

With an authorizer it needs DescribeConfigs on the cluster, as Kafka: else
CLUSTER_AUTHORIZATION_FAILED (and null entries)."""

from __future__ import annotations

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages import DescribeClientQuotasRequest, DescribeClientQuotasResponse
from broker.server.context import CLUSTER_DENIED, RequestContext
from broker.server.handlers.base import ApiHandler
from security.acl import Operation

_ENTITY_TYPES = frozenset({"user", "client-id", "ip"})


async def describe(ctx: RequestContext, request: DescribeClientQuotasRequest) -> DescribeClientQuotasResponse:
    if not ctx.authorize_cluster(Operation.DESCRIBE_CONFIGS):
        return DescribeClientQuotasResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, entries=None,
                                            error_message=CLUSTER_DENIED)
    unknown = [c.entity_type for c in request.components if c.entity_type not in _ENTITY_TYPES]
    if unknown:
        return DescribeClientQuotasResponse(error_code=ErrorCode.INVALID_REQUEST, entries=None,
                                            error_message=f"Unknown quota entity type {unknown[0][:64]!r}")
    return DescribeClientQuotasResponse(error_code=ErrorCode.NONE, error_message=None, entries=[])


HANDLER = ApiHandler(ApiKey.DESCRIBE_CLIENT_QUOTAS, 0, 1, describe)
