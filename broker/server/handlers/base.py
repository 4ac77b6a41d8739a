"""The shape every API handler has: the API, the versions it implements, the coroutine."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from broker.protocol.api import ApiKey
from broker.protocol.schema import Message
from broker.server.context import RequestContext

__all__ = ["ApiHandler"]


@dataclass(frozen=True, slots=True)
class ApiHandler:
    api_key: ApiKey
    min_version: int
    max_version: int
    # Takes the decoded request, returns the response message, or None for no response. The
    # request stays Any: each handler takes its own request class, which a parameter typed
    # Message would not accept.
    handle: Callable[[RequestContext, Any], Awaitable[Message | None]]
