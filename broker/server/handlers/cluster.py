"""DescribeCluster: the cluster id, the controller and the brokers (KIP-700).

As Kafka's broker, it needs no ACL; the cluster's authorized operations, when asked for, are
those of a principal with Describe on the cluster, else none (0).
"""

from __future__ import annotations

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages import DescribeClusterRequest, DescribeClusterResponse
from broker.server.context import RequestContext
from broker.server.handlers.base import ApiHandler
from security.acl import CLUSTER_NAME, Operation, ResourceType

_BROKERS_ENDPOINT = 1


async def handle(ctx: RequestContext, request: DescribeClusterRequest) -> DescribeClusterResponse:
    controller = ctx.services.controller
    if ctx.version >= 1 and request.endpoint_type != _BROKERS_ENDPOINT:
        return DescribeClusterResponse(
            error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
            error_message="Only broker endpoints are served",
            endpoint_type=request.endpoint_type,
        )
    asked = request.include_cluster_authorized_operations
    if asked and not ctx.authorize_cluster(Operation.DESCRIBE):
        operations = 0
    else:
        operations = ctx.authorized_operations(asked, ResourceType.CLUSTER, CLUSTER_NAME)
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
        cluster_authorized_operations=operations,
    )


HANDLER = ApiHandler(ApiKey.DESCRIBE_CLUSTER, 0, 1, handle)
