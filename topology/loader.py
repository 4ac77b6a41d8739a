"""Read a topology file into plain data, remembering where in the file every key and item is.

PyYAML composes the node tree (which carries line and column marks); we build the data from it
ourselves so that duplicate keys are an error (PyYAML silently keeps the last) and every key path
maps back to its position for error messages.

A topology or mirror file may come from anyone, so reading one is bounded in time and memory:
the file's size, the bytes it may hold (no NUL or other control characters), how deep it nests
and how many values it holds once its aliases are expanded (an "alias bomb" of a few hundred bytes
otherwise expands to billions of values) are all limited, and an alias to a node that contains
it (recursion) is refused. Each refusal is a Problem with file, line and key like any other.
"""

from __future__ import annotations

import re
from itertools import islice
from pathlib import Path
from typing import Any

import yaml

from broker.small_file import UnusableFile, read_small_file
from topology.errors import Problem, TopologyError, format_path

__all__ = ["MAX_DEPTH", "MAX_FILE_BYTES", "MAX_VALUES", "Positions", "load_yaml", "position_of"]

Path_ = tuple[str | int, ...]
Positions = dict[Path_, tuple[int, int]]

# Generous for hand-written files (the examples are a few KB, 6 levels deep, a few hundred values),
# small enough that the worst file stays within tens of MB and well under a second.
MAX_FILE_BYTES = 1 << 20
MAX_DEPTH = 64
MAX_VALUES = 50_000  # every key, value and item, each alias counted as all it expands to
MAX_REPORTED_CHARACTERS = 10

# What YAML 1.1 (and PyYAML's reader) refuses: everything but tab, newlines and printable text.
_NOT_PRINTABLE = re.compile("[^\x09\x0a\x0d\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


class _Refused(Exception):
    def __init__(self, problem: Problem) -> None:
        super().__init__(str(problem))
        self.problem = problem


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader whose composer counts as it goes: nesting depth, values with aliases expanded,
    and aliases to a node still being composed (recursion), and tracks the key path for messages.
    The composer recurses once per level, so the depth bound also keeps it off Python's stack
    limit."""

    def __init__(self, text: str, file: str) -> None:
        super().__init__(text)
        self.file = file
        self.path: list[str | int] = []
        self.values = 0
        self.sizes: dict[int, int] = {}  # id(node) -> values it expands to, once composed
        self.open_counts: list[int] = []  # values so far in each node being composed

    def _refuse(self, mark: Any, message: str) -> _Refused:
        line, column = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        path = tuple(self.path)
        shown = format_path(path) if len(path) <= 8 else f"{format_path(path[:6])}...({len(path)} levels)"
        return _Refused(Problem(self.file, line, column, shown, message))

    def _count(self, n: int, mark: Any) -> None:
        self.values += n
        if self.open_counts:
            self.open_counts[-1] += n
        if self.values > MAX_VALUES:
            raise self._refuse(mark, f"more than {MAX_VALUES} values (aliases counted as what they expand "
                                     f"to): an alias bomb, or not a hand-written file")

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        # `index` is the key node for a mapping's value, the position for a sequence item, and
        # None for a mapping's key (which adds nothing to the path).
        step: str | int | None = None
        if isinstance(index, yaml.ScalarNode):
            step = str(index.value)
        elif isinstance(index, int):
            step = index
        elif isinstance(index, yaml.Node):
            step = "(complex key)"
        if step is not None:
            self.path.append(step)
        try:
            return self._compose_counted(parent, index)
        finally:
            if step is not None:
                self.path.pop()

    def _compose_counted(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event: Any = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent):
            target = self.anchors.get(event.anchor)
            if target is not None:
                size = self.sizes.get(id(target))
                if size is None:
                    raise self._refuse(event.start_mark, f"alias *{event.anchor} refers to a node that contains "
                                                         f"it (recursive alias)")
                self._count(size, event.start_mark)
            return super().compose_node(parent, index)
        if len(self.open_counts) >= MAX_DEPTH:
            raise self._refuse(event.start_mark, f"nested more than {MAX_DEPTH} levels deep")
        self.open_counts.append(0)
        self._count(1, event.start_mark)
        try:
            node = super().compose_node(parent, index)
        finally:
            size = self.open_counts.pop()
        if self.open_counts:
            self.open_counts[-1] += size
        self.sizes[id(node)] = size
        return node


def load_yaml(path: Path) -> tuple[Any, Positions]:
    """The file's data and the (line, column) of every key path (1-based).

    Raises TopologyError for unreadable, oversized or binary files, YAML syntax errors, duplicate
    keys, values that do not construct, and files past the bounds above.
    """
    name = str(path)
    text = _read_text(path, name)
    bad = [m.start() for m in islice(_NOT_PRINTABLE.finditer(text), MAX_REPORTED_CHARACTERS + 1)]
    if bad:
        # Blank the characters out so the rest can still be read for the key each one sits under.
        text = _NOT_PRINTABLE.sub(" ", text)
    loader = _BoundedLoader(text, name)
    try:
        node = loader.get_single_node()
    except _Refused as exc:
        raise TopologyError([exc.problem, *_character_problems(text, bad, name, {})]) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, column = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        raise TopologyError([Problem(name, line, column, "(syntax)", f"YAML syntax error: {exc.problem}"),
                             *_character_problems(text, bad, name, {})]) from None
    except yaml.YAMLError as exc:
        raise TopologyError([Problem(name, 1, 1, "(syntax)", f"YAML error: {exc}")]) from None
    finally:
        loader.dispose()
    if node is None:
        raise TopologyError([Problem(name, 1, 1, "(top level)", "the file is empty"),
                             *_character_problems(text, bad, name, {})])
    positions: Positions = {(): (node.start_mark.line + 1, node.start_mark.column + 1)}
    problems: list[Problem] = []
    data = _build(loader, node, (), positions, problems, name)
    problems.extend(_character_problems(text, bad, name, positions))
    if problems:
        raise TopologyError(problems)
    return data, positions


def _read_text(path: Path, name: str) -> str:
    try:
        raw = read_small_file(path, MAX_FILE_BYTES)  # bounded, and never blocks on a FIFO
    except UnusableFile as exc:
        raise TopologyError([Problem(name, 1, 1, "(file)", f"{exc}: not a hand-written topology or mirror "
                                                           f"file")]) from None
    except OSError as exc:
        raise TopologyError([Problem(name, 1, 1, "(file)", f"cannot read: {exc}")]) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line, column = _line_column(raw, exc.start)
        raise TopologyError([Problem(name, line, column, "(file)",
                                     f"not UTF-8 text (byte 0x{raw[exc.start]:02x}): a binary file?")]) from None


def _line_column(text: str | bytes, offset: int) -> tuple[int, int]:
    newline = "\n" if isinstance(text, str) else b"\n"
    line_start = text.rfind(newline, 0, offset) + 1  # type: ignore[arg-type]
    return text.count(newline, 0, offset) + 1, offset - line_start + 1  # type: ignore[arg-type]


def _character_problems(text: str, offsets: list[int], name: str, positions: Positions) -> list[Problem]:
    """One Problem per control character, under the last key that starts before it."""
    problems = []
    for offset in offsets[:MAX_REPORTED_CHARACTERS]:
        line, column = _line_column(text, offset)
        before = [(pos, len(path), path) for path, pos in positions.items() if pos <= (line, column)]
        path = max(before, key=lambda b: b[:2])[2] if before else ("(file)",)
        problems.append(Problem(name, line, column, format_path(path),
                                "control character (NUL or another byte below 0x20) in the text: "
                                "not a hand-written file"))
    if len(offsets) > MAX_REPORTED_CHARACTERS:
        line, column = _line_column(text, offsets[-1])
        problems.append(Problem(name, line, column, "(file)", "and more control characters"))
    return problems


def _build(loader: yaml.SafeLoader, node: yaml.Node, path: Path_, positions: Positions,
           problems: list[Problem], name: str) -> Any:
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            line, column = key_node.start_mark.line + 1, key_node.start_mark.column + 1
            key = _scalar(loader, key_node, path, problems, name) if isinstance(key_node, yaml.ScalarNode) else None
            if not isinstance(key, str | int) or isinstance(key, bool):
                shown = key if isinstance(key_node, yaml.ScalarNode) else f"<a {key_node.id}>"
                problems.append(Problem(name, line, column, format_path(path), f"key {shown!r} must be a name"))
                continue
            key = str(key)
            if key in out:
                first = positions[(*path, key)]
                problems.append(Problem(name, line, column, format_path((*path, key)),
                                        f"duplicate key (first at line {first[0]})"))
                continue
            positions[(*path, key)] = (line, column)
            out[key] = _build(loader, value_node, (*path, key), positions, problems, name)
        return out
    if isinstance(node, yaml.SequenceNode):
        items = []
        for i, item in enumerate(node.value):
            positions[(*path, i)] = (item.start_mark.line + 1, item.start_mark.column + 1)
            items.append(_build(loader, item, (*path, i), positions, problems, name))
        return items
    return _scalar(loader, node, path, problems, name)


def _scalar(loader: yaml.SafeLoader, node: yaml.Node, path: Path_, problems: list[Problem], name: str) -> Any:
    """The scalar's value; a value its tag cannot make (`2001-13-45` read as a date, `!!int zz`,
    an unknown tag) is a Problem, not a traceback."""
    try:
        return loader.construct_object(node, deep=True)
    except (yaml.YAMLError, ValueError, TypeError, OverflowError) as exc:
        detail = exc.problem if isinstance(exc, yaml.MarkedYAMLError) and exc.problem else str(exc)
        problems.append(Problem(name, node.start_mark.line + 1, node.start_mark.column + 1, format_path(path),
                                f"cannot read the value {str(node.value)[:40]!r}: {detail}"))
        return None


def position_of(positions: Positions, path: Path_) -> tuple[int, int]:
    """The position of `path`, or of its nearest ancestor that the file spells out."""
    while path not in positions:
        path = path[:-1]
    return positions[path]
