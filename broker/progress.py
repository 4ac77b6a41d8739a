"""The arithmetic of progress: a rate, an ETA and how they read, for every long operation.

Pure and shared: the commands' bars and lines (deploy/progress.py), the mirror's initial catch-up
log (mirror/runtime.py) and the pipeline jobs' step lines (pipeline/export.py, copy.py) say rate
and ETA the same way. At rate 0 (nothing done yet, a backlog not shrinking) the ETA is unknown,
never a division by zero.
"""

from __future__ import annotations

import math

__all__ = ["duration_text", "eta_s", "rate_and_eta", "rate_per_s"]


def rate_per_s(done: float, elapsed_s: float) -> float:
    """Units per second over `elapsed_s` seconds; 0 when no time has passed or nothing is done."""
    if elapsed_s <= 0 or done <= 0:
        return 0.0
    return done / elapsed_s


def eta_s(left: float, rate: float) -> float | None:
    """Seconds until `left` units are done at `rate` per second: 0 when nothing is left, None
    (unknown) while the rate is 0 or not a finite number."""
    if left <= 0:
        return 0.0
    if not rate > 0 or math.isinf(rate):
        return None
    return left / rate


def duration_text(seconds: float | None) -> str:
    """`42 s`, `3m05s`, `2h10m`; `?` for unknown."""
    if seconds is None:
        return "?"
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    minutes, whole = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{whole:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def rate_and_eta(done: float, total: float, elapsed_s: float, unit: str) -> str:
    """`R unit/s, ETA t`: the average rate since the start, and the time left at it."""
    rate = rate_per_s(done, elapsed_s)
    return f"{rate:.0f} {unit}/s, ETA {duration_text(eta_s(total - done, rate))}"
