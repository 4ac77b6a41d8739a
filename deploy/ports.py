"""Free loopback ports for a process that must name its port before it binds it.

Brokers bind port 0 and report what they got; but a topology's launcher hands every broker its
listeners, metrics port and WAN proxy address before starting it (a restarted process keeps its
address), and ZooKeeper cannot report a port it picked. The kernel's pick for port 0 is free
only at that moment and is drawn at random from the ephemeral range, so a launcher that asks for
sixty ports one after the other gets the same one twice every few dozen topologies; the two
processes given it then fight over it. This process never hands out one port twice.
Another process may still take a port before its user binds it: that user then fails to
start with the address named, and is retried as any failed start is.
"""

from __future__ import annotations

import socket
import threading

__all__ = ["free_port"]

_given: set[tuple[str, int]] = set()
_lock = threading.Lock()  # callers run in worker threads too


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now on `host`, and not handed out before by this process."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = int(s.getsockname()[1])
        with _lock:
            if (host, port) not in _given:
                _given.add((host, port))
                return port
