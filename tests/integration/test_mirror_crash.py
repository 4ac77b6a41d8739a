"""A mirror process killed with SIGKILL mid-stream and started again: nothing lost, order kept,
and the only repeats are the records written after the last position checkpoint."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

import trio

from broker.client import open_client
from deploy.broker_process import BrokerProcess
from mirror.formats import decode_position
from mirror.topics import read_whole_topic
from tests.integration.mirror_process import finish_steady_run, produce_steadily, start_mirror
from tests.integration.test_mirror import content, read_partition, wait_for_end_offsets
from tests.support.polling import wait_for

RECORDS = 6000




async def stored_positions(bootstrap: str) -> dict[int, int]:
    async with open_client(bootstrap) as client:
        records = await read_whole_topic(client, "mm2-offsets.east.internal")
    out: dict[int, int] = {}
    for r in records:
        decoded = decode_position(r.key or b"", r.value)
        if decoded is not None and decoded[3] is not None:
            out[decoded[2]] = decoded[3]
    return out


async def test_sigkill_repeats_only_what_followed_the_last_checkpoint(east: BrokerProcess, west: BrokerProcess,
                                                                      tmp_path: Path) -> None:
    config = tmp_path / "mirror.yaml"
    config.write_text(json.dumps({
        "source": {"alias": "east", "bootstrap": east.bootstrap},
        "target": {"alias": "west", "bootstrap": west.bootstrap},
        "refresh.topics.interval.seconds": 0.2, "offset.flush.interval.ms": 300}))
    done = threading.Event()
    producer = threading.Thread(target=produce_steadily, args=(east.bootstrap, done, RECORDS))
    producer.start()
    try:
        status = tmp_path / "status.json"
        mirror = start_mirror(config, tmp_path / "mirror.log", status)
        await wait_for_end_offsets(west.bootstrap, "east.orders", {0: 500, 1: 500, 2: 500})

        async def checkpointed() -> bool:
            return len(await stored_positions(west.bootstrap)) == 3

        await wait_for(checkpointed, what="a position checkpoint of every partition")
        os.kill(mirror.pid, signal.SIGKILL)  # mid-stream: the producer is still writing
        mirror.wait()
        stored = await stored_positions(west.bootstrap)
        mirror = start_mirror(config, tmp_path / "mirror.log", status)
        await finish_steady_run(mirror, status, done, RECORDS)
    finally:
        producer.join(120)
    for p in range(3):
        source = content(await read_partition(east.bootstrap, "orders", p))
        target = content(await read_partition(west.bootstrap, "east.orders", p))
        assert len(source) == RECORDS // 3
        # The target is the source up to what the first run wrote (at least the checkpoint), then
        # the source again from just after the checkpoint: repeats only, nothing lost or reordered.
        resume = stored.get(p, -1) + 1
        written_first = len(target) - (len(source) - resume)
        assert written_first >= resume, f"partition {p}: records lost"
        assert target == source[:written_first] + source[resume:], f"partition {p}: not a clean resume"
    await trio.lowlevel.checkpoint()
