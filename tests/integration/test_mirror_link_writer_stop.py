"""A partition writer stopped with batches still queued (its source topic deleted while the
target was slow) returns, in mm2 and in link mode. It used to loop on the queued chunk without
ever yielding to trio, so the whole mirror process hung: the check runs in a child process with
a deadline, so a regression fails instead of hanging the test run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

SCRIPT = """
import trio
from broker.client import TopicPartition
from broker.protocol.records import Record, build_batch
from mirror.runtime import RETRY
from mirror.link import LinkPartition
from mirror.partition import Chunk, PartitionMirror, ProducerIdentity

async def main(mode):
    cls = LinkPartition if mode == "link" else PartitionMirror
    pm = cls(TopicPartition("t", 0), TopicPartition("t", 0), 0, 100, 1 << 20)
    pm.put(Chunk.of(build_batch([Record(b"k", b"v")])))
    pm.stop()
    with trio.fail_after(5):
        if mode == "link":
            await pm.run_link_writer(None, backoff=RETRY)
        else:
            await pm.run_writer(None, ProducerIdentity(), lambda *a: None, backoff=RETRY)
    assert pm.queued_bytes > 0  # not written: stopped
    print("returned")

trio.run(main, {mode!r})
"""


@pytest.mark.parametrize("mode", ["mm2", "link"])
def test_a_stopped_writer_with_queued_batches_returns(mode: str) -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT.format(mode=mode)], cwd=REPO, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0 and done.stdout.strip() == "returned", done.stderr
