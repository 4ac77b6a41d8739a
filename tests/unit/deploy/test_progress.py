"""deploy/progress.py: the lines, the plain lines off a terminal (bounded), the bar on one."""

from __future__ import annotations

import io

import pytest

from deploy.cli.command import add_quiet, progress_output
from deploy.progress import Progress, ProgressOutput, progress_line


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_line() -> None:
    assert progress_line("copy", 250, 1000, 5.0) == "copy: 250/1000 records (25%), 50 records/s, ETA 15 s"
    assert progress_line("copy", 0, 1000, 0.0) == "copy: 0/1000 records (0%), 0 records/s, ETA ?"
    assert progress_line("copy", 10, None, 2.0) == "copy: 10 records, 5 records/s"
    assert progress_line("copy", 1, 7201, 1.0) == "copy: 1/7201 records (0%), 1 records/s, ETA 2h00m"
    assert (progress_line("export", 600, 1200, 60.0, bytes_done=3 * 1024 * 1024)
            == "export: 600/1200 records (50%), 3.0 MiB, 10 records/s (51.2 KiB/s), ETA 1m00s")
    assert progress_line("copy", 10, None, 2.0, bytes_done=0) == "copy: 10 records, 0 B, 5 records/s (0 B/s)"


def test_plain_lines_are_bounded() -> None:
    """Off a terminal: the first update says a line, then at most one per `every_s`, and the end
    its last state; a thousand updates do not make a thousand lines."""
    clock, said = Clock(), []
    with Progress("catch-up", said.append, total=1000, tty=False, every_s=3.0, clock=clock) as progress:
        for done in range(1, 1001):
            clock.now += 0.01  # 10 s in all
            progress.update(done)
    assert len(said) == 5  # at 0.01 s, ~3 s, ~6 s, ~9 s, and the end
    assert said[0] == "catch-up: 1/1000 records (0%), 100 records/s, ETA 10 s"
    assert said[-1] == "catch-up: 1000/1000 records (100%), 100 records/s, ETA 0 s"


def test_quiet_and_unchanged_say_nothing_more() -> None:
    clock, said = Clock(), []
    with Progress("x", said.append, total=10, tty=False, quiet=True, clock=clock) as progress:
        progress.update(5)
    assert said == []
    with Progress("x", said.append, total=10, tty=False, clock=clock) as progress:
        progress.update(5)
    assert said == ["x: 5/10 records (50%), 0 records/s, ETA ?"]  # no time passed: rate 0, no crash


def test_total_may_grow() -> None:
    clock, said = Clock(), []
    with Progress("x", said.append, total=10, tty=False, every_s=1.0, clock=clock) as progress:
        clock.now += 1
        progress.update(5, total=20, bytes_done=2048)
    assert said == ["x: 5/20 records (25%), 2.0 KiB, 5 records/s (2.0 KiB/s), ETA 3 s"]


def test_terminal_bar_on_stderr_not_say() -> None:
    """On a terminal the bar is drawn on its stream; `say` (stdout) gets nothing."""
    stream, said = io.StringIO(), []
    with Progress("catch-up", said.append, total=40, tty=True, stream=stream) as progress:
        progress.update(10)
        progress.update(40)
    assert said == []
    drawn = stream.getvalue()
    assert "catch-up" in drawn and "40/40" in drawn and "records" in drawn


def test_tty_follows_the_stream() -> None:
    said: list[str] = []
    with Progress("x", said.append, total=1, stream=io.StringIO()) as progress:  # not a terminal
        progress.update(1)
    assert said and all(line.startswith("x: 1/1 records (100%)") for line in said)


def test_a_backlog_worked_off() -> None:
    """`left`: the total is the most ever left; a backlog that grows raises it."""
    clock, said = Clock(), []
    with Progress("copy catching up", said.append, tty=False, every_s=1.0, clock=clock) as progress:
        progress.left(400)
        clock.now += 1
        progress.left(100)
        clock.now += 1
        progress.left(500)  # the producers wrote more
    assert said == ["copy catching up: 0/400 records (0%), 0 records/s, ETA ?",
                    "copy catching up: 300/400 records (75%), 300 records/s, ETA 0 s",
                    "copy catching up: 0/500 records (0%), 0 records/s, ETA ?"]


def test_a_step_that_never_moves_draws_nothing() -> None:
    stream, said = io.StringIO(), []
    with Progress("x", said.append, tty=True, stream=stream):
        pass
    with Progress("x", said.append, tty=False):
        pass
    assert said == [] and stream.getvalue() == ""


def test_a_terminal_bar_says_bytes_beside_records() -> None:
    stream, said = io.StringIO(), []
    with Progress("workload", said.append, total=40, tty=True, stream=stream) as progress:
        progress.update(40, bytes_done=5 * 1024 * 1024)
    assert said == [] and "5.0 MiB" in stream.getvalue()


def test_a_quiet_channel_quiets_every_step_made_with_it() -> None:
    """--quiet reaches a Progress made deep inside a command through the `say` it was handed:
    no line, and no bar even on a terminal."""
    said: list[str] = []
    quiet = ProgressOutput(said.append, quiet=True)
    stream = io.StringIO()
    with Progress("x", quiet, total=10, tty=True, stream=stream) as progress:
        progress.update(5)
    with Progress("y", lambda line: quiet(f"  {line}"), total=10, tty=False) as wrapped:  # a prefixing say
        wrapped.update(5)
    quiet("a step done")
    assert said == [] and stream.getvalue() == ""
    loud = ProgressOutput(said.append)
    with Progress("x", loud, total=10, tty=False, clock=Clock()) as progress:
        progress.update(5)
    loud("a step done")
    assert said == ["x: 5/10 records (50%), 0 records/s, ETA ?", "a step done"]


@pytest.mark.parametrize(("argv", "quiet"), [([], False), (["--quiet"], True), (["-q"], True)])
def test_the_flag_makes_the_channel(argv: list[str], quiet: bool, capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    parser = argparse.ArgumentParser()
    add_quiet(parser)
    args = parser.parse_args(argv)
    progress_output(args)("on stdout")
    progress_output(args, on_stderr=True)("on stderr")
    out, err = capsys.readouterr()
    assert (out, err) == (("", "") if quiet else ("on stdout\n", "on stderr\n"))
