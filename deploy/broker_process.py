"""One real ``causeway broker`` process, started and stopped from plain (blocking) code: the one
way tests, benchmarks and tools run a broker of their own.

It binds port 0 unless told otherwise and counts as started once it prints its ready line
(`causeway broker ID ready: NAME://HOST:PORT, ...`), which names the listeners it bound.
Its stderr (the log) goes to `<data dir>.log`, next to the data dir.

The launcher runs brokers through `deploy.supervisor` instead: that one forks on the trio
thread with a parent-death signal and restarts the child with backoff, which a test that
kills, restarts and measures one broker must not have happen behind its back. Both start the
process through `deploy.child_process` and read the same ready line (`READY` here).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from broker.address import format_host_port, parse_endpoint, parse_host_port
from deploy.child_process import ChildFailed, ChildOwner, ChildProcess, log_tail

__all__ = ["READY", "START_TIMEOUT_S", "BrokerProcess", "broker_command", "parse_ready_line"]

READY = re.compile(r"^causeway broker (\d+) ready: (.+)$")
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0
_REPO = Path(__file__).resolve().parents[1]  # the broker runs as `python -m deploy.cli` from here


def broker_command(data_dir: Path, *, listen: str | None = None, overrides: Sequence[str] = (),
                   topics: Sequence[str] = (), log_level: str = "info", python_args: Sequence[str] = ()) -> list[str]:
    """The argv of `causeway broker`: `listen` (HOST:PORT) unless the overrides name listeners,
    each override a KEY=VALUE config key, each topic NAME[:PARTITIONS] created at start."""
    cmd = [sys.executable, *python_args, "-m", "deploy.cli", "broker", "--data-dir", str(data_dir),
           "--log-level", log_level]
    if listen is not None:
        cmd += ["--listen", listen]
    for item in overrides:
        cmd += ["--override", item]
    for topic in topics:
        cmd += ["--topic", topic]
    return cmd


def parse_ready_line(line: str) -> dict[str, str] | None:
    """The listeners (name -> host:port, in the broker's order) of a ready line; None for
    any other line."""
    match = READY.match(line.strip())
    if match is None:
        return None
    listeners: dict[str, str] = {}
    for url in match.group(2).split(","):
        name, host, port = parse_endpoint(url.strip(), "ready line listener")
        listeners[name] = format_host_port(host, port)
    return listeners


@dataclass
class BrokerProcess(ChildOwner):
    """One broker process; `bootstrap` is host:port of its first listener."""

    data_dir: Path
    overrides: tuple[str, ...] = ()
    topics: tuple[str, ...] = ()
    python_args: tuple[str, ...] = ()  # e.g. ("-m", "cProfile", "-o", FILE) to profile the broker
    log_level: str = "info"
    env: dict[str, str] = field(default_factory=dict)  # extra environment, e.g. CAUSEWAY_CRASH_AT
    nofile: int | None = None  # RLIMIT_NOFILE (soft and hard) for the broker process, when set
    proc: ChildProcess | None = None
    bootstrap: str = ""
    stop_timeout_s: ClassVar[float] = STOP_TIMEOUT_S
    listeners: dict[str, str] = field(default_factory=dict)
    starts: int = 0

    @property
    def log_path(self) -> Path:
        return self.data_dir.with_name(self.data_dir.name + ".log")

    def start(self, *, port: int = 0) -> BrokerProcess:
        """Start the broker and return once it has printed its ready line.

        `port` re-binds a known port (a restart keeps the address clients already know).
        Raises ChildFailed (a RuntimeError), with the log's last lines, when it exits or stays
        silent instead.
        """
        names_listeners = any(item.startswith("listeners=") for item in self.overrides)
        cmd = broker_command(self.data_dir, listen=None if names_listeners else f"127.0.0.1:{port}",
                             overrides=self.overrides, topics=self.topics, log_level=self.log_level,
                             python_args=self.python_args)
        self.proc = proc = ChildProcess.start("broker", cmd, log_path=self.log_path, cwd=_REPO, env=self.env,
                                              nofile=self.nofile)
        self.starts += 1
        try:
            line = proc.read_ready_line(START_TIMEOUT_S)
        except ChildFailed:
            self.proc = None  # killed or exited, and waited for
            raise
        listeners = parse_ready_line(line)
        if listeners is None:
            self.kill()
            raise ChildFailed(f"unexpected first line from the broker: {line!r}; log:\n{self.log_tail()}")
        self.listeners = listeners
        self.bootstrap = next(iter(self.listeners.values()))
        return self

    @property
    def port(self) -> int:
        return parse_host_port(self.bootstrap)[1]

    def restart(self) -> BrokerProcess:
        port = self.port
        self.stop()
        return self.start(port=port)

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.log_path, lines)
