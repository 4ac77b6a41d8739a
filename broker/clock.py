"""Wall-clock time in milliseconds, as Kafka's record timestamps and configs count it.

One definition for the broker, the client, the mirror and the tools. It sits at the top of
`broker` (not in `broker.protocol`, which does no IO and reads no clock) so every side may
import it; it imports nothing heavier than `time`.
"""

from __future__ import annotations

import time

__all__ = ["now_ms"]


def now_ms() -> int:
    """Milliseconds since the epoch (time.time_ns, so no float rounding)."""
    return time.time_ns() // 1_000_000
