"""The shape of the code, read from its AST: what a module may take from another.

Data flows one way between the packages (DESIGN.md, "Layout"). A room is a top-level package's own
modules (`broker`, `deploy`, ...) or one of its sub-packages (`broker.storage`, `deploy.wan`, ...).
Every import between rooms, including imports inside functions and under `TYPE_CHECKING` (a
circle hidden from the interpreter is still a circle for the reader), must be listed for its room
in `ALLOWED`. The table itself has no circle, so the code cannot have one either; a new room must
be placed in it before it can import anything.

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


# The broker, bottom up: the codec and the small shared modules (config, retry, address, ...), then
# storage, the cluster metadata, replication, the coordinators, and the server that wires them.
_BROKER_BASE = {"broker", "broker.protocol"}
_BROKER_ALL = _BROKER_BASE | {
    "broker.storage",
    "broker.client",
    "broker.controller",
    "broker.replication",
    "broker.coordinator",
    "broker.server",
}

ALLOWED: dict[str, set[str]] = {
    "broker.protocol": set(),
    "broker": {"broker.protocol"},
    "broker.storage": _BROKER_BASE,
    "broker.client": _BROKER_BASE | {"security"},
    # security/: the ACLs of the znodes a broker creates (zookeeper.set.acl), shared with the launcher.
    "broker.controller": _BROKER_BASE | {"broker.storage", "broker.client", "security"},
    "broker.replication": _BROKER_BASE | {"broker.storage", "broker.client", "broker.controller"},
    "broker.coordinator": _BROKER_BASE | {"broker.storage", "broker.controller", "broker.replication"},
    # The server wires everything, TLS and (later) SASL and ACLs from security/ among it.
    "broker.server": (_BROKER_ALL - {"broker.server"}) | {"security"},
    # The line-aware YAML loader and its error type serve the mirror's own config file too.
    "topology": _BROKER_BASE,
    "security": _BROKER_BASE,
    "mirror": _BROKER_BASE | {"broker.client", "topology", "security"},
    "pipeline": _BROKER_BASE | {"broker.client", "mirror", "security"},
    # deploy runs everything; its shared modules (process handles, the raw Kafka socket) sit
    # under its sub-packages.
    "deploy": _BROKER_BASE | {"broker.client"},
    "deploy.zookeeper": _BROKER_BASE | {"deploy"},
    # The Grafana dashboards are PromQL in code: nothing of the project's is imported.
    "deploy.dashboards": set(),
    "deploy.wan": _BROKER_BASE | {"deploy"},
    "deploy.fuzz": _BROKER_ALL | {"deploy"},
    # The launcher makes a secured cluster's certificates, SCRAM credentials and ACLs.
    "deploy.launcher": _BROKER_BASE
    | {"broker.client", "topology", "mirror", "security", "deploy", "deploy.wan", "deploy.zookeeper"},
    "deploy.chaos": _BROKER_BASE
    | {"broker.client", "mirror", "deploy", "deploy.wan", "deploy.zookeeper", "deploy.launcher"},
    # A drill drives a running topology from outside as a user would: clients, the launcher's
    # state (pids, the emulator's API) and the mirror's promotion.
    "deploy.drill": _BROKER_BASE | {"broker.client", "mirror", "deploy", "deploy.wan", "deploy.launcher"},
    "deploy.cli": _BROKER_ALL
    | {"topology", "mirror", "pipeline", "security"}
    | {"deploy", "deploy.wan", "deploy.zookeeper", "deploy.launcher", "deploy.chaos", "deploy.fuzz", "deploy.drill"},
    # The benchmarks drive the product from outside, as the tests do: they may start it through
    # deploy's process handles. The Kafka peers they run beside Causeway are their own room below.
    "bench.peers": _BROKER_BASE | {"broker.client", "deploy", "deploy.launcher", "deploy.wan"},
    "bench": _BROKER_ALL | {"security"}
    | {"mirror", "pipeline", "topology", "bench.peers"}
    | {"deploy", "deploy.cli", "deploy.launcher", "deploy.wan", "deploy.zookeeper", "deploy.drill"},
    "tools": set(),
    "tools.causeway_protocol": set(),
}


# The product's packages (tests and the like import freely from them; they are not rooms).
PRODUCT = ("broker", "mirror", "topology", "security", "deploy", "pipeline", "bench", "tools")


def room_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) >= 2 and (ROOT / parts[0] / parts[1]).is_dir():
        return ".".join(parts[:2])
    return parts[0]


def _is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.is_dir() or path.with_suffix(".py").is_file()


def imported_modules(source: str, me: str, is_package: bool = False) -> Iterator[tuple[int, str]]:
    """(line, module) for every import in the source of module `me`, wherever it stands."""
    for node in ast.walk(ast.parse(source, me)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            origin = _absolute(node, me, is_package)
            for alias in node.names:
                # `from broker import server` imports the sub-package, not the package's own modules.
                name = f"{origin}.{alias.name}"
                yield node.lineno, name if _is_module(name) else origin


def test_every_import_between_rooms_is_one_the_table_allows() -> None:
    wrong: list[str] = []
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            me = _module_name(path)
            here = room_of(me)
            for line, imported in imported_modules(path.read_text(), me, path.name == "__init__.py"):
                if imported.split(".")[0] not in PRODUCT:
                    continue
                there = room_of(imported)
                if there != here and there not in ALLOWED.get(here, set()):
                    wrong.append(f"{path.relative_to(ROOT)}:{line}: {here} imports {imported} ({there})")
    assert not wrong, "imports against the direction of the table:\n" + "\n".join(wrong)


def test_every_room_in_the_tree_has_a_row() -> None:
    rooms = {room_of(_module_name(path)) for package in PRODUCT for path in (ROOT / package).rglob("*.py")}
    assert rooms - ALLOWED.keys() == set()


def test_the_table_has_no_circle() -> None:
    def visit(room: str, path: tuple[str, ...]) -> None:
        assert room not in path, "circle: " + " -> ".join([*path[path.index(room):], room])
        for lower in ALLOWED.get(room, set()):
            visit(lower, (*path, room))

    for room in ALLOWED:
        visit(room, ())


def test_imports_are_found_inside_functions_and_relative() -> None:
    source = (
        "from broker.storage import Log\n"
        "def f():\n    from broker.server import context\n"
        "from . import znodes\n"
        "from ..base import Controller\n"
        "from broker import server\n"
    )
    assert list(imported_modules(source, "broker.controller.zk.probe")) == [
        (1, "broker.storage"), (4, "broker.controller.zk.znodes"), (5, "broker.controller.base"),
        (6, "broker.server"), (3, "broker.server.context")]
