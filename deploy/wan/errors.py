"""The one error type of the emulator's API, shaped as Toxiproxy shapes its error replies."""

from __future__ import annotations

__all__ = ["ApiError"]


class ApiError(Exception):
    """A failure the HTTP API reports as ``{"error": message, "status": status}``.

    Raised anywhere inside the emulator (parsing, the proxy registry, binding a listener) and
    turned into a reply in exactly one place, the API's request handler.
    """

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message = message
        self.status = status

    def to_json(self) -> dict[str, object]:
        return {"error": self.message, "status": self.status}


# Toxiproxy's own messages, so that tooling matching on them keeps working.
def bad_request(detail: str) -> ApiError:
    return ApiError(f"bad request body: {detail}", 400)


def missing_field(field: str) -> ApiError:
    return ApiError(f"missing required field: {field}", 400)


PROXY_NOT_FOUND = "proxy not found"
PROXY_EXISTS = "proxy already exists"
TOXIC_NOT_FOUND = "toxic not found"
TOXIC_EXISTS = "toxic already exists"
INVALID_STREAM = "stream was invalid, can be either upstream or downstream"
INVALID_TOXIC_TYPE = "invalid toxic type"
