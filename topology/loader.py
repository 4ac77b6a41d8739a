"""Read a topology file into plain data, remembering where in the file every key and item is.

PyYAML composes the node tree (which carries line and column marks); we build the data from it
ourselves so that duplicate keys are an error (PyYAML silently keeps the last) and every key path
maps back to its position for error messages.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from topology.errors import Problem, TopologyError, format_path

__all__ = ["Positions", "load_yaml"]

Path_ = tuple[str | int, ...]
Positions = dict[Path_, tuple[int, int]]


def load_yaml(path: Path) -> tuple[Any, Positions]:
    """The file's data and the (line, column) of every key path (1-based).

    Raises TopologyError for unreadable files, YAML syntax errors and duplicate keys.
    """
    name = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TopologyError([Problem(name, 1, 1, "(file)", f"cannot read: {exc}")]) from None
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, column = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        raise TopologyError([Problem(name, line, column, "(syntax)", f"YAML syntax error: {exc.problem}")]) from None
    except yaml.YAMLError as exc:
        raise TopologyError([Problem(name, 1, 1, "(syntax)", f"YAML error: {exc}")]) from None
    finally:
        loader.dispose()
    if node is None:
        raise TopologyError([Problem(name, 1, 1, "(top level)", "the file is empty")])
    positions: Positions = {(): (node.start_mark.line + 1, node.start_mark.column + 1)}
    problems: list[Problem] = []
    data = _build(loader, node, (), positions, problems, name)
    if problems:
        raise TopologyError(problems)
    return data, positions


def _build(loader: yaml.SafeLoader, node: yaml.Node, path: Path_, positions: Positions,
           problems: list[Problem], name: str) -> Any:
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            line, column = key_node.start_mark.line + 1, key_node.start_mark.column + 1
            if not isinstance(key, str | int) or isinstance(key, bool):
                problems.append(Problem(name, line, column, format_path(path), f"key {key!r} must be a name"))
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
    return loader.construct_object(node, deep=True)


def position_of(positions: Positions, path: Path_) -> tuple[int, int]:
    """The position of `path`, or of its nearest ancestor that the file spells out."""
    while path not in positions:
        path = path[:-1]
    return positions[path]
