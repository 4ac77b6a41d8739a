"""`causeway status --watch` on a running topology, its stdout a pipe: plain snapshots, a killed
broker named in the recent events, and Ctrl-C (SIGINT) ending it with exit 0; on a terminal,
Ctrl-C gives the terminal back as it was."""

from __future__ import annotations

import os
import pty
import queue
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from deploy.launcher.control import read_state

REPO = Path(__file__).resolve().parents[2]
#: How long a line may take to appear: bounded, never a wait for time to pass.
DEADLINE_S = 120.0

# The smallest topology with everything the view shows: a two-broker ZooKeeper cluster (so one
# can die), a one-broker one, a shared WAN link and a mirror across it. At `down` the survivor's
# controlled shutdown asks the killed broker, the controller as far as ZooKeeper knows until its
# session expires, and is refused 3 times (controlled.shutdown.max.retries): 1 s apart here
# rather than Kafka's 5 s, which this test is not about.
TOPOLOGY = """\
name: watch
datacenters:
  east: {}
  west: {}
clusters:
  east:
    datacenter: east
    brokers: 2
    coordination: zookeeper
    configs:
      default.replication.factor: 2
      controlled.shutdown.retry.backoff.ms: 1000
    topics:
      orders: 2
  west:
    datacenter: west
links:
  - between: [east, west]
    latency: 5ms
    bandwidth: 100Mbit
mirrors:
  east-to-west:
    source: east
    target: west
    topics:
      include: [".*"]
"""


def causeway(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "deploy.cli", *args], capture_output=True, text=True,
                          timeout=180, cwd=REPO)


class Lines:
    """A process's stdout, line by line, read in a thread so that waiting for a line is bounded."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        assert process.stdout is not None
        stdout = process.stdout

        def pump() -> None:
            for line in stdout:
                self.lines.put(line)
            self.lines.put(None)

        threading.Thread(target=pump, daemon=True).start()

    def until(self, wanted: Callable[[str], bool]) -> str:
        deadline = time.monotonic() + DEADLINE_S
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError("no such line; the view printed:\n" + "".join(self.seen[-60:])) from None
            if line is None:
                raise AssertionError("the view ended; it printed:\n" + "".join(self.seen[-60:]))
            self.seen.append(line)
            if wanted(line):
                return line


def test_the_live_view_names_a_killed_broker_and_ends_on_ctrl_c(tmp_path: Path) -> None:
    topology = tmp_path / "watch.yaml"
    topology.write_text(TOPOLOGY)
    state_dir = tmp_path / "state"
    up = causeway("up", str(topology), "-d", "--state-dir", str(state_dir))
    view = None
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        view = subprocess.Popen([sys.executable, "-m", "deploy.cli", "status", "--watch", "--interval", "0.2",
                                 "--state-dir", str(state_dir)], stdout=subprocess.PIPE, text=True, cwd=REPO)
        lines = Lines(view)
        # Snapshots come one after another, each whole: heading, tables, the link, the events.
        for _ in range(2):
            assert lines.until(lambda line: line.startswith("topology watch ")).endswith("(rates: the last 5 s)\n")
            broker = lines.until(lambda line: line.split()[:2] == ["east", "2"])
            assert broker.split()[2] == "serving"
            link = lines.until(lambda line: line.startswith("east~west"))
            assert "100.0 Mbit/s" in link
            lines.until(lambda line: line.startswith("recent events:"))

        state = read_state(state_dir)
        assert state is not None
        victim = state.clusters["east"].brokers[1]
        assert victim.id == 2 and victim.pid is not None
        os.kill(victim.pid, signal.SIGKILL)
        # Down, or already restarted by the launcher and not answering yet: whichever the next
        # snapshot saw, the event names the broker and what it was.
        lines.until(lambda line: " cluster east: broker 2 " in line and "(was serving" in line)

        # A frozen broker (SIGSTOP: its kernel still accepts connections, it never answers) costs a
        # redraw one probe's bound; the view goes on, and sees it thaw.
        frozen = state.clusters["west"].brokers[0].pid
        assert frozen is not None
        os.kill(frozen, signal.SIGSTOP)
        try:
            lines.until(lambda line: line.endswith(" cluster west: broker 0 not answering (was serving)\n"))
        finally:
            os.kill(frozen, signal.SIGCONT)
        lines.until(lambda line: line.endswith(" cluster west: broker 0 serving (was not answering)\n"))

        view.send_signal(signal.SIGINT)
        assert view.wait(timeout=DEADLINE_S) == 0
        assert not any("\x1b" in line for line in lines.seen)  # a pipe gets no escape codes
    finally:
        if view is not None and view.poll() is None:
            view.kill()
            view.wait()
        down = causeway("down", "--state-dir", str(state_dir))
    assert down.returncode == 0, down.stderr


def test_on_a_terminal_ctrl_c_restores_it_and_exits_0(tmp_path: Path) -> None:
    # Nothing runs from this state dir: the view says so, redrawn in place on the alternate screen.
    controller, terminal = pty.openpty()
    view = subprocess.Popen([sys.executable, "-m", "deploy.cli", "status", "--watch", "--interval", "0.2",
                             "--state-dir", str(tmp_path)], stdin=terminal, stdout=terminal, stderr=terminal,
                            cwd=REPO)
    os.close(terminal)
    shown = b""
    try:
        deadline = time.monotonic() + DEADLINE_S
        while b"nothing is running from" not in shown:
            ready, _, _ = select.select([controller], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, shown
            shown += os.read(controller, 65536)
        view.send_signal(signal.SIGINT)
        assert view.wait(timeout=DEADLINE_S) == 0
        while True:  # the rest of what it wrote, up to the end of the terminal's output
            ready, _, _ = select.select([controller], [], [], 0)
            chunk = os.read(controller, 65536) if ready else b""
            if not chunk:
                break
            shown += chunk
    except OSError:
        pass  # EIO: the terminal's only writer is gone, everything was read
    finally:
        if view.poll() is None:
            view.kill()
            view.wait()
        os.close(controller)
    assert shown.startswith(b"\x1b[?1049h")  # onto the alternate screen
    assert shown.endswith(b"\x1b[?25h\x1b[?1049l")  # the cursor shown again, back to the normal screen
