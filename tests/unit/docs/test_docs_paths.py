"""The manual names only paths that exist, and its code map names every module that exists.

The manual (docs/), README.md and the code map (docs/development/code-map.md) name repository
paths in backticks (`broker/storage/log.py`, `examples/two-dc.yaml`, `make peers` aside). A file
moved or renamed without its docs would leave them pointing nowhere; this test fails then, naming
the page, the line and the path. The other way round, a module added without a line in the code
map fails too, so the map cannot fall behind the code again.
"""

from __future__ import annotations

import glob
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs"
CODE_MAP = DOCS / "development" / "code-map.md"

# Top-level folders and files a backticked token must start with to be taken as a repository path
# (so `data/<cluster>/` or `mirrors/<name>.yaml`, paths in a state dir, are not).
TOP_DIRS = ("broker", "mirror", "topology", "security", "deploy", "pipeline", "bench", "examples", "docs", "tests",
            "tools")
TOP_FILES = ("Makefile", "README.md", "BENCHMARKS.md", "pyproject.toml", "constraints.txt", "mkdocs.yml",
             ".gitignore")
# The packages whose every module the code map must name, and helpers tests share.
MAPPED_ROOTS = ("broker", "mirror", "topology", "security", "deploy", "pipeline", "tools", "bench", "tests/support")

_CODE_SPAN = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_PATH = re.compile(rf"^(?:(?:{'|'.join(TOP_DIRS)})/[\w./*-]*|{'|'.join(re.escape(f) for f in TOP_FILES)})$")


def _pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md")) + [ROOT / "README.md"]


def _named_paths(text: str) -> list[tuple[int, str]]:
    """(line number, path) for every backticked token that is a repository path."""
    found = []
    in_fence = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        for token in _CODE_SPAN.findall(line):
            token = token.split("::")[0].rstrip(".,:;")
            if _PATH.match(token):
                found.append((number, token))
    return found


def _exists(path: str) -> bool:
    if any(c in path for c in "*?["):
        return bool(glob.glob(str(ROOT / path)))
    return (ROOT / path).exists()


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_a_page_names_exists(page: Path) -> None:
    missing = [f"{page.relative_to(ROOT)}:{n}: {p}" for n, p in _named_paths(page.read_text()) if not _exists(p)]
    assert not missing, "paths named in the docs that do not exist:\n" + "\n".join(missing)


def test_the_readme_links_only_to_pages_that_exist() -> None:
    """README.md is read on its own (not built by MkDocs), so its relative links are checked here."""
    readme = ROOT / "README.md"
    missing = []
    for target in _LINK.findall(readme.read_text()):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        if not (ROOT / target.split("#")[0]).exists():
            missing.append(target)
    assert not missing, f"README.md links to missing files: {missing}"


def _code_map_sections() -> dict[str, list[str]]:
    """`### `dir/`` heading -> the module names listed under it (`- `name.py`: ...`)."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in CODE_MAP.read_text().splitlines():
        heading = re.match(r"^### `([^`]+)/`\s*$", line)
        if heading:
            current = sections.setdefault(heading.group(1), [])
            continue
        item = re.match(r"^- `([^`/]+)`", line)
        if item and current is not None:
            current.append(item.group(1))
        elif line.startswith("#"):
            current = None
    return sections


def _modules() -> set[str]:
    """Every Python module under the mapped roots, but empty `__init__.py` files."""
    out = set()
    for root in MAPPED_ROOTS:
        for path in (ROOT / root).rglob("*.py"):
            if "__pycache__" in path.parts:
                continue
            if path.name == "__init__.py" and not path.read_text().strip().startswith(('"""', "'''")):
                continue
            out.add(str(path.relative_to(ROOT)))
    return out


def test_every_module_the_code_map_lists_exists() -> None:
    listed = {f"{d}/{name}" for d, names in _code_map_sections().items() for name in names}
    missing = sorted(p for p in listed if not (ROOT / p).exists())
    assert not missing, f"the code map lists modules that do not exist: {missing}"


def test_the_code_map_lists_every_module() -> None:
    listed = {f"{d}/{name}" for d, names in _code_map_sections().items() for name in names}
    unlisted = sorted(_modules() - listed)
    assert not unlisted, ("modules missing from docs/development/code-map.md (add a line under their folder's "
                          f"heading): {unlisted}")


def test_the_code_map_table_names_only_files_in_its_folders() -> None:
    """A table row `| `dir/` | ... (`x.py`) ... |` names files somewhere under dir."""
    missing = []
    for line in CODE_MAP.read_text().splitlines():
        row = re.match(r"^\| `([\w/]+)/` \|(.*)\|$", line)
        if not row:
            continue
        folder = ROOT / row.group(1)
        for token in _CODE_SPAN.findall(row.group(2)):
            if re.fullmatch(r"[\w-]+\.(py|txt|json)", token) and not any(folder.rglob(token)):
                missing.append(f"{row.group(1)}/: {token}")
    assert not missing, f"the code map's table names files its folders do not hold: {missing}"


def test_the_checks_see_paths() -> None:
    """The path pattern takes what the docs write and leaves what is not a repository path."""
    text = "`broker/storage/log.py`, `tests/compat/test_x.py::test_y`, `mirrors/<name>.yaml`, `log.dirs`, `Makefile`"
    assert [p for _, p in _named_paths(text)] == ["broker/storage/log.py", "tests/compat/test_x.py", "Makefile"]
