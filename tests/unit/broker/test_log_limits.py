import logging
import re

import pytest

from broker.log_limits import MAX_MESSAGE_CHARS, CallSiteLimit, RepeatLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_first_of_a_kind_is_logged_then_counted_and_summarised(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    limited = RepeatLimiter(logging.getLogger("test.limits"), window_s=60, clock=clock)
    with caplog.at_level(logging.INFO, logger="test.limits"):
        for i in range(4212):
            limited.warning("protocol error", "closing connection %d", i)
        limited.warning("idle", "another kind is logged on its own")
        assert [r.getMessage() for r in caplog.records] == ["closing connection 0",
                                                            "another kind is logged on its own"]
        clock.now = 61
        limited.flush()
    assert caplog.records[-1].getMessage() == "... and 4,211 more like this (protocol error) in the last 60 s"
    assert caplog.records[-1].levelno == logging.WARNING
    assert len(caplog.records) == 3  # the "idle" kind had nothing to summarise


def test_a_new_window_logs_again_after_summarising(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    limited = RepeatLimiter(logging.getLogger("test.limits2"), window_s=10, clock=clock)
    with caplog.at_level(logging.INFO, logger="test.limits2"):
        limited.warning("k", "one")
        limited.warning("k", "two")
        clock.now = 11
        limited.warning("k", "three")
    assert [r.getMessage() for r in caplog.records] == [
        "one", "... and 1 more like this (k) in the last 10 s", "three"]


def test_disabled_level_costs_nothing_and_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    limited = RepeatLimiter(logging.getLogger("test.limits3"))
    with caplog.at_level(logging.ERROR, logger="test.limits3"):
        assert not limited.info("k", "quiet")
        limited.flush(force=True)
    assert caplog.records == []


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _site_limited(name: str, burst: int, clock: Clock) -> tuple[logging.Logger, Collect, CallSiteLimit]:
    logger = logging.getLogger(name)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    handler = Collect()
    limit = CallSiteLimit(handler, burst=burst, window_s=60, clock=clock)
    handler.addFilter(limit)
    logger.addHandler(handler)
    return logger, handler, limit


def test_call_sites_are_limited_apart_and_summarised_by_file_and_line() -> None:
    clock = Clock()
    logger, handler, limit = _site_limited("test.sites", 3, clock)
    for i in range(1000):
        logger.warning("one call site %d", i)  # a line nobody routed through a RepeatLimiter
    logger.warning("another call site")
    assert handler.lines == ["one call site 0", "one call site 1", "one call site 2", "another call site"]
    clock.now = 61
    limit.flush()
    assert len(handler.lines) == 5
    assert re.fullmatch(r"\.\.\. and 997 more like this \(test_log_limits\.py:\d+\) in the last 60 s",
                        handler.lines[-1])
    logger.warning("one call site again")  # a new window
    assert handler.lines[-1] == "one call site again"


def test_a_repeat_limiter_kind_counts_as_the_call_site_that_used_it() -> None:
    clock = Clock()
    logger, handler, _ = _site_limited("test.sites2", 1, clock)
    limited = RepeatLimiter(logger, window_s=60, clock=clock)
    limited.warning("a", "kind a")
    limited.warning("b", "kind b")  # another line of this file: not the limiter's own line
    assert handler.lines == ["kind a", "kind b"]


def test_a_long_message_is_cut() -> None:
    logger, handler, _ = _site_limited("test.sites3", 5, Clock())
    logger.warning("group %s left", "g" * 100_000)
    (line,) = handler.lines
    assert len(line) < MAX_MESSAGE_CHARS + 100 and line.endswith("more characters]")
