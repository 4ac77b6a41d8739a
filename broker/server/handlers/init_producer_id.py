"""InitProducerId: hand out producer ids for idempotent producers."""

from __future__ import annotations

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages import InitProducerIdRequest, InitProducerIdResponse
from broker.server.context import RequestContext
from broker.server.handlers.base import ApiHandler


async def handle(ctx: RequestContext, request: InitProducerIdRequest) -> InitProducerIdResponse:
    if request.transactional_id is not None:
        # Transactions need a transaction coordinator, which does not exist yet. The answer must
        # be final: the Java producer retries COORDINATOR_NOT_AVAILABLE until max.block.ms and
        # fails at once on UNSUPPORTED_VERSION. Clients reach this only past FindCoordinator,
        # which already refuses transactional ids with the reason (this response has no message).
        return InitProducerIdResponse(error_code=ErrorCode.UNSUPPORTED_VERSION, producer_id=-1, producer_epoch=-1)
    producer_id = await ctx.services.controller.allocate_producer_id()
    return InitProducerIdResponse(error_code=ErrorCode.NONE, producer_id=producer_id, producer_epoch=0)


HANDLER = ApiHandler(ApiKey.INIT_PRODUCER_ID, 0, 5, handle)
