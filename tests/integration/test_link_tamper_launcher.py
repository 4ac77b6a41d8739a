"""Issue 19 item 2 as it was measured: `causeway up examples/dr-link.yaml`, a LinkAppend at a
mirror topic's log end + 1,000,000 at the DR site, and records produced at east afterwards.

Before, the mirror skipped every later batch of that partition as "already there" and `causeway
status` said running, healthy, lag 0 (exit 0) while the records never arrived. Now the target
takes the sneaked batch only because its claim looks honest, the mirror finds its copy past the
source's end, stops that partition as FAILED, and `causeway status` says so and exits 2; the
other partitions keep being copied.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import trio

from broker.client import MIRROR_NAME_CONFIG, LinkAppendResult, TopicPartition, admin, link_append, open_client
from broker.protocol.errors import ErrorCode
from broker.protocol.records import Record, build_batch
from tests.integration.test_link_mode_launcher import EXAMPLE, MIRROR, ends, produce
from tests.support.polling import wait_until

REPO = Path(__file__).resolve().parents[2]
DEADLINE_S = 90.0


def causeway(*args: str, timeout_s: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "deploy.cli", *args], capture_output=True, text=True,
                          timeout=timeout_s, cwd=REPO)


def status(state: Path) -> tuple[int, dict[str, Any]]:
    done = causeway("status", "--json", "--state-dir", str(state))
    return done.returncode, json.loads(done.stdout)


async def sneak_ahead(west: str, tp: TopicPartition, end: int) -> LinkAppendResult:
    """Another sender's LinkAppend as the mirror topic's own mirror, one batch at `end` +
    1,000,000, claiming the source has nothing in between (as a compacted source may)."""
    async with open_client(west) as client:
        owner = (await admin.describe_configs(client, tp.topic))[MIRROR_NAME_CONFIG].value
        assert owner
        batch = build_batch([Record(b"x", b"not from east")], base_offset=end + 1_000_000)
        return (await link_append(client, owner, {tp: batch}, previous_ends={tp: end}))[tp]


def test_a_mirror_topic_moved_ahead_at_the_dr_site_makes_causeway_status_fail(tmp_path: Path) -> None:
    state = tmp_path / "state"
    up = causeway("up", EXAMPLE, "-d", "--state-dir", str(state))
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        _, doc = status(state)
        east, west = doc["clusters"]["east"]["bootstrap"], doc["clusters"]["west"]["bootstrap"]
        produce(east, "orders", 3, 60)
        wait_until(lambda: ends(west, "orders", 3) == ends(east, "orders", 3), what="orders copied to west",
                   timeout_s=DEADLINE_S, interval_s=0.5)
        copied = ends(west, "orders", 3)
        assert copied is not None
        sneaked = trio.run(sneak_ahead, west, TopicPartition("orders", 0), copied[0])
        assert sneaked.error == ErrorCode.NONE, sneaked
        produce(east, "orders", 3, 60, start=60)
        source = ends(east, "orders", 3)
        assert source is not None

        def failed() -> bool:
            code, report = status(state)
            mirror = report["mirrors"][MIRROR]
            return code == 2 and any("FAILED orders-0" in reason for reason in mirror["unhealthy_because"])

        wait_until(failed, what="causeway status to report orders-0 FAILED", timeout_s=DEADLINE_S, interval_s=0.5)
        # orders-1 and orders-2 go on; orders-0 takes nothing more on top of the sneaked batch.
        wait_until(lambda: {p: e for p, e in (ends(west, "orders", 3) or {}).items() if p} == {
            p: e for p, e in source.items() if p}, what="orders-1 and orders-2 copied", timeout_s=DEADLINE_S,
            interval_s=0.5)
        assert (ends(west, "orders", 3) or {}).get(0) == copied[0] + 1_000_001
        code, report = status(state)
        mirror = report["mirrors"][MIRROR]
        assert code == 2 and not report["healthy"] and not mirror["healthy"]
        # Found by the mirror's own check (the copy ends past east's high watermark) or by the
        # target (the mirror's next batch is below its log end but not there): whichever came first.
        why = next(reason for reason in mirror["unhealthy_because"] if "FAILED orders-0" in reason)
        assert "past the source's high watermark" in why or "not the batch held there" in why, why
        table = causeway("status", "--state-dir", str(state))
        assert table.returncode == 2 and "FAILED orders-0" in table.stdout, table.stdout
    finally:
        down = causeway("down", "--state-dir", str(state))
    assert down.returncode == 0, down.stdout + down.stderr
