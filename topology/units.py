"""Human units in topology files: durations (`40ms`, `1.5s`), bandwidth (`100Mbit`, `10MB`) and
percentages (`0.1%`, as netem takes loss and reordering)."""

from __future__ import annotations

import re

__all__ = ["parse_bandwidth", "parse_duration_ms", "parse_percent"]

_NUMBER = r"(\d+(?:\.\d+)?)\s*"
_DURATION = re.compile(_NUMBER + r"(ms|s|m|h)$")
_DURATION_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}
# Per second, decimal SI prefixes as networks quote them; bits or bytes.
_BANDWIDTH = re.compile(r"(-?)" + _NUMBER + r"(bit|Kbit|Mbit|Gbit|B|KB|MB|GB)(?:/s|ps)?$")
_PERCENT = re.compile(r"(-?)" + _NUMBER + r"%$")
_BANDWIDTH_BYTES = {"bit": 1 / 8, "Kbit": 1e3 / 8, "Mbit": 1e6 / 8, "Gbit": 1e9 / 8,
                    "B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9}


def parse_duration_ms(value: object) -> int:
    """Milliseconds of `40ms`, `2s`, `1.5m`, `1h` (a bare number is milliseconds).

    Raises ValueError naming the accepted forms.
    """
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration; use e.g. 40ms, 2s, 1m")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return round(value)
    match = _DURATION.match(str(value).strip())
    if match is None:
        raise ValueError(f"{value!r} is not a duration; use a number with ms, s, m or h (e.g. 40ms)")
    return round(float(match.group(1)) * _DURATION_MS[match.group(2)])


def parse_bandwidth(value: object) -> int:
    """Bytes per second of `100Mbit`, `1Gbit`, `10MB`, `500KB` (decimal: 1 Mbit = 10^6 bits).

    Raises ValueError naming the accepted forms.
    """
    match = _BANDWIDTH.match(str(value).strip()) if not isinstance(value, bool) else None
    if match is None:
        raise ValueError(f"{value!r} is not a bandwidth; use a number with bit, Kbit, Mbit, Gbit, B, KB, MB or GB "
                         "(per second, e.g. 100Mbit)")
    if match.group(1):
        raise ValueError(f"a bandwidth cannot be negative, got {value}")
    rate = round(float(match.group(2)) * _BANDWIDTH_BYTES[match.group(3)])
    if rate <= 0:
        raise ValueError("a bandwidth must be positive")
    return rate


def parse_percent(value: object) -> float:
    """The percentage of `0.1%`, `25%` (netem's loss and reorder): from 0 up to, not including,
    100 (100% loss is a link that is down). A bare number is refused, as 0.1 could mean either.

    Raises ValueError naming the accepted form.
    """
    match = _PERCENT.match(value.strip()) if isinstance(value, str) else None
    if match is None:
        raise ValueError(f"{value!r} is not a percentage; write it with %, e.g. 0.1%")
    percent = float(match.group(2))
    if match.group(1) or percent >= 100:
        raise ValueError(f"a percentage from 0% up to (not including) 100% is needed, got {value}")
    return percent
