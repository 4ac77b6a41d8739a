"""InitProducerId: hand out producer ids for idempotent producers, and (through the transaction
coordinator) producer ids and epochs for transactional ones.

With an authorizer, as Kafka's KafkaApis: a transactional id needs Write on it
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an idempotent producer needs IdempotentWrite on the
cluster or, since KIP-679 made idempotence the producers' default, Write on some topic
(CLUSTER_AUTHORIZATION_FAILED): a producer that may write nothing gets no id.
"""

from __future__ import annotations

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.messages import InitProducerIdRequest, InitProducerIdResponse
from broker.server.context import RequestContext
from broker.server.handlers.base import ApiHandler
from security.acl import Operation, ResourceType


def _refused(code: ErrorCode) -> InitProducerIdResponse:
    return InitProducerIdResponse(error_code=code, producer_id=-1, producer_epoch=-1)


async def handle(ctx: RequestContext, request: InitProducerIdRequest) -> InitProducerIdResponse:
    if request.transactional_id is not None:
        if not ctx.authorize(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
            return _refused(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        coordinator = ctx.services.transactions
        if coordinator is None:
            return _refused(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        try:
            # v3+ (KIP-360): a producer bumping its own epoch names the producer it had.
            expected = ((request.producer_id, request.producer_epoch)
                        if ctx.version >= 3 and request.producer_id >= 0 else None)
            producer_id, epoch = await coordinator.init_producer_id(request.transactional_id,
                                                                    request.transaction_timeout_ms, expected)
        except KafkaError as exc:
            # Before v4 (KIP-588) a fenced producer is told INVALID_PRODUCER_EPOCH.
            code = exc.code
            if code == ErrorCode.PRODUCER_FENCED and ctx.version < 4:
                code = ErrorCode.INVALID_PRODUCER_EPOCH
            return _refused(code)
        return InitProducerIdResponse(error_code=ErrorCode.NONE, producer_id=producer_id, producer_epoch=epoch)
    if not (ctx.authorize_cluster(Operation.IDEMPOTENT_WRITE, log_denied=False)
            or ctx.authorize_any(Operation.WRITE, ResourceType.TOPIC)):
        return _refused(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    producer_id = await ctx.services.controller.allocate_producer_id()
    return InitProducerIdResponse(error_code=ErrorCode.NONE, producer_id=producer_id, producer_epoch=0)


HANDLER = ApiHandler(ApiKey.INIT_PRODUCER_ID, 0, 5, handle)
