"""Named crash points for crash-recovery tests of real broker processes.

`CAUSEWAY_CRASH_AT=cleaner-before-swap` (comma-separated names) makes the broker kill itself with
SIGKILL when it reaches that point, so a test can crash it at an exact moment instead of hoping a
timed kill lands there. Unset in production, a crash point costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal

__all__ = ["crash_point"]

_ARMED = frozenset(filter(None, os.environ.get("CAUSEWAY_CRASH_AT", "").split(",")))


def crash_point(name: str) -> None:
    if name in _ARMED:
        os.kill(os.getpid(), signal.SIGKILL)
