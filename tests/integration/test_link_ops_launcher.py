"""Link operations on a topology `causeway up` started (examples/dr-link.yaml, real processes):
`causeway mirror list` and `describe` name the mirror and each topic's state, `pause` of one
topic stops its copy (PAUSED in describe, `causeway status` and its --json) while the other is
still copied, and `resume` brings every record the source took meanwhile, once, in order."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.integration.test_link_mode_launcher import (
    DEADLINE_S,
    EXAMPLE,
    MIRROR,
    assert_identical_copies,
    caught_up,
    causeway,
    copied_topology,
    ends,
    produce,
    status,
)
from tests.support.polling import wait_until


def described(state: Path) -> dict[str, Any]:
    done = causeway("mirror", "describe", EXAMPLE, "--mirror", MIRROR, "--state-dir", str(state), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    return {t["topic"]: t for t in json.loads(done.stdout)["topics"]}


def mirror_topic_state(state: Path, topic: str) -> dict[str, Any] | None:
    states: dict[str, Any] = status(state)["mirrors"][MIRROR].get("topic_states", {})
    return states.get(topic)


def test_list_describe_pause_resume_on_a_topology(tmp_path: Path) -> None:
    with copied_topology(tmp_path, 30) as (state, east, west):
        wait_until(lambda: (mirror_topic_state(state, "payments") or {}).get("state") == "ACTIVE",
                   what="payments ACTIVE in status", timeout_s=DEADLINE_S, interval_s=0.5)

        listed = causeway("mirror", "list", EXAMPLE, "--state-dir", str(state), "--json")
        assert listed.returncode == 0, listed.stdout + listed.stderr
        mirrors = json.loads(listed.stdout)["mirrors"]
        assert mirrors[MIRROR]["mode"] == "link" and mirrors[MIRROR]["topics"] == {"orders": "ACTIVE",
                                                                                 "payments": "ACTIVE"}
        shown = described(state)
        assert {t: (d["state"], d["lag"]) for t, d in shown.items()} == {"orders": ("ACTIVE", 0),
                                                                          "payments": ("ACTIVE", 0)}

        paused = causeway("mirror", "pause", EXAMPLE, "--mirror", MIRROR, "--state-dir", str(state),
                          "--topics", "orders")
        assert paused.returncode == 0, paused.stdout + paused.stderr
        before = ends(west, "orders", 3)
        produce(east, "orders", 3, 30, start=30)
        produce(east, "payments", 2, 20, start=30)
        # The other topic is still copied; the paused one is not, and says so everywhere.
        wait_until(lambda: ends(west, "payments", 2) == ends(east, "payments", 2), what="payments copied",
                   timeout_s=DEADLINE_S, interval_s=0.5)
        wait_until(lambda: mirror_topic_state(state, "orders") == {"state": "PAUSED", "reason": None, "lag": 30,
                                                                   "lag_ms": None},
                   what="status --json to show orders PAUSED with lag 30", timeout_s=DEADLINE_S, interval_s=0.5)
        assert ends(west, "orders", 3) == before
        table = causeway("status", "--state-dir", str(state)).stdout
        assert f"mirror {MIRROR}: topic orders PAUSED (lag 30)" in table, table
        assert status(state)["mirrors"][MIRROR]["healthy"], table  # a pause is a choice, not a problem
        shown = described(state)
        assert (shown["orders"]["state"], shown["orders"]["lag"]) == ("PAUSED", 30), shown
        assert (shown["payments"]["state"], shown["payments"]["lag"]) == ("ACTIVE", 0), shown
        text = causeway("mirror", "describe", EXAMPLE, "--mirror", MIRROR, "--state-dir", str(state)).stdout
        assert [line.split()[:4] for line in text.splitlines()[1:3]] == [["orders", MIRROR, "PAUSED", "30"],
                                                                          ["payments", MIRROR, "ACTIVE", "0"]], text
        unknown = causeway("mirror", "pause", EXAMPLE, "--mirror", "nobody", "--state-dir", str(state))
        assert unknown.returncode == 1 and "has no mirror 'nobody'" in unknown.stderr, unknown.stderr

        resumed = causeway("mirror", "resume", EXAMPLE, "--mirror", MIRROR, "--state-dir", str(state))
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        assert "resumed already: payments" in resumed.stdout, resumed.stdout
        wait_until(lambda: caught_up(east, west), what="orders copied after the resume", timeout_s=DEADLINE_S,
                   interval_s=0.5)
        assert assert_identical_copies(east, west) == 110
