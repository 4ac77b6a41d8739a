"""The arithmetic of progress: a rate, an ETA and how they read, for every long operation.

Pure and shared: the commands' bars and lines (deploy/progress.py), the mirror's initial catch-up
log (mirror/runtime.py) and the pipeline jobs' step lines (pipeline/export.py, copy.py) say rate,
ETA and bytes the same way: bytes in binary units (KiB, MiB: what `du -h` and Kafka's docs use)
beside the records, where the operation knows them. At rate 0 (nothing done yet, a backlog not
shrinking) the ETA is unknown, never a division by zero.
"""

from __future__ import annotations

import math

__all__ = ["bytes_text", "duration_text", "eta_s", "rate_and_eta", "rate_per_s", "rate_text"]


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


_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def bytes_text(n: float) -> str:
    """`512 B`, `3.0 KiB`, `1.5 MiB`, ... up to PiB; a count that is not a finite number of
    bytes reads `?` rather than raising."""
    if not math.isfinite(n):
        return "?"
    for unit in _BYTE_UNITS:
        if abs(n) < 1024 or unit == _BYTE_UNITS[-1]:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def rate_text(done: float, elapsed_s: float, unit: str, bytes_done: float | None = None) -> str:
    """`R unit/s`, and with `bytes_done` the bytes so far and their rate: `3.0 MiB, R unit/s (51.2 KiB/s)`."""
    rate = f"{rate_per_s(done, elapsed_s):.0f} {unit}/s"
    if bytes_done is None:
        return rate
    return f"{bytes_text(bytes_done)}, {rate} ({bytes_text(rate_per_s(bytes_done, elapsed_s))}/s)"


def rate_and_eta(done: float, total: float, elapsed_s: float, unit: str, bytes_done: float | None = None) -> str:
    """`R unit/s, ETA t`: the average rate since the start, and the time left at it; with
    `bytes_done`, the bytes so far and their rate before it (rate_text)."""
    rate = rate_per_s(done, elapsed_s)
    return f"{rate_text(done, elapsed_s, unit, bytes_done)}, ETA {duration_text(eta_s(total - done, rate))}"
