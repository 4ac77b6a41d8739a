"""DescribeCluster: the cluster id, the controller and the brokers (KIP-700)."""

from __future__ import annotations

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages import DescribeClusterRequest, DescribeClusterResponse
from broker.server.context import RequestContext
from broker.server.handlers.base import ApiHandler

_BROKERS_ENDPOINT = 1


async def handle(ctx: RequestContext, request: DescribeClusterRequest) -> DescribeClusterResponse:
    controller = ctx.services.controller
    if ctx.version >= 1 and request.endpoint_type != _BROKERS_ENDPOINT:
        return DescribeClusterResponse(
            error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
            error_message="Only broker endpoints are served",
            endpoint_type=request.endpoint_type,
        )
    brokers = []
    for broker in controller.brokers():
        endpoint = broker.endpoint(ctx.connection.listener_name)
        if endpoint is not None:
            brokers.append(DescribeClusterResponse.DescribeClusterBroker(
                broker_id=broker.broker_id, host=endpoint.host, port=endpoint.port, rack=broker.rack))
    return DescribeClusterResponse(
        error_code=ErrorCode.NONE,
        cluster_id=controller.cluster_id,
        controller_id=controller.controller_id,
        brokers=brokers,
    )


HANDLER = ApiHandler(ApiKey.DESCRIBE_CLUSTER, 0, 1, handle)
