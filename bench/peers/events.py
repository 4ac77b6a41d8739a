"""A long-running Kafka tool whose stdout is JSON lines: Kafka's VerifiableProducer and
VerifiableConsumer (the clients Kafka's own system tests drive), or MirrorMaker 2's driver.

`start_tool` starts it on the peer's classpath (with the tool's class-data archive, as `run_tool`
does); a reader thread parses every stdout line into `events` as it arrives, so a test can wait
for an event (`wait_for`, bounded) while the process keeps running, then stop it with SIGTERM
(Kafka's tools close their clients cleanly on it) and check everything it printed.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from bench.peers.cache import peer
from bench.peers.tools import LOG4J2_TOOLS, TOOL_JVM_FLAGS, class_data_sharing, java_command, keep_archive, main_class
from deploy.child_process import ChildProcess, log_tail

Event = dict[str, Any]
STOP_TIMEOUT_S = 30.0
SIGTERM_EXIT = 143  # a JVM that ran its shutdown hooks on SIGTERM exits 128 + 15


@dataclass
class ToolProcess:
    """One running tool; `events` fills in as it prints (non-JSON lines go to `other`)."""

    name: str
    proc: ChildProcess
    stderr_path: Path
    partial_archive: Path | None = None
    events: list[Event] = field(default_factory=list)
    other: list[str] = field(default_factory=list)
    returncode: int | None = None
    _changed: threading.Condition = field(default_factory=threading.Condition)
    _reader: threading.Thread | None = None

    def __post_init__(self) -> None:
        self._reader = threading.Thread(target=self._read, name=f"{self.name}-stdout", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                event = None
            with self._changed:
                if isinstance(event, dict):
                    self.events.append(event)
                elif line.strip():
                    self.other.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def named(self, name: str) -> list[Event]:
        with self._changed:
            return [event for event in self.events if event.get("name") == name]

    def wait_for(self, predicate: Callable[[list[Event]], bool], what: str, timeout_s: float = 60.0) -> list[Event]:
        """Block until `predicate(events so far)` holds; raise (with the tool's stderr) after `timeout_s`
        or when the tool exits first. Returns the events seen."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not predicate(self.events):
                left = deadline - time.monotonic()
                if left <= 0 or (self._reader is not None and not self._reader.is_alive()):
                    raise AssertionError(f"{self.name}: no {what} in {timeout_s}s (exit {self.proc.poll()}); "
                                         f"events: {self.events[-10:]}\n--- stderr\n{self.stderr_tail()}")
                self._changed.wait(min(left, 1.0))
            return list(self.events)

    def stderr_tail(self, lines: int = 40) -> str:
        return log_tail(self.stderr_path, lines)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM (the tool's shutdown hook closes its clients), SIGKILL if it lingers; then reaped.
        Returns 0 for an exit by itself or through its shutdown hooks, else the exit code."""
        if self.returncode is None:
            code = self.proc.stop(timeout_s)
            self.returncode = 0 if code == SIGTERM_EXIT else code
            self._finish()
        return self.returncode

    def kill(self) -> int:
        """SIGKILL: a crash, no clean close."""
        if self.returncode is None:
            self.returncode = self.proc.kill()
            self._finish()
        return self.returncode

    def wait(self, timeout_s: float = 60.0) -> int:
        """Wait for the tool to exit by itself (killed after `timeout_s`: subprocess.TimeoutExpired)."""
        if self.returncode is None:
            try:
                self.returncode = self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
                raise
            self._finish()
        return self.returncode

    def _finish(self) -> None:
        if self._reader is not None:
            self._reader.join(timeout=10.0)
        keep_archive(self.partial_archive, self.returncode == 0)

    def __enter__(self) -> ToolProcess:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def start_tool(tool: str, *args: str, stderr_path: Path, profile: str = "kafka4",
               jvm_flags: Sequence[str] = TOOL_JVM_FLAGS, log4j2: Path = LOG4J2_TOOLS,
               extra_classpath: Sequence[Path] = ()) -> ToolProcess:
    """Start a tool in the background; its stderr (the log) goes to `stderr_path`."""
    target = peer(profile)
    main = main_class(tool, profile)
    sharing, partial = class_data_sharing(target, main, jvm_flags)
    cmd = java_command(target, main, args, jvm_flags=[*jvm_flags, *sharing], log4j2=log4j2)
    if extra_classpath:
        at = cmd.index("-cp") + 1
        cmd[at] = ":".join([cmd[at], *map(str, extra_classpath)])
    return ToolProcess(tool, ChildProcess.start(tool, cmd, log_path=stderr_path), stderr_path, partial)
