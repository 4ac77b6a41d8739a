"""Open the broker's named listeners and serve connections on each, as ``trio.serve_tcp`` does.

Port 0 binds a free port; :func:`serve_listeners` reports the bound addresses through
``task_status.started`` so that callers (tests, the CLI) learn them without polling.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import trio

from broker import log_limits
from broker.config import ListenerSpec
from broker.storage.handles import HANDLES, emfile_advice

__all__ = ["BoundListener", "serve_listeners"]

log = logging.getLogger(__name__)
_limited = log_limits.limiter(log)

# accept() failures that mean "out of resources for now": wait and retry rather than die.
_TRANSIENT_ACCEPT_ERRORS = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}
# The wait after such a failure doubles up to the maximum, and starts again after an accept: the
# listening socket stays readable while connections queue, so retrying at once would spin.
ACCEPT_BACKOFF_MIN_S = 0.05
ACCEPT_BACKOFF_MAX_S = 1.0

ConnectionHandler = Callable[[trio.SocketStream, ListenerSpec], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class BoundListener:
    spec: ListenerSpec  # as configured
    host: str
    port: int  # as bound (differs from spec.port when spec.port is 0)

    @property
    def url(self) -> str:
        return str(ListenerSpec(self.spec.name, self.host, self.port))


async def _open(spec: ListenerSpec) -> list[trio.SocketListener]:
    host = spec.host or None  # empty host: all interfaces, as in Kafka
    try:
        return await trio.open_tcp_listeners(spec.port, host=host)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot listen on {spec}: {exc.strerror}") from exc


async def accept_loop(
    listener: trio.SocketListener,
    spec: ListenerSpec,
    handler: ConnectionHandler,
    nursery: trio.Nursery,
) -> None:
    backoff = ACCEPT_BACKOFF_MIN_S
    async with listener:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                if exc.errno not in _TRANSIENT_ACCEPT_ERRORS:
                    raise
                advice = ""
                if exc.errno in (errno.EMFILE, errno.ENFILE):
                    # A client waiting to connect matters more than a segment file nobody reads:
                    # give the idle ones back so that the retry can succeed.
                    shed = HANDLES.shed_idle()
                    advice = f"; closed {shed} idle segment files; {emfile_advice()}"
                _limited.error(f"accept failed on {spec.name}", "accept on %s failed (%s); retrying in %g s%s",
                               spec, exc, backoff, advice)
                await trio.sleep(backoff)
                backoff = min(backoff * 2, ACCEPT_BACKOFF_MAX_S)
                continue
            backoff = ACCEPT_BACKOFF_MIN_S
            nursery.start_soon(handler, stream, spec)


async def serve_listeners(
    specs: Sequence[ListenerSpec],
    handler: ConnectionHandler,
    *,
    log_repeat_window_s: float = log_limits.DEFAULT_WINDOW_S,
    task_status: trio.TaskStatus[list[BoundListener]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Listen on every spec and run ``handler(stream, spec)`` per connection, forever.

    Repeated per-connection log messages are summarised once per ``log_repeat_window_s``
    (``causeway.log.repeat.window.ms``; see ``broker.log_limits``).
    Raises OSError (naming the listener) when an address cannot be bound; nothing is served then.
    """
    log_limits.set_window(log_repeat_window_s)
    opened: list[tuple[ListenerSpec, list[trio.SocketListener]]] = []
    try:
        for spec in specs:
            opened.append((spec, await _open(spec)))
    except BaseException:
        for _, listeners in opened:
            for lst in listeners:
                await lst.aclose()
        raise
    bound: list[BoundListener] = []
    for spec, listeners in opened:
        sockname = listeners[0].socket.getsockname()
        host = spec.host or sockname[0]
        bound.append(BoundListener(spec, host, sockname[1]))
    async with trio.open_nursery() as connections:
        await connections.start(log_limits.summarise_forever)
        async with trio.open_nursery() as accepters:
            for spec, listeners in opened:
                for lst in listeners:
                    accepters.start_soon(accept_loop, lst, spec, handler, connections)
            task_status.started(bound)
