"""A loopback port whose TCP connects never complete: a peer behind a link that drops packets, or
a host that is down, as a connecting client sees it."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["stalled_port"]


@contextmanager
def stalled_port() -> Iterator[int]:
    """A listener (backlog 0) that never accepts, its accept queue filled first: Linux then drops
    every later SYN, so a connect to the port waits until the connecting side gives up (no
    refusal, no answer). Everything is closed on exit."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=0)
    port = int(listener.getsockname()[1])
    fillers = [socket.create_connection(("127.0.0.1", port), timeout=5)]
    for _ in range(2):  # margin for a kernel that queues one more than the backlog
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(("127.0.0.1", port))
        fillers.append(filler)
    try:
        yield port
    finally:
        for s in [*fillers, listener]:
            s.close()
