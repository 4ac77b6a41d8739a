"""The shape of the code, read from its AST: what a module may take from another.

A name with a leading underscore is private to its module: the module may change it without
looking further. So no module (package code or test) imports another module's `_private` name or
reaches it as an attribute of an imported module; a helper worth sharing or testing on its own gets
a public name instead. This test names the file and line of every such use.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Every top-level package of the repository (a folder with an __init__.py).
PACKAGES = tuple(sorted(p.parent.name for p in ROOT.glob("*/__init__.py")))

# Uses waiting for the helper that owns the file (this session's issue 20 step), as
# (file, private name): remove an entry when its use is gone.
WAITING: dict[tuple[str, str], str] = {
    ("broker/controller/zk/reassignment.py", "broker.controller.zk.controller._Partition"):
        "the controller-context helper",
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _is_ours(module: str) -> bool:
    return module.split(".")[0] in PACKAGES


def _absolute(node: ast.ImportFrom, me: str, is_package: bool) -> str:
    """The module an import names, with a relative import resolved against `me`."""
    if not node.level:
        return node.module or ""
    base = me.split(".")
    base = base[: len(base) - node.level + (1 if is_package else 0)]
    return ".".join([*base, *([node.module] if node.module else [])])


def private_uses(source: str, me: str, is_package: bool = False) -> Iterator[tuple[int, str]]:
    """(line, "module.name") for each use, in the source of module `me`, of another project
    module's private name: `from X import _name`, and `X._name` (or `X.y._name`) where X was bound
    by an import."""
    tree = ast.parse(source, me)
    bound: dict[str, str] = {}  # local name -> the module or object an import bound it to
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _is_ours(alias.name):
                    local = alias.asname or alias.name.split(".")[0]
                    bound[local] = alias.name if alias.asname else local
        elif isinstance(node, ast.ImportFrom):
            origin = _absolute(node, me, is_package)
            if not _is_ours(origin):
                continue
            for alias in node.names:
                if _is_private(alias.name):
                    if origin != me:
                        yield node.lineno, f"{origin}.{alias.name}"
                else:
                    bound[alias.asname or alias.name] = f"{origin}.{alias.name}"
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and _is_private(node.attr)):
            continue
        chain: list[str] = []
        value = node.value
        while isinstance(value, ast.Attribute):
            chain.append(value.attr)
            value = value.value
        if isinstance(value, ast.Name) and value.id in bound:
            owner = ".".join([bound[value.id], *reversed(chain)])
            if owner != me:
                yield node.lineno, f"{owner}.{node.attr}"


def _sources() -> Iterator[Path]:
    for package in PACKAGES:
        yield from sorted((ROOT / package).rglob("*.py"))


def test_no_module_uses_another_modules_private_names() -> None:
    found = []
    for path in _sources():
        relative = path.relative_to(ROOT).as_posix()
        for line, name in private_uses(path.read_text(), _module_name(path), path.name == "__init__.py"):
            if (relative, name) not in WAITING:
                found.append(f"{relative}:{line}: {name}")
    assert not found, "private names used outside their module (give them a public name):\n" + "\n".join(found)


def test_the_check_sees_each_form_of_use() -> None:
    """The walker itself, on a module written for it: both import forms and both attribute forms
    are found; the module's own private names, dunders and other libraries' names are not."""
    source = (
        "from broker.config import _ALIASES, BrokerConfig\n"
        "import broker.config\n"
        "import deploy.cli as cli\n"
        "from broker import config\n"
        "from trio import _core\n"
        "from tests.unit.probe import _mine\n"
        "from . import _sibling\n"
        "broker.config._IGNORED\n"
        "cli._COMMANDS\n"
        "config.x._deep\n"
        "BrokerConfig.__name__\n"
        "_core._run\n"
    )
    assert sorted(private_uses(source, "tests.unit.probe")) == [
        (1, "broker.config._ALIASES"), (7, "tests.unit._sibling"), (8, "broker.config._IGNORED"),
        (9, "deploy.cli._COMMANDS"), (10, "broker.config.x._deep")]
