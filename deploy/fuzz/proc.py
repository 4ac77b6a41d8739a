"""What /proc says about the broker under attack: alive, resident memory, open descriptors.

The fuzzer may be pointed at a broker it did not start; when that broker is a local process
of the same user, its pid is found from the listening socket's inode (/proc/net/tcp{,6}, then
the /proc/<pid>/fd links that name it).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from deploy.child_process import rss_bytes

__all__ = ["ESTABLISHED", "CLOSE_WAIT", "LISTEN", "Descriptors", "TcpSocket", "alive", "close_wait_peers",
           "descriptors", "listener_pid", "rss_bytes", "tcp_sockets"]

# The kernel's TCP states, as /proc/net/tcp{,6} write them (hex).
ESTABLISHED, CLOSE_WAIT, LISTEN = 0x01, 0x08, 0x0A


@dataclass(frozen=True, slots=True)
class Descriptors:
    sockets: int
    files: int  # everything else: log segments, indexes, pipes, epoll

    @property
    def total(self) -> int:
        return self.sockets + self.files


def alive(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def descriptors(pid: int) -> Descriptors:
    sockets = files = 0
    fd_dir = f"/proc/{pid}/fd"
    for name in os.listdir(fd_dir):
        try:
            target = os.readlink(f"{fd_dir}/{name}")
        except OSError:
            continue  # closed while we looked
        if target.startswith("socket:"):
            sockets += 1
        else:
            files += 1
    return Descriptors(sockets, files)


class TcpSocket(NamedTuple):
    state: int  # ESTABLISHED, CLOSE_WAIT, LISTEN, ...
    peer_port: int
    receive_queue: int  # bytes received and not yet read by the process
    inode: str


def tcp_sockets(port: int) -> Iterator[TcpSocket]:
    """Every TCP socket on local `port`, from /proc/net/tcp{,6}."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if int(parts[1].rsplit(":", 1)[1], 16) == port:
                yield TcpSocket(int(parts[3], 16), int(parts[2].rsplit(":", 1)[1], 16),
                                int(parts[4].split(":")[1], 16), parts[9])


def _listening_inodes(port: int) -> set[str]:
    return {s.inode for s in tcp_sockets(port) if s.state == LISTEN}


def close_wait_peers(port: int) -> list[int]:
    """Peer ports of the connections to local `port` that the peer closed and this side has
    not (TCP state CLOSE_WAIT): what a server still holds for clients that are gone."""
    return [s.peer_port for s in tcp_sockets(port) if s.state == CLOSE_WAIT]


def listener_pid(port: int) -> int | None:
    """The pid of the local process listening on `port`, if this user can see it."""
    wanted = {f"socket:[{inode}]" for inode in _listening_inodes(port)}
    if not wanted:
        return None
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            for fd in os.listdir(f"/proc/{entry}/fd"):
                if os.readlink(f"/proc/{entry}/fd/{fd}") in wanted:
                    return int(entry)
        except OSError:
            continue  # another user's process, or gone
    return None
