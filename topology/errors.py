"""Problems found in a topology file, each named by file, line, column and key path."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Problem", "TopologyError", "format_path"]


def format_path(path: tuple[str | int, ...]) -> str:
    """('mirrors', 'm1', 'source') -> 'mirrors.m1.source'; list indexes as [i]."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


@dataclass(frozen=True, order=True)
class Problem:
    file: str
    line: int
    column: int
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}: {self.path}: {self.message}"


class TopologyError(Exception):
    """Every problem of a topology file, in file order."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = sorted(problems)
        super().__init__("\n".join(str(p) for p in self.problems))
