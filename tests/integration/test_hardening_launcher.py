"""Issue 10, items 1 and 7 (launcher part): a launcher's processes are owned.

A SIGKILLed launcher takes its children with it; what survives anyway is reported by `status`
as orphans, refused by `up` and stopped by `down`; `down` never signals a pid a state file names
unless it is provably the process the launcher started; a damaged state file gets a message
naming it, never a traceback and never "nothing is running" while something is.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from deploy.cli import main
from deploy.launcher.control import alive
from deploy.process_identity import identity_of
from tests.support.polling import wait_until

REPO = Path(__file__).resolve().parents[2]

SOLO = """\
name: solo
datacenters:
  here: {}
clusters:
  one:
    datacenter: here
"""


def causeway(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "deploy.cli", *args], capture_output=True, text=True,
                          timeout=180, cwd=REPO)


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> subprocess.CompletedProcess[str]:
    """The same command run in this process: `status` and `down` only read /proc and the state
    dir, so this saves an interpreter start per call (the processes they look at are real)."""
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return subprocess.CompletedProcess(list(args), code, out.out, out.err)


def _pids(state: Path) -> dict[str, int]:
    doc = json.loads((state / "state.json").read_text())
    return {"launcher": doc["pid"], "wan": doc["wan"]["pid"], "broker": doc["clusters"]["one"]["brokers"][0]["pid"]}


def test_a_killed_launcher_takes_its_children_and_survivors_are_orphans(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    topology = tmp_path / "solo.yaml"
    topology.write_text(SOLO)
    state = tmp_path / "state"
    stopped_broker = None
    try:
        up = causeway("up", str(topology), "-d", "--state-dir", str(state))
        assert up.returncode == 0, up.stdout + up.stderr
        pids = _pids(state)

        # SIGKILL the launcher: no chance to stop anything. Its children go with it.
        os.kill(pids["launcher"], signal.SIGKILL)
        wait_until(lambda: not alive(pids["wan"]) and not alive(pids["broker"]),
                   what="the emulator and the broker to exit with their launcher", timeout_s=60)
        report = cli(capsys, "status", "--state-dir", str(state))
        assert report.returncode == 1 and "nothing is running" in report.stdout, report.stdout

        # A second `up` on the same dirs starts (the first broker is gone, its data dir lock with it).
        up = causeway("up", str(topology), "-d", "--state-dir", str(state))
        assert up.returncode == 0, up.stdout + up.stderr
        pids = _pids(state)

        # A child that cannot act on its parent-death signal (stopped) survives the launcher.
        stopped_broker = pids["broker"]
        os.kill(stopped_broker, signal.SIGSTOP)
        os.kill(pids["launcher"], signal.SIGKILL)
        wait_until(lambda: not alive(pids["wan"]), what="the emulator to exit with its launcher", timeout_s=60)
        assert alive(stopped_broker)

        report = cli(capsys, "status", "--state-dir", str(state))
        assert report.returncode == 2, report.stdout
        assert f"broker one (pid {stopped_broker})" in report.stdout and "causeway down" in report.stdout
        assert "nothing is running" not in report.stdout

        again = causeway("up", str(topology), "-d", "--state-dir", str(state))
        assert again.returncode == 1 and f"pid {stopped_broker}" in again.stderr, again.stderr

        # Even with the state file destroyed, the orphan is found (by its environment) and named.
        (state / "state.json").write_bytes(b"\x00\xff garbage")
        report = cli(capsys, "status", "--state-dir", str(state))
        assert report.returncode == 2 and str(state / "state.json") in report.stdout, report.stdout
        assert f"pid {stopped_broker}" in report.stdout and "nothing is running" not in report.stdout
        assert "Traceback" not in report.stdout + report.stderr

        down = cli(capsys, "down", "--state-dir", str(state))
        assert down.returncode == 1, down.stdout + down.stderr  # the state file was damaged: said so
        assert f"stopped broker one (pid {stopped_broker})" in down.stdout
        assert not alive(stopped_broker)
        assert (state / "state.json.damaged").exists() and not (state / "state.json").exists()
        stopped_broker = None
        assert cli(capsys, "status", "--state-dir", str(state)).returncode == 1
    finally:
        if stopped_broker is not None and alive(stopped_broker):
            os.kill(stopped_broker, signal.SIGKILL)
        cli(capsys, "down", "--state-dir", str(state))


def state_naming(pid: int, start_time: int | None, cmdline: list[str]) -> dict[str, object]:
    process = {"pid": pid, "start_time": start_time, "cmdline": cmdline, "restarts": 0}
    return {"format": 2, "name": "solo", **process,
            "wan": {"api": "127.0.0.1:1", "proxies": [], **process},
            "clusters": {"one": {"datacenter": "here", "bootstrap": "127.0.0.1:1", "wan": {},
                                 "brokers": [{"id": 0, **process, "log": "x"}]}},
            "mirrors": {}}


@pytest.mark.parametrize("forged", ["no start time", "wrong start time", "wrong command line"])
def test_down_never_signals_a_pid_that_is_not_its_own(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      forged: str) -> None:
    sleeper = subprocess.Popen(["sleep", "600"])
    try:
        identity = identity_of(sleeper.pid)
        assert identity is not None
        start: int | None = {"no start time": None, "wrong start time": identity.start_time + 1,
                             "wrong command line": identity.start_time}[forged]
        cmdline = list(identity.cmdline) if forged != "wrong command line" else [sys.executable, "-m", "deploy.cli",
                                                                                 "up", "solo.yaml"]
        state = tmp_path / "state"
        state.mkdir()
        (state / "state.json").write_text(json.dumps(state_naming(sleeper.pid, start, cmdline)))

        report = cli(capsys, "status", "--state-dir", str(state))
        assert report.returncode == 1, report.stdout  # a stranger is not "running"
        assert f"launcher (pid {sleeper.pid}), but that pid now belongs to another process" in report.stdout
        down = cli(capsys, "down", "--state-dir", str(state))
        assert down.returncode == 0, down.stderr
        assert f"pid {sleeper.pid} is not the process the state file recorded" in down.stdout
        assert "stopped" not in down.stdout
        assert sleeper.poll() is None  # the sleep survives
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.parametrize(("content", "reason"), [
    (b"", "is empty"),
    (b"{\"name\": \"solo\", \"pid\": ", "is not valid JSON"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe", "binary"),
    (b"[1, 2, 3]", "expected a JSON object"),
    (b'{"name": 5}', "name: expected str"),
    (b'{"name": "solo", "pid": "123", "wan": {"api": "x"}}', "pid: expected a positive integer"),
    (b'{"name": "solo", "pid": 1, "wan": {"api": "x"}, "clusters": {"one": {"datacenter": "here", '
     b'"bootstrap": "x", "brokers": [{"pid": [1]}]}}}', "clusters.one.brokers[0].pid"),
    (b'{"name": "solo", "pid": 1, "wan": {"api": "x"}, "mirrors": {"m": {"source": "a", "target": "b"}}}',
     "mirrors.m.status_file: missing"),
])
def test_a_damaged_state_file_is_named_with_what_to_do(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       content: bytes, reason: str) -> None:
    state = tmp_path / "state"
    state.mkdir()
    path = state / "state.json"
    path.write_bytes(content)
    for command in ("status", "down"):
        if not path.exists():
            path.write_bytes(content)
        result = cli(capsys, command, "--state-dir", str(state))
        out = result.stdout + result.stderr
        assert result.returncode == 1, out
        assert str(path) in out and reason in out, out
        assert "causeway down" in out or command == "down", out
        assert "Traceback" not in out
    assert (state / "state.json.damaged").read_bytes() == content  # set aside, not deleted


def test_a_metrics_listener_that_cannot_be_used_starts_nothing(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """`up --metrics-listener`: a value that is no HOST:PORT is a usage error (exit 2); a port
    another program holds is named, and nothing is started or left behind (exit 1)."""
    topology = tmp_path / "solo.yaml"
    topology.write_text(SOLO)
    state = tmp_path / "state"
    with pytest.raises(SystemExit) as usage:
        main(["up", str(topology), "--state-dir", str(state), "--metrics-listener", "nowhere"])
    assert usage.value.code == 2
    assert "argument --metrics-listener: address 'nowhere' must be HOST:PORT" in capsys.readouterr().err

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        refused = cli(capsys, "up", str(topology), "--state-dir", str(state), "--metrics-listener", address)
    assert refused.returncode == 1
    assert f"--metrics-listener: cannot listen on {address}" in refused.stderr
    assert "nothing was started" in refused.stderr
    assert not (state / "state.json").exists()
    assert "nothing is running" in cli(capsys, "status", "--state-dir", str(state)).stdout
