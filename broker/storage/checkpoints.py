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
    return {(t, p): o for t, p, o in _numbers(path, read_checkpoint(path, 3), 1)}


def read_pairs(path: Path) -> list[tuple[int, int]]:
    """A checkpoint of two numbers per line (`epoch startOffset`)."""
    return [(a, b) for a, b in _numbers(path, read_checkpoint(path, 2), 0)]


def _numbers(path: Path, rows: list[list[str]], first: int) -> list[list[Any]]:
    """Rows with columns from `first` on as non-negative integers; CheckpointError otherwise."""
    out: list[list[Any]] = []
    for number, row in enumerate(rows, start=3):
        converted: list[Any] = row[:first]
        for text in row[first:]:
            if not (text.isascii() and text.isdigit()) or len(text) > 18:
                raise CheckpointError(f"{path}:{number}: {text!r} is not an offset or epoch")
            converted.append(int(text))
        out.append(converted)
    return out


def write_offsets(path: Path, offsets: dict[tuple[str, int], int]) -> None:
    write_checkpoint(path, ((t, p, o) for (t, p), o in sorted(offsets.items())))
