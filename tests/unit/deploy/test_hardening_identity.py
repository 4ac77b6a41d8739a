"""Issue 10, items 1 and 7: telling our processes from strangers, and reading a state file."""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path

import pytest

from deploy.launcher.control import StateFileError, owned, read_state
from deploy.process_identity import STATE_DIR_ENV, Identity, carries_mark, find_marked, identity_of


def _entry(identity: Identity) -> dict[str, object]:
    return {"pid": identity.pid, "start_time": identity.start_time, "cmdline": list(identity.cmdline)}


def test_a_process_is_ours_by_pid_start_time_command_line_and_the_state_dirs_mark(tmp_path: Path) -> None:
    marked = subprocess.Popen(["sleep", "600"], env={**os.environ, STATE_DIR_ENV: str(tmp_path.resolve())})
    unmarked = subprocess.Popen(["sleep", "600"], env={**os.environ, STATE_DIR_ENV: str(tmp_path / "other")})
    try:
        ours, stranger = identity_of(marked.pid), identity_of(unmarked.pid)
        assert ours is not None and ours.is_current() and ours.age_s() >= 0 and stranger is not None
        assert owned(_entry(ours), tmp_path) == ours
        assert carries_mark(ours.pid, tmp_path) and not carries_mark(stranger.pid, tmp_path)
        # Every world-readable value right, no mark (another state dir's): not ours.
        assert owned(_entry(stranger), tmp_path) is None
        for forged in (dataclasses.replace(ours, start_time=ours.start_time + 1),
                       dataclasses.replace(ours, cmdline=("x",))):
            assert not forged.is_current()
            assert owned(_entry(forged), tmp_path) is None
        assert owned({"pid": ours.pid}, tmp_path) is None  # a pid alone proves nothing
        assert [i.pid for i in find_marked(tmp_path)] == [ours.pid]
    finally:
        for child in (marked, unmarked):
            child.kill()
            child.wait()


def test_state_file_problems_name_the_field(tmp_path: Path) -> None:
    assert read_state(tmp_path) is None
    cases = {
        b"\xff\xfe\x00": "binary",
        b"  \n": "is empty",
        b'{"name": "t", "pid": 1, "wan": {"api": "a", "proxies": [1]}}': "wan.proxies",
        b'{"name": "t", "pid": 1, "start_time": "x", "wan": {"api": "a"}}': "start_time",
        b'{"name": "t", "pid": 1, "wan": {"api": "a"}, "clusters": {"c": {"datacenter": "d", "bootstrap": "b", '
        b'"brokers": [{"pid": 2, "restarts": "many"}]}}}': "clusters.c.brokers[0].restarts",
    }
    for content, field in cases.items():
        (tmp_path / "state.json").write_bytes(content)
        with pytest.raises(StateFileError) as caught:
            read_state(tmp_path)
        assert field in str(caught.value) and str(tmp_path / "state.json") in str(caught.value)
