"""A small disk for a test: a tmpfs of fixed size mounted on a directory (needs root), unmounted
whatever happens, and a way to fill it to its last byte.

    with small_disk(tmp_path / "broker-1", size="16m") as disk:   # broker 1's data dir
        ...
        fill_to_the_last_byte(disk / "filler")                     # the next write gets ENOSPC
        (disk / "filler").unlink()                                 # room again
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["fill_to_the_last_byte", "small_disk"]


@contextmanager
def small_disk(mount: Path, *, size: str = "8m") -> Iterator[Path]:
    """Mount a tmpfs of ``size`` on ``mount`` (created); unmounted on the way out (lazily if
    something still holds it). Raises RuntimeError, saying why, when not root."""
    if os.geteuid() != 0:
        raise RuntimeError("mounting a tmpfs needs root: run this test as root")
    mount.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        if subprocess.run(["umount", str(mount)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(mount)], check=False)


def fill_to_the_last_byte(path: Path) -> None:
    """Take whatever space is left on the disk holding ``path`` (a large write may fail where a
    small one would still fit: smaller and smaller ones follow until a byte does not fit)."""
    with open(path, "wb", buffering=0) as f:
        for size in (1 << 16, 1 << 12, 1 << 8, 1):
            while True:
                try:
                    if f.write(b"\0" * size) != size:
                        break
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    break
