"""One real ``causeway broker`` process, started and stopped from plain (blocking) code: the one
way tests, benchmarks and tools run a broker of their own.

It binds port 0 unless told otherwise and counts as started once it prints its ready line
(`causeway broker ID ready: NAME://HOST:PORT, ...`), which names the listeners it bound.
Its stderr (the log) goes to `<data dir>.log`, next to the data dir.

The launcher runs brokers through `deploy.supervisor` instead: that one forks on the trio
thread with a parent-death signal and restarts the child with backoff, which a test that
kills, restarts and measures one broker must not have happen behind its back. Both read the
same ready line (`READY` here) and show the same log tail (`deploy.supervisor.log_tail`).
"""

from __future__ import annotations

import os
import re
import resource
import selectors
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from broker.address import format_host_port, parse_endpoint, parse_host_port
from deploy.supervisor import log_tail

__all__ = ["READY", "START_TIMEOUT_S", "BrokerProcess", "broker_command", "fd_count", "parse_ready_line",
           "read_ready_line", "rss_bytes", "stop_process"]

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
class BrokerProcess:
    """One broker process; `bootstrap` is host:port of its first listener."""

    data_dir: Path
    overrides: tuple[str, ...] = ()
    topics: tuple[str, ...] = ()
    python_args: tuple[str, ...] = ()  # e.g. ("-m", "cProfile", "-o", FILE) to profile the broker
    log_level: str = "info"
    env: dict[str, str] = field(default_factory=dict)  # extra environment, e.g. CAUSEWAY_CRASH_AT
    nofile: int | None = None  # RLIMIT_NOFILE (soft and hard) for the broker process, when set
    proc: subprocess.Popen[str] | None = None
    bootstrap: str = ""
    listeners: dict[str, str] = field(default_factory=dict)
    starts: int = 0

    @property
    def log_path(self) -> Path:
        return self.data_dir.with_name(self.data_dir.name + ".log")

    def start(self, *, port: int = 0) -> BrokerProcess:
        """Start the broker and return once it has printed its ready line.

        `port` re-binds a known port (a restart keeps the address clients already know).
        Raises RuntimeError, with the log's last lines, when it exits or stays silent instead.
        """
        names_listeners = any(item.startswith("listeners=") for item in self.overrides)
        cmd = broker_command(self.data_dir, listen=None if names_listeners else f"127.0.0.1:{port}",
                             overrides=self.overrides, topics=self.topics, log_level=self.log_level,
                             python_args=self.python_args)
        nofile = self.nofile

        def limit_files() -> None:
            if nofile is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        with self.log_path.open("a") as log:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, cwd=_REPO,
                                         env={**os.environ, **self.env},
                                         preexec_fn=limit_files if nofile is not None else None)
        self.starts += 1
        line = self._read_ready_line()
        listeners = parse_ready_line(line)
        if listeners is None:
            self.kill()
            raise RuntimeError(f"unexpected first line from the broker: {line!r}; log:\n{self.log_tail()}")
        self.listeners = listeners
        self.bootstrap = next(iter(self.listeners.values()))
        return self

    def _read_ready_line(self) -> str:
        assert self.proc is not None
        try:
            return read_ready_line(self.proc, "broker", START_TIMEOUT_S, self.log_tail)
        except RuntimeError:
            self.proc = None  # killed or exited, and waited for
            raise

    @property
    def port(self) -> int:
        return parse_host_port(self.bootstrap)[1]

    def stop(self) -> int:
        """SIGTERM and wait: the clean shutdown path. Returns the exit code."""
        if self.proc is None:
            return 0
        code = stop_process(self.proc, STOP_TIMEOUT_S)
        self.proc = None
        return code

    def kill(self) -> None:
        """SIGKILL: a crash, no chance to flush or checkpoint."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def restart(self) -> BrokerProcess:
        port = self.port
        self.stop()
        return self.start(port=port)

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.log_path, lines)


def read_ready_line(proc: subprocess.Popen[str], what: str, timeout_s: float, log_tail: Callable[[], str]) -> str:
    """The first line `proc` prints on its stdout (a pipe): its ready line, waited for up to
    `timeout_s`. Raises RuntimeError naming `what`, with `log_tail()`, when it exits first, or
    when it stays silent (then it is killed); either way the process has been waited for."""
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout=timeout_s):
            proc.kill()
            proc.wait()
            raise RuntimeError(f"{what} not ready in {timeout_s}s; log:\n{log_tail()}")
    line = proc.stdout.readline()
    if not line:
        code = proc.wait()
        raise RuntimeError(f"{what} exited with {code} before it was ready; log:\n{log_tail()}")
    return line


def stop_process(proc: subprocess.Popen[str], timeout_s: float) -> int:
    """SIGTERM, wait up to ``timeout_s``, then SIGKILL; the exit code (negative when killed)."""
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def rss_bytes(pid: int) -> int:
    """Resident set size of a process, from /proc."""
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def fd_count(pid: int) -> int:
    """Open file descriptors of a process, from /proc."""
    return len(os.listdir(f"/proc/{pid}/fd"))
