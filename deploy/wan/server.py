"""``serve_wan``: the emulator as one trio task."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import trio

from deploy.wan.api import WanApi
from deploy.wan.http import REQUEST_TIMEOUT_SECONDS, serve_http
from deploy.wan.proxy import MAX_CONNECTIONS, ProxyRegistry, open_listener

__all__ = ["serve_wan"]


async def serve_wan(
    api_host: str,
    api_port: int,
    *,
    proxies: Sequence[Mapping[str, Any]] = (),
    request_timeout_s: float = REQUEST_TIMEOUT_SECONDS,
    max_connections: int = MAX_CONNECTIONS,
    task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the WAN-link emulator: the Toxiproxy HTTP API on ``api_host:api_port`` (port 0: a
    free port) and the proxies it manages, until cancelled.

    ``proxies`` (Toxiproxy's populate format: objects with name, listen, upstream, enabled) are
    created before the API answers. An API request that has not arrived whole within
    ``request_timeout_s`` gets a 408 and its connection is closed. Each proxy serves at most
    ``max_connections`` client connections at once (a new one past it is closed). Reports the
    API's bound ``(host, port)`` through ``task_status.started``. Cancelling the task closes the
    API, every proxy listener and every proxied connection.

    Error handling: raises OSError if the API address cannot be bound, and
    :class:`deploy.wan.errors.ApiError` if ``proxies`` is invalid or one cannot listen; both
    before ``started`` is reported.
    """
    async with trio.open_nursery() as nursery:
        registry = ProxyRegistry(nursery, max_connections=max_connections)
        if proxies:
            await registry.populate(proxies)
        listener = await open_listener(api_host, api_port)
        name = listener.socket.getsockname()
        await nursery.start(partial(serve_http, listener, WanApi(registry).handle, request_timeout_s=request_timeout_s))
        task_status.started((str(name[0]), int(name[1])))
