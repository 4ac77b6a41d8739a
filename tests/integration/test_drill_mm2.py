"""`causeway drill` on an mm2-mode mirror (examples/dr-link.yaml with `mode: mm2`: one broker per
site, to be quick): a planned switch-over waits for the remote topics to hold every acknowledged
record, promotes (the local topics created with the source's partition counts), and moves the
group to the remote topics at the offsets the mirror translated for it. RPO 0; the records the
remote topics hold, read here on their own, are the ones the report counts; what the group read
again there is the report's re-read figure, the cost of translated offsets. A failover with the
link cut reports an RPO that the remote topics, read here, bear out."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from tests.integration.test_link_mode_launcher import causeway, status
from tests.integration.test_mm2_failover_launcher import mm2_example
from tests.support.consume import read_partition

MIRROR = "east-to-west"


@contextmanager
def mm2_topology(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """examples/dr-link.yaml in mm2 mode, brought up for one drill: (its file, the state dir)."""
    topology = mm2_example(tmp_path)
    state = tmp_path / "state"
    up = causeway("up", str(topology), "-d", "--state-dir", str(state))
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        yield topology, state
    finally:
        down = causeway("down", "--state-dir", str(state))
    assert down.returncode == 0, down.stdout + down.stderr


def drill(topology: Path, state: Path, *args: str) -> tuple[dict[str, Any], str]:
    done = causeway("drill", *args, str(topology), "--mirror", MIRROR, "--state-dir", str(state), "--rate", "300",
                    "--duration", "3", "--json", timeout_s=300)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    report: dict[str, Any] = json.loads(done.stdout)
    assert report["mode"] == "mm2", output
    return report, output


def test_an_mm2_switchover_drill_counts_what_translated_offsets_cost(tmp_path: Path) -> None:
    with mm2_topology(tmp_path) as (topology, state):
        report, output = drill(topology, state, "switchover", "--max-rpo", "0")
        names = [s["name"] for s in report["timeline"]]
        assert names[:5] == ["workload at the primary", "producers stopped", "group caught up at the primary",
                             "copy caught up at the DR site", "promote"], output
        rpo = report["rpo"]
        assert rpo["records"] == 0 and rpo["acknowledged"] > 0 and rpo["reached_dr"] == rpo["acknowledged"], output
        assert report["group"]["skipped"] == 0, output
        reread = report["group"]["reread"]
        # Against the translated offsets the DR site held for the group at the promotion: it
        # resumed there, so it re-read exactly what it had read at the primary past them.
        assert reread == report["group"]["reread_expected"], output
        assert report["group"]["reread_below_committed"] == 0, output
        assert 0 <= reread <= rpo["acknowledged"], output
        west = status(state)["clusters"]["west"]["bootstrap"]
        # The promotion made the local topics as at the source; the DR site's producers wrote there.
        metadata = AdminClient({"bootstrap.servers": west}).list_topics(timeout=10).topics
        assert {t: len(metadata[t].partitions) for t in ("orders", "payments", "east.orders", "east.payments")} == {
            "orders": 3, "payments": 2, "east.orders": 3, "east.payments": 2}
        # The remote topics hold each acknowledged record of the primary once, at offsets of their own.
        held = primary_records_at_remote(west, report["run"])
        assert len(held) == rpo["acknowledged"] and len(set(held)) == len(held), output


def test_an_mm2_failover_drill_with_the_link_cut_counts_what_the_remote_topics_hold(tmp_path: Path) -> None:
    with mm2_topology(tmp_path) as (topology, state):
        report, output = drill(topology, state, "failover", "--disaster", "partition")
        assert report["disaster"] == "partition", output
        assert "promote --failover" in [s["name"] for s in report["timeline"]], output
        rpo = report["rpo"]
        assert rpo["acknowledged"] > 0 and rpo["records"] == rpo["acknowledged"] - rpo["reached_dr"], output
        assert rpo["records"] == sum(p["records"] for p in rpo["partitions"]), output
        # The mirror copies each partition in order: what it lost is one run of offsets per partition.
        assert all(len(p["offsets"]) == 1 for p in rpo["partitions"]), output
        assert report["group"]["skipped"] == 0, output
        # What the remote topics hold now (the link is back, so the mirror may have copied more
        # since the promotion) is at least what the report counted at the promotion, each once.
        held = primary_records_at_remote(status(state)["clusters"]["west"]["bootstrap"], report["run"])
        assert len(held) == len(set(held)) >= rpo["reached_dr"], output

def primary_records_at_remote(bootstrap: str, run: str) -> list[str]:
    """This run's primary records in west's remote topics (east.orders, east.payments)."""
    names = []
    for topic, partitions in (("east.orders", 3), ("east.payments", 2)):
        for partition in range(partitions):
            for message in read_partition(bootstrap, topic, partition):
                name = (message.value() or b"").decode()
                if name.startswith(f"{run}:primary:"):
                    names.append(name)
    return names
