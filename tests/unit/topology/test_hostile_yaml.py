"""Hostile topology and mirror files: `causeway topology check` and `causeway mirror --config` as
real processes. Each file gets exit 1 (2 for the mirror) and a problem line naming file, line and
key, with the process's peak RSS bounded (os.wait4 gives that child's own ru_maxrss). Before the
bounds, the 432-byte alias bomb below took 1.3 GB and 13 s to a MemoryError, and recursion, NUL
bytes and deep nesting were raw tracebacks.
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from mirror.config import load_mirror_config
from tests.support.polling import wait_until
from topology import TopologyError, load_topology
from topology.loader import MAX_DEPTH, MAX_FILE_BYTES, MAX_VALUES

ROOT = Path(__file__).resolve().parents[3]
# The CLI's own baseline (Python, pydantic, yaml) is ~90 MB; the worst bounded file adds ~30 MB.
PEAK_RSS_LIMIT_KB = 200 * 1024
# Without the bounds the bomb would take the machine's memory: cap the child's address space so a
# regression fails as a MemoryError instead.
ADDRESS_SPACE_CAP = 3 << 30
CHILD_TIMEOUT_S = 120


def alias_bomb() -> str:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    return "\n".join(lines) + "\n"


HEADER = "name: t\ndatacenters:\n  east: {}\n"
# (id, content, expected "line:column: key" of the first problem, a fragment of its message)
HOSTILE: list[tuple[str, str | bytes, str, str]] = [
    ("alias-bomb", alias_bomb(), r"5:30: a4\[5\]", f"more than {MAX_VALUES} values"),
    ("recursive-mapping", HEADER + "clusters: &c\n  east: *c\n", r"5:9: clusters.east", "recursive alias"),
    ("recursive-sequence", HEADER + "links: &l [*l]\n", r"4:12: links\[0\]", "recursive alias"),
    ("nul-byte", HEADER + "clusters:\n  east: {datacenter: ea\x00st}\n", r"5:24: clusters.east.datacenter",
     "control character"),
    ("deep-flow", "name: " + "[" * 5000 + "]" * 5000 + "\n", r"1:70: name(\[0\]){5}\.\.\.\(64 levels\)",
     f"more than {MAX_DEPTH} levels"),
    ("deep-block", "".join(" " * i + "k:\n" for i in range(1000)), r"64:64: k(\.k){5}\.\.\.\(63 levels\)",
     f"more than {MAX_DEPTH} levels"),
    ("too-large", "# " + "x" * MAX_FILE_BYTES + "\n", r"1:1: \(file\)", f"larger than {MAX_FILE_BYTES} bytes"),
    ("binary", HEADER.encode() + b"\x89PNG\r\n\x1a\n\xff\xfe", r"4:1: \(file\)", "not UTF-8"),
    ("bad-date", HEADER + "clusters:\n  east: {datacenter: 2001-13-45}\n", r"5:22: clusters.east.datacenter",
     "month must be in 1..12"),
    ("complex-key", HEADER + "? {? [a]: b}: c\n", r"4:3: \(top level\)", "must be a name"),
]


def _cap_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_CAP, ADDRESS_SPACE_CAP))


# The CLI run in-process by a wrapper that writes its own VmHWM when it exits. The peak is read
# from /proc/self/status because a forked child's ru_maxrss starts at its parent's high-water
# mark (Linux carries the pre-exec memory's peak over): under a large pytest process every
# child would seem to use what pytest uses.
_REPORT_PEAK = """
import atexit, runpy, sys
peak_file = sys.argv[1]
def report():
    with open("/proc/self/status") as status, open(peak_file, "w") as out:
        out.write(next(line.split()[1] for line in status if line.startswith("VmHWM:")))
atexit.register(report)
sys.argv = ["causeway", *sys.argv[2:]]
runpy.run_module("deploy.cli", run_name="__main__")
"""


def run_measured(tmp_path: Path, *args: str) -> tuple[int, str, int]:
    """(exit code, stderr + stdout, the CLI process's own peak RSS in KB, 0 when it could not
    say): the CLI as a real process."""
    out_path, err_path, peak_path = tmp_path / "out.txt", tmp_path / "err.txt", tmp_path / "peak.txt"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        proc = subprocess.Popen([sys.executable, "-c", _REPORT_PEAK, str(peak_path), *args], stdout=out,
                                stderr=err, stdin=subprocess.DEVNULL, cwd=ROOT, preexec_fn=_cap_address_space)
    reaped: list[tuple[int, int, resource.struct_rusage]] = []

    def exited() -> bool:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            reaped.append((pid, status, usage))
        return bool(pid)

    try:
        wait_until(exited, what=f"{args} to exit", timeout_s=CHILD_TIMEOUT_S)
    except AssertionError:
        proc.kill()
        os.wait4(proc.pid, 0)
        raise
    _, status, _ = reaped[0]
    proc.returncode = os.waitstatus_to_exitcode(status)
    peak_kb = int(peak_path.read_text()) if peak_path.exists() else 0
    return proc.returncode, err_path.read_text() + out_path.read_text(), peak_kb


def write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    path = tmp_path / f"{name}.yaml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


@pytest.mark.parametrize(("name", "content", "where", "message"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_topology_check_refuses_hostile_files_with_file_and_line(tmp_path: Path, name: str, content: str | bytes,
                                                                 where: str, message: str) -> None:
    path = write(tmp_path, name, content)
    code, output, peak_kb = run_measured(tmp_path, "topology", "check", str(path))
    assert code == 1, output
    assert "Traceback" not in output
    first = output.splitlines()[0]
    assert re.match(rf"{re.escape(str(path))}:{where}: ", first), first
    assert message in first, first
    assert 0 < peak_kb < PEAK_RSS_LIMIT_KB, f"peak RSS {peak_kb} KB"


@pytest.mark.parametrize("name", ["alias-bomb", "recursive-mapping", "nul-byte", "deep-flow"])
def test_mirror_config_goes_through_the_same_bounds(tmp_path: Path, name: str) -> None:
    _, content, where, message = next(h for h in HOSTILE if h[0] == name)
    path = write(tmp_path, name, content)
    code, output, peak_kb = run_measured(tmp_path, "mirror", "--config", str(path))
    assert code == 2, output
    assert "Traceback" not in output
    assert re.search(rf"^{re.escape(str(path))}:{where}: .*{re.escape(message)}", output, re.M), output
    assert 0 < peak_kb < PEAK_RSS_LIMIT_KB, f"peak RSS {peak_kb} KB"


# In process only the files that cannot take this process's memory if the bounds regress.
IN_PROCESS = [h for h in HOSTILE if h[0] != "alias-bomb"]


@pytest.mark.parametrize(("name", "content", "where", "message"), IN_PROCESS, ids=[h[0] for h in IN_PROCESS])
def test_loaders_raise_problems_in_process(tmp_path: Path, name: str, content: str | bytes, where: str,
                                           message: str) -> None:
    path = write(tmp_path, name, content)
    for load in (load_topology, load_mirror_config):
        with pytest.raises(TopologyError) as caught:
            load(path)
        assert message in str(caught.value)


def test_aliases_within_the_bound_still_work(tmp_path: Path) -> None:
    path = write(tmp_path, "ok", """\
        name: t
        datacenters: {east: {}, west: {}}
        clusters:
          east: &c {datacenter: east, topics: {orders: 3}}
          west: {datacenter: west}
        links: [{between: [east, west], latency: 40ms}]
        mirrors: {e2w: {source: east, target: west}}
        """.replace("        ", ""))
    topology = load_topology(path)
    assert topology.clusters["east"].topics["orders"].partitions == 3
