"""Run a real ``causeway broker`` process for a test: port 0, readiness from its stdout line."""

from __future__ import annotations

import os
import re
import resource
import selectors
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

READY = re.compile(r"^causeway broker (\d+) ready: (.+)$")
START_TIMEOUT_S = 60.0


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
        """
        cmd = [sys.executable, *self.python_args, "-m", "deploy.cli", "broker", "--data-dir", str(self.data_dir),
               "--log-level", self.log_level]
        if not any(item.startswith("listeners=") for item in self.overrides):  # else the overrides name them
            cmd += ["--listen", f"127.0.0.1:{port}"]
        for item in self.overrides:
            cmd += ["--override", item]
        for topic in self.topics:
            cmd += ["--topic", topic]
        log = self.log_path.open("a")
        nofile = self.nofile

        def limit_files() -> None:
            if nofile is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True,
                                     cwd=Path(__file__).resolve().parents[2], env={**os.environ, **self.env},
                                     preexec_fn=limit_files if nofile is not None else None)
        log.close()
        self.starts += 1
        line = self._read_ready_line()
        match = READY.match(line.strip())
        assert match, f"unexpected first line from the broker: {line!r}"
        self.listeners = {}
        for url in match.group(2).split(","):
            name, _, address = url.strip().partition("://")
            self.listeners[name] = address
        self.bootstrap = next(iter(self.listeners.values()))
        return self

    def _read_ready_line(self) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            if not sel.select(timeout=START_TIMEOUT_S):
                self.kill()
                raise RuntimeError(f"broker not ready in {START_TIMEOUT_S}s; log:\n{self.log_tail()}")
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            raise RuntimeError(f"broker exited with {code} before it was ready; log:\n{self.log_tail()}")
        return line

    @property
    def port(self) -> int:
        return int(self.bootstrap.rsplit(":", 1)[1])

    def stop(self) -> int:
        """SIGTERM and wait: the clean shutdown path. Returns the exit code."""
        if self.proc is None:
            return 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
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
        try:
            return "\n".join(self.log_path.read_text().splitlines()[-lines:])
        except OSError:
            return "(no log)"


def rss_bytes(pid: int) -> int:
    """Resident set size of a process, from /proc."""
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def fd_count(pid: int) -> int:
    """Open file descriptors of a process, from /proc."""
    return len(os.listdir(f"/proc/{pid}/fd"))
