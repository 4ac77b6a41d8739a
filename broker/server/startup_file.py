"""Read a file a broker keeps in its data dir and needs at start (its ACLs, its users).

Such a file is read whole, bounded (anyone with access to the data dir may put something else at
its path: see ``broker/small_file.py``), and a file that cannot be read stops the start, naming
it: a broker that lost its ACLs or its users must not serve as if it had none.
"""

from __future__ import annotations

from pathlib import Path

from broker.config import StartupError
from broker.small_file import UnusableFile, read_small_file

__all__ = ["MAX_STARTUP_FILE_BYTES", "read_startup_file"]

MAX_STARTUP_FILE_BYTES = 64 * 1024 * 1024  # far beyond any real set of ACLs or users


def read_startup_file(path: Path, what: str) -> bytes | None:
    """The file's bytes; None when there is none yet. Raises StartupError saying why it cannot be read."""
    try:
        return read_small_file(path, MAX_STARTUP_FILE_BYTES)
    except FileNotFoundError:
        return None
    except (OSError, UnusableFile) as exc:
        raise StartupError(f"cannot read the {what} in {path}: {exc}") from None
