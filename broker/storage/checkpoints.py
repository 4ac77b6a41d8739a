"""Kafka's checkpoint files: a version line (0), a count line, then one entry per line.

Offset checkpoints at a log dir's root hold `topic partition offset`; a partition's
`leader-epoch-checkpoint` holds `epoch startOffset`. Written atomically: a temporary file,
fsync, rename, fsync of the directory, so a crash leaves the old file or the new one.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from broker.atomic_file import write_atomically

__all__ = [
    "CheckpointError",
    "read_checkpoint",
    "read_offsets",
    "read_pairs",
    "write_checkpoint",
    "write_offsets",
]

VERSION = 0
INT_MAX = 2**31 - 1  # partitions and leader epochs are int32
LONG_MAX = 2**63 - 1  # offsets are int64


class CheckpointError(Exception):
    """A checkpoint file that does not parse; the message names the file and line."""


def write_checkpoint(path: Path, entries: Iterable[tuple[object, ...]]) -> None:
    rows = [" ".join(str(v) for v in entry) for entry in entries]
    write_atomically(path, "".join(f"{line}\n" for line in [str(VERSION), str(len(rows)), *rows]))


def read_checkpoint(path: Path, fields: int) -> list[list[str]]:
    """Entries of `fields` columns each; [] when the file does not exist.

    Raises CheckpointError naming the file for anything else that does not parse: binary
    content, a wrong header, a bad count, a short or malformed line.
    """
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    except UnicodeDecodeError as exc:
        raise CheckpointError(f"{path}: not a text file (byte {exc.start} is not UTF-8)") from None
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    if len(lines) < 2 or lines[0].strip() != str(VERSION):
        raise CheckpointError(f"{path}: unsupported checkpoint header {lines[:1]}")
    try:
        count = int(lines[1])
    except ValueError:
        raise CheckpointError(f"{path}:2: bad entry count {lines[1]!r}") from None
    rows = []
    for number, line in enumerate(lines[2 : 2 + count], start=3):
        parts = line.split()
        if len(parts) != fields:
            raise CheckpointError(f"{path}:{number}: expected {fields} fields, got {line!r}")
        rows.append(parts)
    if len(rows) != count:
        raise CheckpointError(f"{path}: {count} entries announced, {len(rows)} present")
    return rows


def read_offsets(path: Path) -> dict[tuple[str, int], int]:
    """A `topic partition offset` checkpoint as {(topic, partition): offset}."""
    return {(t, p): o for t, p, o in _numbers(path, read_checkpoint(path, 3), {1: INT_MAX, 2: LONG_MAX})}


def read_pairs(path: Path) -> list[tuple[int, int]]:
    """A checkpoint of two numbers per line (`epoch startOffset`)."""
    return [(a, b) for a, b in _numbers(path, read_checkpoint(path, 2), {0: INT_MAX, 1: LONG_MAX})]


def _numbers(path: Path, rows: list[list[str]], bounds: dict[int, int]) -> list[list[Any]]:
    """Rows with the columns of `bounds` (column -> largest value) as non-negative integers, as
    Kafka's checkpoint readers parse them (Integer.parseInt for partitions and epochs,
    Long.parseLong for offsets: up to 2**63 - 1, 19 digits); CheckpointError otherwise."""
    out: list[list[Any]] = []
    for number, row in enumerate(rows, start=3):
        converted: list[Any] = list(row)
        for column, most in bounds.items():
            value = _integer(row[column], most)
            if value is None:
                raise CheckpointError(f"{path}:{number}: {row[column]!r} is not an offset or epoch "
                                      f"(an integer from 0 to {most})")
            converted[column] = value
        out.append(converted)
    return out


def _integer(text: str, most: int) -> int | None:
    """`text` as an integer in [0, most], or None. Leading zeros are fine (Java's parsers take
    them); the digit count is checked before converting, so a huge line costs nothing."""
    if not (text.isascii() and text.isdigit()) or len(text.lstrip("0")) > len(str(most)):
        return None
    value = int(text)
    return value if value <= most else None


def write_offsets(path: Path, offsets: dict[tuple[str, int], int]) -> None:
    write_checkpoint(path, ((t, p, o) for (t, p), o in sorted(offsets.items())))
