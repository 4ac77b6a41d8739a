"""What every `causeway` command shares: exceptions mapped to exit codes, SIGINT/SIGTERM, and the
`--quiet` of the long-running commands (their progress channel, deploy/progress.py).

Exit codes, as the manual's command pages give them (docs/reference/cli/): 0 done; 1 the cluster refused
(`Error: NAME: message`, Kafka's error name) or could not be reached, or the input or state
stops the command (`Refused`); 2 a command line that cannot be run as given (`UsageError`);
130 interrupted before the command could catch the signal.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TypeAlias

import trio

from broker.tasks import leaves
from deploy.progress import ProgressOutput

__all__ = [
    "QUIET_HELP",
    "ErrorRule",
    "Refused",
    "SignalStop",
    "UsageError",
    "add_quiet",
    "progress_output",
    "run",
    "say",
    "say_on_stderr",
    "stdout_reader_gone",
    "until_signalled",
]

log = logging.getLogger("causeway")

# An exception type (or types), the exit code it means, and the line printed on stderr.
ErrorRule: TypeAlias = tuple[type[BaseException] | tuple[type[BaseException], ...], int,
                             Callable[[BaseException], str]]


class UsageError(Exception):
    """A command line that cannot be run as given (exit 2)."""


class Refused(Exception):
    """Input or cluster state that stops the command (exit 1)."""


def _client_rules(bootstrap: str | None) -> list[ErrorRule]:
    # Imported only once a command failed: a command that never touched a cluster cannot have
    # raised these, and `causeway --help` must not pay for importing the client.
    if "broker.client" not in sys.modules:
        return []
    from broker.client import ClientError, KafkaError

    return [(KafkaError, 1, lambda exc: f"Error: {exc}"),
            (ClientError, 1, lambda exc: f"Error: cannot reach {bootstrap}: {exc}")]


def run(prog: str, body: Callable[[], int | None], *, bootstrap: str | None = None,
        errors: Sequence[ErrorRule] = ()) -> int:
    """Run a command's `body` (which usually calls `trio.run`) and return its exit code (None: 0).

    An exception the rules know (the command's own `errors` first, then UsageError, Refused,
    Kafka errors and an unreachable `bootstrap`) is printed as one line and mapped to its code,
    also when a nursery wrapped it in a one-member group; anything else is a bug and raises.
    """
    try:
        return body() or 0
    except KeyboardInterrupt:
        return 130
    except BaseException as raised:  # noqa: BLE001 - looked up in the rules, re-raised when unknown
        # trio's nurseries wrap what they raise: a group of one failure is that failure.
        found = leaves(raised)
        exc = found[0] if len(found) == 1 else raised
        rules: list[ErrorRule] = [*errors, (UsageError, 2, lambda e: f"{prog}: {e}"),
                                  (Refused, 1, lambda e: f"Error: {e}"), *_client_rules(bootstrap)]
        for types, code, message in rules:
            if isinstance(exc, types):
                print(message(exc), file=sys.stderr)
                return code
        if isinstance(exc, KeyboardInterrupt):
            return 130
        raise


def say(line: str) -> None:
    """A line of a command's progress on stdout, flushed at once (a pipe or log sees it now)."""
    print(line, flush=True)


def say_on_stderr(line: str) -> None:
    """A line of progress on stderr, flushed at once: for commands whose stdout is the result."""
    print(line, file=sys.stderr, flush=True)


#: `--quiet`'s help, the same on every command that takes it.
QUIET_HELP = "print no progress (no progress lines, no bar); errors and the result are printed as without it"


def add_quiet(parser: argparse.ArgumentParser) -> None:
    """`-q`/`--quiet` on a long-running command that prints progress (see `progress_output`);
    `causeway`'s main also logs only warnings and errors then (INFO lines are progress)."""
    parser.add_argument("-q", "--quiet", action="store_true", help=QUIET_HELP)


def progress_output(args: argparse.Namespace, *, on_stderr: bool = False) -> ProgressOutput:
    """The command's progress channel: its lines on stdout (stderr with `on_stderr`, for a
    command whose stdout is its result), flushed at once; nothing at all with `--quiet`. Hand it
    down as the steps' `say`, and give it to every Progress (deploy/progress.py) as its `say`."""
    return ProgressOutput(say_on_stderr if on_stderr else say, quiet=bool(getattr(args, "quiet", False)))


def stdout_reader_gone() -> None:
    """The reader of stdout went away (`| head`): a normal end, not an error. Later writes, the
    interpreter's flush at exit included, go nowhere instead of raising BrokenPipeError."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


@dataclass
class SignalStop:
    """The nursery of an `until_signalled` block, and what its first signal does: call
    `on_signal` (a service that stops by itself, e.g. a mirror checkpointing once more), or
    with none, cancel the nursery."""

    nursery: trio.Nursery
    on_signal: Callable[[], None] | None = None
    announce: str | None = None  # logged (info) with the signal's name, e.g. "shutting down"

    def finish(self) -> None:
        """The work ended by itself: stop waiting for a signal."""
        self.nursery.cancel_scope.cancel()


async def _watch(signals: AsyncIterator[int], stop: SignalStop) -> None:
    async for signum in signals:
        if stop.announce is not None:
            log.info("received %s; %s", signal.Signals(signum).name, stop.announce)
        if stop.on_signal is None:
            stop.nursery.cancel_scope.cancel()
        else:
            stop.on_signal()
        return


@asynccontextmanager
async def until_signalled(announce: str | None = None) -> AsyncIterator[SignalStop]:
    """A nursery that runs until the first SIGINT or SIGTERM (see SignalStop). Signals are
    caught for the whole block, so a second one cannot kill the shutdown of the first."""
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            stop = SignalStop(nursery, announce=announce)
            nursery.start_soon(_watch, signals, stop)
            yield stop
