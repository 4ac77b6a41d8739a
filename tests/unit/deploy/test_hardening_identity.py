"""Issue 10, items 1 and 7: telling our processes from strangers, and reading a state file."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from deploy.launcher.control import StateFileError, owned, read_state
from deploy.process_identity import identity_of


def test_a_process_is_known_by_pid_start_time_and_command_line() -> None:
    me = identity_of(os.getpid())
    assert me is not None and me.is_current() and me.age_s() >= 0
    assert owned({"pid": me.pid, "start_time": me.start_time, "cmdline": list(me.cmdline)}) == me
    for forged in (dataclasses.replace(me, start_time=me.start_time + 1), dataclasses.replace(me, cmdline=("x",))):
        assert not forged.is_current()
        assert owned({"pid": forged.pid, "start_time": forged.start_time, "cmdline": list(forged.cmdline)}) is None
    assert owned({"pid": me.pid}) is None  # a pid alone proves nothing


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
