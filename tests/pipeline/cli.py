"""`causeway pipeline ...` as a user runs it: a process of its own, from the repository."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

__all__ = ["REPO", "causeway_pipeline"]

REPO = Path(__file__).resolve().parents[2]


def causeway_pipeline(*argv: str, env: Mapping[str, str] | None = None,
                      timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    """`causeway pipeline ARGV` in a process group of its own, with `env` added to ours; the whole
    group (the Spark JVM it started, should it outlive it) is gone when this returns."""
    proc = subprocess.Popen([sys.executable, "-m", "deploy.cli", "pipeline", *argv], cwd=REPO,
                            env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
