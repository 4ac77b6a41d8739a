"""The API table: for each API key, its message classes, versions and header versions."""

from __future__ import annotations

from dataclasses import dataclass

from broker.protocol.messages import REQUESTS, RESPONSES, ApiKey
from broker.protocol.schema import Message

__all__ = ["API_SPECS", "ApiKey", "ApiSpec"]


@dataclass(frozen=True, slots=True)
class ApiSpec:
    api_key: ApiKey
    request: type[Message]  # a generated message class
    response: type[Message]
    min_version: int
    max_version: int
    flexible_version: int | None

    @property
    def name(self) -> str:
        return self.api_key.name

    def is_flexible(self, version: int) -> bool:
        return self.flexible_version is not None and version >= self.flexible_version

    def request_header_version(self, version: int) -> int:
        """2 for flexible versions (tagged fields), else 1; ControlledShutdown v0 used v0."""
        if self.api_key == ApiKey.CONTROLLED_SHUTDOWN and version == 0:
            return 0
        return 2 if self.is_flexible(version) else 1

    def response_header_version(self, version: int) -> int:
        """1 for flexible versions, else 0; ApiVersions always answers with header v0, so a
        client that does not yet know our versions can read the reply."""
        if self.api_key == ApiKey.API_VERSIONS:
            return 0
        return 1 if self.is_flexible(version) else 0


API_SPECS: dict[int, ApiSpec] = {
    key: ApiSpec(
        api_key=ApiKey(key),
        request=request,
        response=RESPONSES[key],
        min_version=request.MIN_VERSION,
        max_version=request.MAX_VERSION,
        flexible_version=request.FLEXIBLE_VERSION,
    )
    for key, request in REQUESTS.items()
}
