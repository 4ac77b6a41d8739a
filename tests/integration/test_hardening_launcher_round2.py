"""Issue 19, items 9 and 10: `causeway status` and `down` against a forged, hostile or unusable
state dir, and names that would lead out of it. Every command here is a real `causeway` process.

- A forged state.json that copies every world-readable value of a process (pid, start time,
  command line) no longer gets it killed: `down` signals only processes carrying the state dir's
  mark in their environment, which only their owner can read.
- A state.json that is a FIFO no longer hangs `status` and `down`, a 300 MB one is not read
  whole, and an unwritable state dir gets one line, not a traceback.
- Cluster, mirror and datacenter names follow the topology name's pattern (`topology check`
  names file, line and key), and nothing `up` writes leaves the state dir, symbolic links
  included.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from deploy.launcher.plan import ClusterPlan, LaunchPlan, MirrorPlan
from deploy.process_identity import STATE_DIR_ENV, identity_of
from tests.integration.test_hardening_launcher import SOLO, state_naming
from tests.unit.topology.test_hostile_yaml import PEAK_RSS_LIMIT_KB, run_measured

REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534


def causeway(*args: str, as_nobody: bool = False) -> subprocess.CompletedProcess[str]:
    """The CLI as a real process (as user nobody: through setpriv), bounded: a command that hangs
    fails the test with a timeout."""
    user = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"] if as_nobody else []
    return subprocess.run([*user, sys.executable, "-m", "deploy.cli", *args], capture_output=True, text=True,
                          timeout=120, cwd=REPO, stdin=subprocess.DEVNULL)


def _forge(state: Path, pid: int, *, named: str) -> None:
    """A state file naming `pid` with its true start time and command line, as the launcher, as
    a broker, or as both: everything a forger can read about any process."""
    identity = identity_of(pid)
    assert identity is not None
    doc = state_naming(pid, identity.start_time, list(identity.cmdline))
    if named == "broker":
        doc.update(pid=None, start_time=None, cmdline=None)
        doc["wan"] = {"api": "127.0.0.1:1", "proxies": []}  # type: ignore[assignment]
    state.mkdir(parents=True, exist_ok=True)
    (state / "state.json").write_text(json.dumps(doc))


@pytest.mark.parametrize(("named", "mark"), [("launcher", None), ("broker", None), ("launcher", "other"),
                                             ("broker", "other")],
                         ids=["launcher-unmarked", "broker-unmarked", "launcher-other-mark", "broker-other-mark"])
def test_a_forged_state_file_naming_a_live_process_exactly_gets_it_left_alone(
        tmp_path: Path, named: str, mark: str | None) -> None:
    state = tmp_path / "state"
    env = dict(os.environ)
    env.pop(STATE_DIR_ENV, None)
    if mark is not None:  # a process of another state dir: its mark names that one, not this
        env[STATE_DIR_ENV] = str((tmp_path / mark).resolve())
    sleeper = subprocess.Popen(["sleep", "600"], env=env)
    try:
        _forge(state, sleeper.pid, named=named)
        report = causeway("status", "--state-dir", str(state))
        assert report.returncode == 1, report.stdout + report.stderr  # nothing of ours runs
        assert f"pid {sleeper.pid}" in report.stdout and "another process" in report.stdout, report.stdout
        down = causeway("down", "--state-dir", str(state))
        assert down.returncode == 0, down.stdout + down.stderr
        assert f"pid {sleeper.pid} is not the process the state file recorded" in down.stdout, down.stdout
        assert "stopped" not in down.stdout
        assert sleeper.poll() is None  # the sleep survives
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_fifo_state_file_gets_an_answer_not_a_hang(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    path = state / "state.json"
    os.mkfifo(path)
    report = causeway("status", "--state-dir", str(state))  # the run's timeout fails a hang
    assert report.returncode == 1 and "is a FIFO, not a regular file" in report.stdout, report.stdout + report.stderr
    again = causeway("up", str(_solo(tmp_path)), "--state-dir", str(state))  # `up` reads it first too
    assert again.returncode == 1 and "is a FIFO" in again.stderr, again.stdout + again.stderr
    down = causeway("down", "--state-dir", str(state))
    out = down.stdout + down.stderr
    assert down.returncode == 1 and "is a FIFO" in out and "Traceback" not in out, out
    assert (state / "state.json.damaged").is_fifo() and not path.exists()  # set aside, not deleted


def test_a_300_mb_state_file_is_not_read_whole(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    path = state / "state.json"
    with path.open("wb") as f:  # sparse: 300 MB of spaces to a reader, nothing on disk
        f.truncate(300 * 1024 * 1024)
    for command in ("status", "down"):
        code, output, peak_kb = run_measured(tmp_path, command, "--state-dir", str(state))
        assert code == 1 and "is larger than" in output and "Traceback" not in output, output
        assert 0 < peak_kb < PEAK_RSS_LIMIT_KB, f"{command}: peak RSS {peak_kb} KB"


def _solo(tmp_path: Path, text: str = SOLO) -> Path:
    path = tmp_path / "solo.yaml"
    path.write_text(text)
    return path


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory other users may read (pytest's tmp_path is private to its user)."""
    path = Path(tempfile.mkdtemp(prefix="causeway-test-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path)


def test_an_unwritable_state_dir_gets_one_line(shared_dir: Path) -> None:
    # A failure, not a skip, where it cannot run: `make test` runs as root, as CI does.
    assert os.geteuid() == 0 and shutil.which("setpriv") is not None, \
        "needs root and setpriv (util-linux) to run the CLI as another user"
    # Root writes anywhere, so the CLI runs as nobody against a dir only root may write.
    tmp_path = shared_dir
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    up = causeway("up", str(_solo(tmp_path)), "--state-dir", str(state), as_nobody=True)
    lines = up.stderr.strip().splitlines()
    assert up.returncode == 1 and len(lines) == 1, up.stdout + up.stderr
    assert f"cannot write the state dir {state}" in lines[0] and "Permission denied" in lines[0], lines
    assert list(state.iterdir()) == []  # nothing started, nothing written

    # `down` finds nothing of its own to stop but cannot remove the state file: said in one line.
    sleeper = subprocess.Popen(["sleep", "600"])
    try:
        _forge(state, sleeper.pid, named="launcher")
        down = causeway("down", "--state-dir", str(state), as_nobody=True)
        assert down.returncode == 1 and "Traceback" not in down.stderr, down.stdout + down.stderr
        assert f"cannot remove the state file {state / 'state.json'}: Permission denied" in down.stderr, down.stderr
        assert sleeper.poll() is None and (state / "state.json").exists()
    finally:
        sleeper.kill()
        sleeper.wait()


ESCAPING = """\
name: escape
datacenters:
  here: {}
  ../there: {}
clusters:
  ../../x:
    datacenter: here
  one:
    datacenter: here
mirrors:
  ../../m:
    source: one
    target: one
"""


def test_names_that_lead_out_of_the_state_dir_are_refused_with_line_and_key(tmp_path: Path) -> None:
    path = tmp_path / "t" / "escape.yaml"
    path.parent.mkdir()
    path.write_text(ESCAPING)
    check = causeway("topology", "check", str(path))
    assert check.returncode == 1, check.stdout + check.stderr
    for where in ("4:3: datacenters.../there", "6:3: clusters.../../x", "11:3: mirrors.../../m"):
        assert f"{path}:{where}: " in check.stderr and "is not a valid name" in check.stderr, check.stderr
    state = tmp_path / "t" / "a" / "state"
    up = causeway("up", str(path), "--state-dir", str(state))
    assert up.returncode == 1 and "is not a valid name" in up.stderr, up.stdout + up.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t"]
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == ["escape.yaml"]  # nothing written anywhere


def test_a_symbolic_link_in_the_state_dir_leading_out_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (state / "logs").symlink_to(outside)
    up = causeway("up", str(_solo(tmp_path)), "--state-dir", str(state))
    assert up.returncode == 1 and "leads out of the state dir" in up.stderr, up.stdout + up.stderr
    assert "Traceback" not in up.stderr and list(outside.iterdir()) == []


@pytest.mark.parametrize("make", [
    lambda: ClusterPlan("../../x", "here"),
    lambda: ClusterPlan("one", "a/b"),
    lambda: MirrorPlan("../m", "one", "two"),
    lambda: LaunchPlan("..", ()),
])
def test_a_plan_built_without_a_topology_file_checks_names_too(make: Callable[[], object]) -> None:
    with pytest.raises(ValueError, match="is not a valid name"):
        make()
