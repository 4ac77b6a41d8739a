"""Log dir health: the failure episode a dir goes through, and the probe that brings it back."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from broker.protocol.errors import ErrorCode
from broker.replication.dir_health import PROBE_FILE, DirHealth, probe_writable


def test_standalone_dir_recovers_at_the_first_write_that_works(tmp_path: Path) -> None:
    health = DirHealth()
    error = health.failed(tmp_path, OSError(errno.ENOSPC, "No space left on device"), "appending")
    assert error.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert not health.is_offline(tmp_path)
    health.succeeded(tmp_path)
    assert health.failing() == {}


def test_zookeeper_mode_dir_goes_offline_once_and_only_a_probe_brings_it_back(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    queued: list[Path] = []
    health = DirHealth()
    health.take_offline_on_failure(queued.append)
    for _ in range(3):  # every refused append of the episode: one hand-over, one line
        health.failed(tmp_path, OSError(errno.ENOSPC, "No space left on device"), "appending")
    assert queued == [tmp_path] and health.is_offline(tmp_path)
    assert sum("goes offline" in r.message for r in caplog.records) == 1
    health.succeeded(tmp_path)  # a write elsewhere in it (a flush that was queued) does not end it
    assert health.is_offline(tmp_path)
    health.back_online(tmp_path)
    assert not health.is_offline(tmp_path) and health.failing() == {}
    health.failed(tmp_path, OSError(errno.EIO, "Input/output error"), "appending")  # a new episode
    assert queued == [tmp_path, tmp_path]


def test_probe_writes_the_size_asked_and_leaves_nothing(tmp_path: Path) -> None:
    assert probe_writable(tmp_path, 1 << 20)
    assert not (tmp_path / PROBE_FILE).exists()
    assert not probe_writable(tmp_path, 1 << 62)  # more than any disk has free
    assert not probe_writable(tmp_path / "missing", 10)
