"""Issue 19, item 17: `causeway status` on a running link-mode topology (examples/dr-link.yaml).

- During a WAN cut it showed `LAG 0` and the last source ends it had seen: now the source is
  unreachable since a time that stays put, and the lag is unknown (`>=N`), never a figure.
- After promotion it said "healthy" while nothing was mirrored any more: now `promoted`.
- With frozen (SIGSTOPped) brokers each probe waited its own timeout one after the other: now
  every probe runs at once, each bounded, and says so.
- `status --json | head -c 10` ended in a BrokenPipe traceback: now it exits with its code.

Every command is a real `causeway` process; the brokers, the mirror and the emulator are the
launcher's.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from broker.clock import now_ms
from deploy.launcher.control import PROBE_TIMEOUT_S
from tests.integration.test_hardening_wan import call
from tests.integration.test_link_mode_launcher import DEADLINE_S, EXAMPLE, MIRROR, TOPICS, caught_up, causeway, produce
from tests.support.polling import wait_until

REPO = Path(__file__).resolve().parents[2]


def status(state: Path) -> tuple[int, dict[str, Any]]:
    done = causeway("status", "--json", "--state-dir", str(state), timeout_s=60)
    return done.returncode, json.loads(done.stdout)


def mirror_row(table: str) -> list[str]:
    return next(line for line in table.splitlines() if line.startswith(MIRROR)).split()


def test_status_through_a_wan_cut_frozen_brokers_a_closed_pipe_and_a_promotion(tmp_path: Path) -> None:
    state = tmp_path / "state"
    started_ms = now_ms()
    up = causeway("up", EXAMPLE, "-d", "--state-dir", str(state))
    frozen: list[int] = []
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        _, doc = status(state)
        east, west = doc["clusters"]["east"]["bootstrap"], doc["clusters"]["west"]["bootstrap"]
        api, links = doc["wan"]["api"], list(json.loads((state / "state.json").read_text())["wan"]["proxies"])
        for topic, partitions in TOPICS.items():
            produce(east, topic, partitions, 30)
        wait_until(lambda: caught_up(east, west), what="the copy to catch up", timeout_s=DEADLINE_S, interval_s=0.5)
        wait_until(lambda: status(state)[1]["mirrors"][MIRROR].get("lag") == 0, what="status to show lag 0",
                   timeout_s=DEADLINE_S, interval_s=0.5)

        # -- a WAN cut: east still takes writes the mirror cannot see ------------------------
        for link in links:
            assert call(api, "POST", f"/proxies/{link}", '{"enabled": false}')[0] == 200
        produce(east, "orders", 3, 20, start=30)

        def cut_off() -> bool:
            return status(state)[1]["mirrors"][MIRROR].get("source_reachable") is False

        wait_until(cut_off, what="status to see the source unreachable", timeout_s=DEADLINE_S, interval_s=0.5)
        code, doc = status(state)
        mirror = doc["mirrors"][MIRROR]
        assert code == 2 and not mirror["healthy"]
        assert mirror["lag"] is None and mirror["lag_at_least"] == 0, mirror  # unknown, never "0"
        assert all(p["lag"] is None and p["lag_at_least"] == 0 for p in mirror["partitions"]), mirror["partitions"]
        since = mirror["source_unreachable_since_ms"]
        assert since is not None and started_ms < since <= now_ms(), mirror  # when fetches last answered
        table = causeway("status", "--state-dir", str(state), timeout_s=60).stdout
        row = mirror_row(table)
        assert "UNREACHABLE" in row and ">=0" in row, table
        assert f"mirror {MIRROR}: cannot reach its source east since " in table and "lag unknown, at least 0" in table
        assert status(state)[1]["mirrors"][MIRROR]["source_unreachable_since_ms"] == since  # it stays put

        for link in links:
            assert call(api, "POST", f"/proxies/{link}", '{"enabled": true}')[0] == 200
        wait_until(lambda: caught_up(east, west), what="the copy to catch up after the cut", timeout_s=DEADLINE_S,
                   interval_s=0.5)
        wait_until(lambda: status(state)[1]["mirrors"][MIRROR].get("lag") == 0, what="status to see lag 0 again",
                   timeout_s=DEADLINE_S, interval_s=0.5)
        assert status(state)[1]["mirrors"][MIRROR]["source_reachable"] is True

        # -- frozen brokers: every probe at once, each bounded ------------------------------
        frozen = [b["pid"] for c in doc["clusters"].values() for b in c["brokers"]]
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        code, doc = status(state)
        assert code == 2
        for cluster in doc["clusters"].values():
            assert [b["state"] for b in cluster["brokers"]] == ["not answering"], cluster
            # Given up within the probe's bound (what was left of it when the request went).
            reasons = cluster["unhealthy_because"]
            waited = [float(m) for r in reasons for m in re.findall(r"no answer within ([\d.]+) ?s", r)]
            assert waited and all(w <= PROBE_TIMEOUT_S for w in waited), reasons
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
        frozen = []

        # -- a reader that goes away: no traceback, the exit code says what status found -----
        for args in (["--json"], []):
            proc = subprocess.Popen([sys.executable, "-m", "deploy.cli", "status", *args, "--state-dir", str(state)],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
            assert proc.stdout is not None and proc.stderr is not None
            proc.stdout.close()  # before it writes: every write meets a closed pipe
            err = proc.stderr.read().decode()
            assert proc.wait(timeout=60) in (0, 2) and "Traceback" not in err and "BrokenPipe" not in err, err
        piped = subprocess.run(f"{sys.executable} -m deploy.cli status --json --state-dir {state} | head -c 10",
                               shell=True, capture_output=True, cwd=REPO, timeout=60)
        assert piped.stdout == b'{\n  "name"' and b"Traceback" not in piped.stderr, piped

        # -- promotion: nothing is mirrored any more, and status says so --------------------
        promoted = causeway("mirror", "promote", EXAMPLE, "--mirror", MIRROR, "--state-dir", str(state),
                            "--timeout", "60")
        assert promoted.returncode == 0, promoted.stdout + promoted.stderr

        def says_promoted() -> bool:
            return status(state)[1]["mirrors"][MIRROR].get("state") == "promoted"

        wait_until(says_promoted, what="status to call the mirror promoted", timeout_s=DEADLINE_S, interval_s=0.5)
        mirror = status(state)[1]["mirrors"][MIRROR]
        assert sorted(mirror["promoted"]) == sorted(TOPICS) and mirror["topics"] == {}, mirror
        table = causeway("status", "--state-dir", str(state), timeout_s=60).stdout
        assert "promoted" in mirror_row(table), table
        assert f"mirror {MIRROR}: promoted at west: orders, payments" in table and "nothing is mirrored" in table
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
        down = causeway("down", "--state-dir", str(state))
    assert down.returncode == 0, down.stdout + down.stderr
