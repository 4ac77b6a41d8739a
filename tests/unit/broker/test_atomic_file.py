"""broker.atomic_file: a replaced file is whole, and a secret is never readable by others."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from broker.atomic_file import write_atomically


def test_the_new_content_replaces_the_old_and_no_temporary_file_stays(tmp_path: Path) -> None:
    path = tmp_path / "state"
    write_atomically(path, "one")
    write_atomically(path, b"two")
    assert path.read_text() == "two"
    assert [p.name for p in tmp_path.iterdir()] == ["state"]


def test_a_secret_gets_its_mode_even_over_a_looser_leftover_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "client.key"
    leftover = tmp_path / "client.key.tmp"
    leftover.write_text("crashed half-way")
    os.chmod(leftover, 0o644)
    write_atomically(path, "secret", mode=0o600)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == "secret"


def test_the_default_mode_follows_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        write_atomically(tmp_path / "status", "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "status").stat().st_mode) == 0o640
