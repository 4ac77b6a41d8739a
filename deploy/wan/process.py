"""One ``causeway wan`` emulator process, started and stopped from plain (blocking) code: the one
way tests and benchmarks run an emulator of their own.

It serves the Toxiproxy HTTP API on `listen` (port 0 by default: a free one) and counts as
started once it prints its ready line (`causeway wan ready: http://HOST:PORT`), which names the
address it bound. Its stderr (the log) goes to `log_path` when one is given, else nowhere.

The launcher runs the emulator through `deploy.supervisor` instead (restarted, links and all,
when it dies); it builds the same command (`wan_command`) and waits for the same line (`READY`).
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO

from deploy.broker_process import read_ready_line, stop_process
from deploy.supervisor import log_tail

__all__ = ["READY", "START_TIMEOUT_S", "WanProcess", "wan_command"]

READY = re.compile(r"^causeway wan ready: http://(\S+)$")  # group 1: the API's HOST:PORT
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
_REPO = Path(__file__).resolve().parents[2]  # the emulator runs as `python -m deploy.cli` from here


def wan_command(listen: str = "127.0.0.1:0", *, request_timeout_s: float | None = None,
                max_connections: int | None = None) -> list[str]:
    """The argv of `causeway wan` serving its API on `listen` (HOST:PORT); `request_timeout_s`
    overrides how long an API request may take to arrive, `max_connections` how many client
    connections a proxy serves at once (the emulator's defaults otherwise)."""
    cmd = [sys.executable, "-m", "deploy.cli", "wan", "--api", listen]
    if request_timeout_s is not None:
        cmd += ["--request-timeout", f"{request_timeout_s:g}"]
    if max_connections is not None:
        cmd += ["--max-connections-per-proxy", str(max_connections)]
    return cmd


@dataclass
class WanProcess:
    """One emulator process; `api` is the HOST:PORT of its HTTP API once started.

    As a context manager it is started on entry and stopped on exit."""

    listen: str = "127.0.0.1:0"
    request_timeout_s: float | None = None
    log_path: Path | None = None
    max_connections: int | None = None
    proc: subprocess.Popen[str] | None = None
    api: str = ""

    def start(self) -> WanProcess:
        """Start the emulator and return once it has printed its ready line. Raises RuntimeError,
        with the log's last lines, when it exits or stays silent instead."""
        cmd = wan_command(self.listen, request_timeout_s=self.request_timeout_s, max_connections=self.max_connections)
        with self._log() as log:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, cwd=_REPO)
        try:
            line = read_ready_line(self.proc, "WAN emulator", START_TIMEOUT_S, self.log_tail)
        except RuntimeError:
            self.proc = None  # killed or exited, and waited for
            raise
        match = READY.match(line.strip())
        if match is None:
            self.stop()
            raise RuntimeError(f"unexpected first line from the WAN emulator: {line!r}; log:\n{self.log_tail()}")
        self.api = match.group(1)
        return self

    def _log(self) -> contextlib.AbstractContextManager[IO[str] | int]:
        if self.log_path is None:
            return contextlib.nullcontext(subprocess.DEVNULL)
        return self.log_path.open("a")

    def stop(self) -> int:
        """SIGTERM and wait (SIGKILL after STOP_TIMEOUT_S). Returns the exit code."""
        proc, self.proc = self.proc, None
        return 0 if proc is None else stop_process(proc, STOP_TIMEOUT_S)

    def log_tail(self, lines: int = 40) -> str:
        return "(no log)" if self.log_path is None else log_tail(self.log_path, lines)

    def __enter__(self) -> WanProcess:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
