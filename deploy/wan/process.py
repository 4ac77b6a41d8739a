"""One ``causeway wan`` emulator process, started and stopped from plain (blocking) code: the one
way tests and benchmarks run an emulator of their own.

It serves the Toxiproxy HTTP API on `listen` (port 0 by default: a free one) and counts as
started once it prints its ready line (`causeway wan ready: http://HOST:PORT`), which names the
address it bound. Its stderr (the log) goes to `log_path` when one is given, else nowhere.

The launcher runs the emulator through `deploy.supervisor` instead (restarted, links and all,
when it dies); it builds the same command (`wan_command`) and waits for the same line (`READY`).
Both start the process through `deploy.child_process`.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import ClassVar

from deploy.child_process import NO_LOG, ChildFailed, ChildOwner, ChildProcess, log_tail

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
class WanProcess(ChildOwner):
    """One emulator process; `api` is the HOST:PORT of its HTTP API once started.

    As a context manager it is started on entry and stopped on exit."""

    listen: str = "127.0.0.1:0"
    request_timeout_s: float | None = None
    log_path: Path | None = None
    max_connections: int | None = None
    proc: ChildProcess | None = None
    api: str = ""
    stop_timeout_s: ClassVar[float] = STOP_TIMEOUT_S

    def start(self) -> WanProcess:
        """Start the emulator and return once it has printed its ready line. Raises ChildFailed
        (a RuntimeError), with the log's last lines, when it exits or stays silent instead."""
        cmd = wan_command(self.listen, request_timeout_s=self.request_timeout_s, max_connections=self.max_connections)
        self.proc = proc = ChildProcess.start("WAN emulator", cmd, log_path=self.log_path, cwd=_REPO)
        try:
            line = proc.read_ready_line(START_TIMEOUT_S)
        except ChildFailed:
            self.proc = None  # killed or exited, and waited for
            raise
        match = READY.match(line.strip())
        if match is None:
            self.stop()
            raise ChildFailed(f"unexpected first line from the WAN emulator: {line!r}; log:\n{self.log_tail()}")
        self.api = match.group(1)
        return self

    def log_tail(self, lines: int = 40) -> str:
        return NO_LOG if self.log_path is None else log_tail(self.log_path, lines)

    def __enter__(self) -> WanProcess:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
