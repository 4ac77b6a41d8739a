"""Issue 11: the mirror's status file (rewritten every second) and the launcher's state file
(rewritten on every child start and exit) are written in worker threads: no fsync on the trio
thread, and the files still say what is true."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from deploy.launcher.control import read_state
from deploy.launcher.launch import LaunchState, free_port, run_plan
from deploy.launcher.plan import LaunchPlan
from mirror import runtime
from mirror.config import mirror_config_from_data
from mirror.driver import run_mirror
from mirror.runtime import Mirror
from mirror.status import read_status
from tests.support.polling import wait_for


class FsyncThreads:
    """Which thread each fsync of a file under `root` ran on."""

    def __init__(self, root: Path) -> None:
        self.root = str(root)
        self.on_loop: list[str] = []
        self.in_workers: list[str] = []

    def record(self, fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if path.startswith(self.root):
            on_loop = threading.current_thread() is threading.main_thread()
            (self.on_loop if on_loop else self.in_workers).append(path)


@pytest.fixture
def fsyncs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FsyncThreads]:
    seen = FsyncThreads(tmp_path)
    real = os.fsync

    def recording(fd: int) -> None:
        seen.record(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", recording)
    yield seen


async def test_the_mirror_status_file_is_written_off_the_loop(tmp_path: Path, fsyncs: FsyncThreads,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime, "STATUS_INTERVAL_S", 0.05)
    nobody = f"127.0.0.1:{free_port()}"  # both clusters down: the mirror waits and says so
    config = mirror_config_from_data({"source": {"alias": "east", "bootstrap": nobody},
                                      "target": {"alias": "west", "bootstrap": nobody}})
    status_file = tmp_path / "m.status.json"
    async with trio.open_nursery() as nursery:
        mirror: Mirror = await nursery.start(lambda task_status: run_mirror(config, status_file=status_file,
                                                                            task_status=task_status))

        def reported() -> bool:
            report = read_status(status_file)
            return report is not None and report.state == "waiting for the target"

        await wait_for(reported, what="the status file saying the mirror waits for its target")
        mirror.stop()
    report = read_status(status_file)
    assert report is not None and report.state == "stopped"  # the last write, on the way out
    assert fsyncs.on_loop == []
    assert str(status_file) + ".tmp" in fsyncs.in_workers


async def test_the_launcher_state_file_is_saved_off_the_loop_on_every_change(
        tmp_path: Path, fsyncs: FsyncThreads, monkeypatch: pytest.MonkeyPatch) -> None:
    state_dir = tmp_path / "state"
    async with trio.open_nursery() as nursery:
        state: LaunchState = await nursery.start(run_plan, LaunchPlan("solo", clusters=()), state_dir)
        saved = read_state(state_dir)
        assert state.wan is not None and saved is not None and saved.wan.pid == state.wan.pid
        first = state.wan.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)  # the supervisor restarts it: a change the file must show

        def restart_saved() -> bool:
            now = read_state(state_dir)
            return (now is not None and state.wan is not None and now.wan.restarts == 1
                    and now.wan.pid not in (None, first) and now.wan.pid == state.wan.pid)

        await wait_for(restart_saved, what="the emulator's restart in the state file")
        nursery.cancel_scope.cancel()
    assert not (state_dir / "state.json").exists()  # everything stopped: the file is gone
    assert fsyncs.on_loop == []
    assert fsyncs.in_workers.count(str(state_dir / "state.json.tmp")) >= 2
