"""ApiVersions: tell the client which APIs and versions this broker serves."""

from __future__ import annotations

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages import ApiVersionsRequest, ApiVersionsResponse
from broker.server.context import RequestContext
from broker.server.handlers.base import ApiHandler


async def handle(ctx: RequestContext, request: ApiVersionsRequest) -> ApiVersionsResponse:
    # Imported here: the registry imports this module to build the table it reports.
    from broker.server.dispatch import supported_api_versions

    error = ErrorCode.NONE
    if ctx.version >= 3 and not _valid_client_software(request):
        error = ErrorCode.INVALID_REQUEST
    return ApiVersionsResponse(error_code=error, api_keys=supported_api_versions())


def _valid_client_software(request: ApiVersionsRequest) -> bool:
    # KIP-511: name and version must be non-empty and match [a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?
    import re

    pattern = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$")
    return bool(
        pattern.match(request.client_software_name or "")
        and pattern.match(request.client_software_version or "")
    )


HANDLER = ApiHandler(ApiKey.API_VERSIONS, 0, 4, handle)
