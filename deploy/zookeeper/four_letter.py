"""ZooKeeper's four-letter words: `srvr` tells whether a node serves and in which mode.

A node answers `srvr` with lines such as `Mode: leader` once it serves clients; a member of an
ensemble that has no quorum answers "This ZooKeeper instance is not currently serving requests".
The words must be whitelisted in zoo.cfg (`4lw.commands.whitelist`), which deploy/zookeeper does.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

__all__ = ["MAX_REPLY_BYTES", "ServerState", "parse_srvr", "srvr"]

MAX_REPLY_BYTES = 64 * 1024  # `srvr` answers a few hundred bytes; more is not ZooKeeper


@dataclass(frozen=True)
class ServerState:
    """What `srvr` said: `mode` is standalone, leader or follower (observer, read-only too)."""

    mode: str
    zxid: int
    node_count: int
    connections: int


def parse_srvr(text: str) -> ServerState | None:
    """The state in a `srvr` reply; None when the node does not serve (no Mode line)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    mode = fields.get("Mode")
    if not mode:
        return None
    try:
        zxid = int(fields.get("Zxid", "0"), 0)
        node_count = int(fields.get("Node count", "0"))
        connections = int(fields.get("Connections", "0"))
    except ValueError:
        return None
    return ServerState(mode, zxid, node_count, connections)


def srvr(host: str, port: int, *, timeout_s: float = 1.0) -> ServerState | None:
    """Ask one node; None when it refuses the connection, does not serve yet, or is silent for
    `timeout_s`. Blocking (a loopback round trip): trio code runs it in a worker thread."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.sendall(b"srvr")
            reply = b""
            while len(reply) < MAX_REPLY_BYTES:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                reply += chunk
    except OSError:
        return None
    return parse_srvr(reply.decode(errors="replace"))
