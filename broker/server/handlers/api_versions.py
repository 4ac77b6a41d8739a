"""ApiVersions: tell the client which APIs and versions this broker serves.

The answer is the same for every request: the version range each handler declares. So it is
built once, from the handler table (``broker.server.handlers.ANSWER``, made when that table is),
and each request only picks the ready answer for its error code.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages import ApiVersionsRequest, ApiVersionsResponse
from broker.server.context import RequestContext
from broker.server.handlers.base import ApiHandler

__all__ = ["MAX_VERSION", "MIN_VERSION", "ApiVersionsAnswer"]

MIN_VERSION = 0
MAX_VERSION = 4

# KIP-511: ClientSoftwareName and ClientSoftwareVersion (v3+) must be non-empty and match this.
_CLIENT_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


class ApiVersionsAnswer:
    """The ApiVersions answers of a broker that serves ``handlers`` (and ApiVersions itself).

    The answers are shared by every request: they are only ever encoded, never changed.
    """

    def __init__(self, handlers: Iterable[ApiHandler]) -> None:
        versions = {int(h.api_key): (h.min_version, h.max_version) for h in handlers}
        versions[int(ApiKey.API_VERSIONS)] = (MIN_VERSION, MAX_VERSION)
        self.api_keys = [
            ApiVersionsResponse.ApiVersion(api_key=key, min_version=low, max_version=high)
            for key, (low, high) in sorted(versions.items())
        ]
        self._ok = ApiVersionsResponse(error_code=ErrorCode.NONE, api_keys=self.api_keys)
        self._invalid = ApiVersionsResponse(error_code=ErrorCode.INVALID_REQUEST, api_keys=self.api_keys)
        # KIP-511: a client that sent a newer ApiVersions than we know gets error 35 in a v0
        # response that still lists our versions, and retries with a version we support.
        self.unsupported_version = ApiVersionsResponse(
            error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=self.api_keys
        )
        self.handler = ApiHandler(ApiKey.API_VERSIONS, MIN_VERSION, MAX_VERSION, self.handle)

    async def handle(self, ctx: RequestContext, request: ApiVersionsRequest) -> ApiVersionsResponse:
        if ctx.version >= 3 and not _valid_client_software(request):
            return self._invalid
        return self._ok


def _valid_client_software(request: ApiVersionsRequest) -> bool:
    return bool(
        _CLIENT_SOFTWARE.fullmatch(request.client_software_name or "")
        and _CLIENT_SOFTWARE.fullmatch(request.client_software_version or "")
    )
