"""Imports between the mirror's modules go one way: the driver imports the modes, the modes the
runtime, the runtime the helpers; never back, and no circle, counting imports inside functions
and under TYPE_CHECKING (read from the source, so nothing is imported to find them)."""

from __future__ import annotations

import ast
from pathlib import Path

import mirror

MIRROR = Path(mirror.__file__).parent
MODES = {"mirror.mm2", "mirror.link"}


def imports() -> dict[str, set[str]]:
    """Each mirror module and the mirror modules it imports, anywhere in its source."""
    graph: dict[str, set[str]] = {}
    for path in sorted(MIRROR.glob("*.py")):
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
                if node.module == "mirror":
                    found |= {f"mirror.{alias.name}" for alias in node.names}
                elif node.module.startswith("mirror."):
                    found.add(node.module)
            elif isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names if alias.name.startswith("mirror.")}
        graph[f"mirror.{path.stem}"] = found
    return graph


def test_no_mirror_module_imports_one_that_imports_it_back() -> None:
    graph = imports()
    circles: list[list[str]] = []
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        for imported in sorted(graph.get(module, ())):
            if imported in path:
                circles.append([*path[path.index(imported):], imported])
            elif imported not in done:
                visit(imported, [*path, imported])
        done.add(module)

    for module in sorted(graph):
        visit(module, [module])
    assert circles == []


def test_the_driver_imports_the_modes_and_the_runtime_imports_neither() -> None:
    graph = imports()
    assert MODES <= graph["mirror.driver"]
    assert [m for m, imported in graph.items() if "mirror.driver" in imported] == []
    runtime_and_below = {m for m in graph if m not in MODES | {"mirror.driver"}}
    assert {m: sorted(graph[m] & (MODES | {"mirror.driver"})) for m in sorted(runtime_and_below)
            if graph[m] & (MODES | {"mirror.driver"})} == {}
    assert "mirror.link" not in graph["mirror.mm2"] and "mirror.mm2" not in graph["mirror.link"]
