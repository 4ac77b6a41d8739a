"""What a killed pipeline run leaves behind, and whether its writer is gone.

A run writes under temporary names that carry its host and process id, so a later run can tell
the files of a run that died (removed, and said so) from those of a run still going (left
alone). A process id says little on its own: one on another machine (a history directory on a
shared file system) is never judged from here, and a live process that started after the file
was last written is a later process that reuses the id, not the writer.
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

__all__ = ["HOST", "writer_gone"]

# The host part of temporary names: letters, digits and '-' only, so names parse back.
HOST = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:63] or "localhost"


def writer_gone(pid: int, host: str | None, mtime: float) -> bool:
    """True when the process `pid` on `host` (None: this host, as names without one were
    written) that last wrote a file at `mtime` (epoch seconds) is certainly gone."""
    if (host is not None and host != HOST) or pid == os.getpid() or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # alive, another user's
    started = _start_time(pid)
    # /proc's boot time is whole seconds and the start clock-tick grained: a margin of 2 s.
    return started is not None and started > mtime + 2.0


def _start_time(pid: int) -> float | None:
    """When process `pid` started (epoch seconds), from /proc; None where /proc cannot say."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
        ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22, starttime (after pid and comm)
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None
