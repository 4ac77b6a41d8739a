"""Which process a pid names, from /proc: so that a command never signals a stranger.

A pid alone names whatever process has it now; after the one we started exits, the kernel may
give its pid to anything. A process is ours when its pid, its start time (field 22 of
/proc/<pid>/stat, in clock ticks since boot: it never changes and no two processes with one pid
share it) and its command line all match what was recorded when we started it.

Processes a launcher starts also carry `CAUSEWAY_STATE_DIR` in their environment, so the next
command finds them even when the state file that lists them is gone or damaged. That mark is
also what proves a process is ours: pid, start time and command line are world-readable, so
anyone who can write a state file can copy them from any process, but /proc/<pid>/environ is
readable only by the process's owner, and only a launcher puts the mark there.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["STATE_DIR_ENV", "Identity", "carries_mark", "find_marked", "identity_of", "is_running", "parent_of"]

#: The environment variable naming the state dir of the launcher that started a process.
STATE_DIR_ENV = "CAUSEWAY_STATE_DIR"


@dataclass(frozen=True)
class Identity:
    pid: int
    start_time: int
    cmdline: tuple[str, ...]

    def is_current(self) -> bool:
        """Whether this very process still runs (not a zombie, not another with its pid)."""
        now = identity_of(self.pid)
        return now is not None and now == self and is_running(self.pid)

    def age_s(self) -> float:
        """Seconds since the process started."""
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return uptime - self.start_time / os.sysconf("SC_CLK_TCK")

    def describe(self) -> str:
        return f"pid {self.pid} ({' '.join(self.cmdline)[:120]})"


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode(errors="replace")
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may contain spaces or parentheses itself.
    return text.rsplit(")", 1)[1].split()


def identity_of(pid: int) -> Identity | None:
    """The identity of the process with this pid now, or None if there is none (or it is hidden)."""
    fields = _stat_fields(pid)
    if fields is None or len(fields) < 20:
        return None
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    cmdline = tuple(part.decode(errors="replace") for part in raw.split(b"\0")[:-1])
    return Identity(pid, int(fields[19]), cmdline)  # field 22 is the 20th after the name


def is_running(pid: int) -> bool:
    """Whether the process exists and has not exited (a zombie only waits to be reaped)."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def parent_of(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[1]) if fields is not None else None


def _mark(state_dir: Path) -> bytes:
    return f"{STATE_DIR_ENV}={state_dir.resolve()}".encode()


def _has_mark(pid: int | str, mark: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read()
    except OSError:
        return False  # gone, or another user's: not provably ours
    return mark in environ.split(b"\0")


def carries_mark(pid: int, state_dir: Path) -> bool:
    """Whether the process's environment names `state_dir` as its launcher's (false for another
    user's process, whose environment we cannot read)."""
    return _has_mark(pid, _mark(state_dir))


def find_marked(state_dir: Path) -> Iterator[Identity]:
    """Every running process of this user whose environment names `state_dir` as its launcher's."""
    mark = _mark(state_dir)
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and _has_mark(entry.name, mark):
            identity = identity_of(int(entry.name))
            if identity is not None and is_running(identity.pid):
                yield identity
