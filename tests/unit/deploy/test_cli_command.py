"""The one command wrapper: exceptions to exit codes and one-line messages; SIGINT/SIGTERM."""

from __future__ import annotations

import os
import signal

import pytest
import trio

from broker.client import ClientError, ErrorCode, KafkaError
from deploy.cli.command import Refused, UsageError, run, say, say_on_stderr, until_signalled


def _raises(exc: BaseException) -> object:
    def body() -> int:
        raise exc

    return body


@pytest.mark.parametrize(("exc", "code", "line"), [
    (UsageError("--x wants a number"), 2, "causeway t: --x wants a number"),
    (Refused("no key separator"), 1, "Error: no key separator"),
    (KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, "t exists"), 1, "Error: TOPIC_ALREADY_EXISTS"),
    (ClientError("connection refused"), 1, "Error: cannot reach 127.0.0.1:1: connection refused"),
    # trio's nurseries wrap what they raise: one leaf is unwrapped.
    (ExceptionGroup("g", [ExceptionGroup("h", [Refused("inner")])]), 1, "Error: inner"),
    (KeyboardInterrupt(), 130, ""),
])
def test_known_failures_are_one_line_and_an_exit_code(exc: BaseException, code: int, line: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert run("causeway t", _raises(exc), bootstrap="127.0.0.1:1") == code  # type: ignore[arg-type]
    err = capsys.readouterr().err
    assert err.startswith(line) and err.count("\n") == (1 if line else 0)


def test_a_command_rule_comes_first_and_a_bug_still_raises() -> None:
    assert run("t", _raises(OSError("nope")), errors=[(OSError, 3, str)]) == 3  # type: ignore[arg-type]
    with pytest.raises(ZeroDivisionError):
        run("t", _raises(ZeroDivisionError()))  # type: ignore[arg-type]
    assert run("t", lambda: None) == 0
    assert run("t", lambda: 4) == 4


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_the_first_signal_cancels_the_nursery(signum: int) -> None:
    async def main() -> bool:
        async with until_signalled() as stop:
            stop.nursery.start_soon(trio.sleep_forever)
            os.kill(os.getpid(), signum)
        return True

    assert trio.run(main)


def test_a_service_that_stops_itself_is_asked_to() -> None:
    async def main() -> list[str]:
        events: list[str] = []
        finished = trio.Event()

        async def service() -> None:
            await finished.wait()  # e.g. a mirror checkpointing once more before it returns
            events.append("stopped cleanly")

        async with until_signalled() as stop:
            stop.nursery.start_soon(service)
            stop.on_signal = finished.set
            os.kill(os.getpid(), signal.SIGTERM)
        return events

    assert trio.run(main) == ["stopped cleanly"]


def test_say_writes_a_line_to_stdout_and_say_on_stderr_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    say("progress")
    say_on_stderr("aside")
    assert capsys.readouterr() == ("progress\n", "aside\n")
