"""Progress of a long command step: done/total records, bytes when known, rate and ETA.

One object per step. On a terminal (stderr a tty) it draws a `rich` bar on stderr, which leaves
stdout to the command's result; anywhere else (a pipe, a log, CI) it says a plain line through
the command's own `say` at most every `every_s` seconds, plus one at the end, so a log stays
readable whatever the update rate. `quiet` says nothing at all. The arithmetic (broker/progress.py,
and `progress_line` here) is pure, so it is tested without a clock or a terminal.

A command's `--quiet` (deploy/cli/command.py `add_quiet`) reaches every step through its
progress channel, a `ProgressOutput`: the `say` it hands down (to the drill's steps, to
`mirror.promote`, to the pipeline jobs) says nothing, and a Progress given it as its `say` draws
no bar and says no line, however deep it was made. The command's result and its errors are not
progress and are printed without it.

The rate is the average since the step began (records per second of wall time): a step's rate
moves slowly enough that a sliding window only adds noise to the ETA, and at rate 0 (nothing
done yet, or a total that grew) the ETA is unknown, never a division by zero.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import IO, Any

from broker.progress import bytes_text, duration_text, eta_s, rate_per_s, rate_text

__all__ = ["EVERY_S", "Progress", "ProgressOutput", "bytes_text", "eta_s", "progress_line", "rate_per_s"]

#: The least time between two plain progress lines (a terminal's bar redraws more often).
EVERY_S = 3.0


class ProgressOutput:
    """A command's progress channel: called with a line, it says it through `write` (stdout or
    stderr, flushed), unless `quiet`. Handed down as the `say` of the command's steps; a Progress
    given it follows its `quiet`."""

    def __init__(self, write: Callable[[str], None], *, quiet: bool = False) -> None:
        self._write, self.quiet = write, quiet

    def __call__(self, line: str) -> None:
        if not self.quiet:
            self._write(line)


def progress_line(label: str, done: int, total: int | None, elapsed_s: float, *, unit: str = "records",
                  bytes_done: int | None = None) -> str:
    """`label: done/total unit (pct), [bytes,] rate unit/s [(bytes/s)], ETA t` (without a total:
    no percentage and no ETA)."""
    parts = []
    if total is not None and total > 0:
        parts.append(f"{done}/{total} {unit} ({100 * min(done, total) / total:.0f}%)")
    else:
        parts.append(f"{done} {unit}")
    parts.append(rate_text(done, elapsed_s, unit, bytes_done))
    if total is not None:
        parts.append(f"ETA {duration_text(eta_s(total - done, rate_per_s(done, elapsed_s)))}")
    return f"{label}: " + ", ".join(parts)


class Progress:
    """A step's progress; `update` as often as wanted, `close` (or leave the `with`) at the end.

    `say` gets the plain lines (the command's progress channel: a quiet ProgressOutput makes
    the step quiet too); `tty` None asks whether `stream` (stderr by default) is a terminal;
    `clock` is for tests.
    """

    def __init__(self, label: str, say: Callable[[str], None], *, total: int | None = None, unit: str = "records",
                 quiet: bool = False, tty: bool | None = None, every_s: float = EVERY_S,
                 stream: IO[str] | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.label, self.unit, self.total = label, unit, total
        self.done = 0
        self.bytes_done: int | None = None
        self._most_left = 0
        quiet = quiet or (isinstance(say, ProgressOutput) and say.quiet)
        self._say, self._quiet, self._every_s, self._clock = say, quiet, every_s, clock
        self._started = clock()
        self._next_line = self._started  # the first update says where the step starts
        self._said: str | None = None
        stream = stream if stream is not None else sys.stderr
        if tty is None:
            tty = stream.isatty()
        self._tty, self._stream = tty and not quiet, stream
        self._bar: Any = None  # drawn at the first update: a step that never updates draws nothing
        self._task: Any = None

    def _draw(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TaskProgressColumn, TextColumn, TimeRemainingColumn
        from rich.progress import Progress as Bar

        columns: list[Any] = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                              TextColumn(self.unit), TaskProgressColumn(), TextColumn("{task.fields[rate]}"),
                              TimeRemainingColumn()]
        # The command's lines on stdout go above the bar while it is drawn, but only when stdout
        # is the same terminal: stdout piped to a file keeps every line of it.
        same_terminal = self._stream is sys.stderr and sys.stdout.isatty()
        self._bar = Bar(*columns, console=Console(file=self._stream), redirect_stdout=same_terminal,
                        redirect_stderr=False)
        self._task = self._bar.add_task(self.label, total=self.total, rate="")
        self._bar.start()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def elapsed_s(self) -> float:
        return self._clock() - self._started

    def line(self) -> str:
        return progress_line(self.label, self.done, self.total, self.elapsed_s(), unit=self.unit,
                             bytes_done=self.bytes_done)

    def update(self, done: int, *, total: int | None = None, bytes_done: int | None = None) -> None:
        """`done` units so far (and the total, when it changed; the bytes, when known)."""
        self.done = done
        if total is not None:
            self.total = total
        if bytes_done is not None:
            self.bytes_done = bytes_done
        if self._quiet:
            return
        if self._tty:
            if self._bar is None:
                self._draw()
            rate = rate_text(done, self.elapsed_s(), self.unit, self.bytes_done)
            self._bar.update(self._task, completed=done, total=self.total, rate=rate)
            return
        now = self._clock()
        if now >= self._next_line:
            self._next_line = now + self._every_s
            self._emit()

    def left(self, left: int) -> None:
        """`left` units still to do (a backlog being worked off): the total is the most ever
        left, so a backlog that grows meanwhile raises the total rather than undoing progress."""
        self._most_left = max(self._most_left, left, 0)
        self.update(self._most_left - max(left, 0), total=self._most_left)

    def _emit(self) -> None:
        line = self.line()
        if line != self._said:
            self._said = line
            self._say(line)

    def close(self) -> None:
        """Stop the bar (left drawn), or say the last line if one was said and it moved since."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
            self._tty = False
        elif not self._tty and not self._quiet and self._said is not None:
            self._emit()
