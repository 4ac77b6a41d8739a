"""Where a job writes its results, checked before Spark starts.

A job that cannot write its output when its work is done (an export's directory, an audit's
JSON report or Parquet history, a lag chart) should say so before it starts Spark and reads
the clusters, in one line, not end in a Python traceback minutes later.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from pipeline.options import PipelineError

__all__ = ["check_writable"]


def check_writable(path: Path, what: str, *, directory: bool) -> None:
    """Raise PipelineError (`what path: why`) unless a job can write `path`: a directory (there,
    or made with its parents) or a file (in a directory that is there; replaced if it exists).

    Tried for real: a temporary file is made and removed where `path` will be (the nearest
    directory above it that exists), so a read-only file system or missing rights say so too,
    whoever runs the job; nothing is left."""
    prefix = ""
    if directory:
        probe = path
        while not probe.exists() and probe.parent != probe:
            probe = probe.parent
        if not probe.is_dir():
            why = "it exists and is" if probe == path else f"it cannot be made: {probe} is"
            raise PipelineError(f"{what} {path}: {why} not a directory")
        if probe != path:
            prefix = f"it cannot be made in {probe}: "
    else:
        if path.is_dir():
            raise PipelineError(f"{what} {path}: it is a directory")
        probe = path.parent
        if not probe.is_dir():
            why = "does not exist" if not probe.exists() else "is not a directory"
            raise PipelineError(f"{what} {path}: {probe} {why}")
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as exc:
        raise PipelineError(f"{what} {path}: {prefix}{exc.strerror or exc}") from None
