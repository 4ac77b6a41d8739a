import logging

import pytest

from broker.server.log_limits import RepeatLimiter


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
