"""A link-mode mirror stopped and started, cancelled mid-write, and a `causeway mirror` process
killed with SIGKILL mid-stream: each partition resumes from the target's high watermark, so the
copy ends with the source's records at the source's offsets, no repeat and no gap."""

from __future__ import annotations

import json
import os
import signal
import threading
from functools import partial
from pathlib import Path

import trio

from broker.client import Client, admin, open_client, produce
from broker.client.admin import NewTopic
from broker.protocol.errors import KafkaError
from broker.protocol.records import Record, build_batch
from deploy.broker_process import BrokerProcess
from mirror.driver import run_mirror
from mirror.runtime import Mirror
from tests.integration.mirror_process import produce_steadily, read_status, start_mirror, status_positions
from tests.integration.test_mirror_link import NAME, assert_same_copy, ends_of, link_config, running, wait_copied
from tests.support.polling import wait_for

RECORDS = 6000


def produce_with_seq(bootstrap: str, done: threading.Event) -> None:
    """RECORDS records, steadily, each with its sequence number in a "seq" header."""
    produce_steadily(bootstrap, done, RECORDS, seq_headers=True)


async def copied_at_least(west: BrokerProcess, count: int) -> bool:
    try:
        ends = await ends_of(west.bootstrap, "orders", 3)
    except KafkaError:  # not there yet
        return False
    return sum(ends.values()) >= count


async def test_stop_start_and_cancel_resume_without_repeat_or_gap(east: BrokerProcess, west: BrokerProcess) -> None:
    config = link_config(east, west)
    done = threading.Event()
    producer = threading.Thread(target=produce_with_seq, args=(east.bootstrap, done))
    producer.start()
    try:
        for round_ in range(4):
            target = 600 * (round_ + 1)
            if round_ % 2 == 0:
                async with running(config):  # a clean stop
                    await wait_for(partial(copied_at_least, west, target), what=f"{target} records copied")
                continue
            async with trio.open_nursery() as nursery:  # cancelled: a crash, with writes in flight
                await nursery.start(lambda task_status: run_mirror(config, task_status=task_status))
                await wait_for(partial(copied_at_least, west, target), what=f"{target} records copied")
                nursery.cancel_scope.cancel()
        await wait_for(done.is_set, what="the producer to finish", timeout_s=120)
        async with running(config) as mirror:
            await wait_copied(east, west, "orders", 3)
            await wait_for(lambda: mirror.status()["lag"] == 0 and len(mirror.partitions) == 3, what="no lag")
            positions = {p["partition"]: p["position"] for p in mirror.status()["partitions"]}
    finally:
        producer.join(120)
    assert positions == {p: RECORDS // 3 for p in range(3)}
    await assert_same_copy(east, west, "orders", 3)


async def test_restart_in_process_starts_each_partition_at_the_target_end(east: BrokerProcess,
                                                                         west: BrokerProcess) -> None:
    await trio.to_thread.run_sync(lambda: produce_with_seq(east.bootstrap, threading.Event()))
    config = link_config(east, west)
    async with running(config):
        await wait_copied(east, west, "orders", 3)
    ends = await ends_of(west.bootstrap, "orders", 3)
    async with trio.open_nursery() as nursery:
        mirror: Mirror = await nursery.start(lambda task_status: run_mirror(config, task_status=task_status))
        await wait_for(lambda: len(mirror.partitions) == 3, what="the partitions to start")
        starts = {tp.partition: pm.written_through + 1 for tp, pm in mirror.partitions.items()}
        await wait_for(lambda: mirror.status()["lag"] == 0 and all(
            p["source_end"] >= 0 for p in mirror.status()["partitions"]), what="no lag")
        records = mirror.status()["records"]
        mirror.stop()
    assert starts == ends
    assert records == 0, "a restart with nothing new copied something again"


async def test_sigkill_of_a_mirror_process_loses_and_repeats_nothing(east: BrokerProcess, west: BrokerProcess,
                                                                     tmp_path: Path) -> None:
    config = tmp_path / "mirror.yaml"
    config.write_text(json.dumps({
        "name": NAME, "mode": "link",
        "source": {"alias": "east", "bootstrap": east.bootstrap},
        "target": {"alias": "west", "bootstrap": west.bootstrap},
        "refresh.topics.interval.seconds": 0.2}))
    done = threading.Event()
    producer = threading.Thread(target=produce_with_seq, args=(east.bootstrap, done))
    producer.start()
    status = tmp_path / "status.json"
    log = tmp_path / "mirror.log"
    try:
        mirror = start_mirror(config, log, status)
        await wait_for(lambda: copied_at_least(west, 1500), what="1500 records copied")
        os.kill(mirror.pid, signal.SIGKILL)  # mid-stream: the producer is still writing
        mirror.wait()
        mirror = start_mirror(config, log, status)
        await wait_for(done.is_set, what="the producer to finish", timeout_s=120)

        def caught_up() -> bool:
            report = read_status(status)
            return (report is not None and report["mode"] == "link"
                    and status_positions(report) == {("orders", q): RECORDS // 3 for q in range(3)})

        await wait_for(caught_up, what="the restarted mirror to catch up", timeout_s=120)
        mirror.send_signal(signal.SIGTERM)
        assert mirror.wait(60) == 0, log.read_text()
    finally:
        producer.join(120)
    await assert_same_copy(east, west, "orders", 3)
    assert "Traceback" not in log.read_text()


async def produce_batch(bootstrap: str, topic: str, count: int, tag: str) -> None:
    async with open_client(bootstrap) as client:
        batch = build_batch([Record(f"{tag}-{i}".encode(), b"v") for i in range(count)])
        await produce(client, topic, 0, batch)


async def test_a_source_that_diverged_from_the_copy_fails_the_partition(east: BrokerProcess,
                                                                        west: BrokerProcess) -> None:
    async with open_client(east.bootstrap) as client:
        await admin.create_topics(client, {"ledger": NewTopic(1)})
    await produce_batch(east.bootstrap, "ledger", 10, "first")
    config = link_config(east, west, topics={"include": ["ledger"]})
    async with running(config):
        await wait_copied(east, west, "ledger", 1)
    # While the mirror is away the source topic is deleted and created again: a shorter log.
    async with open_client(east.bootstrap) as client:
        await admin.delete_topics(client, ["ledger"])
        await wait_for(lambda: _gone(client, "ledger"), what="ledger deleted")
        await admin.create_topics(client, {"ledger": NewTopic(1)})
    await produce_batch(east.bootstrap, "ledger", 5, "second")
    async with running(config) as mirror:
        await wait_for(lambda: "parked ledger-0" in mirror.status()["problems"], what="the partition parked")
        parked = mirror.status()["problems"]["parked ledger-0"]
        assert "the source log now ends at 5, before the copy's end 10" in parked
        # It grows past the copy's end: its batch [5, 14] straddles the copy's end, 10. The copy
        # is not this source's log: the partition stops, FAILED (copying on would mix the two).
        await produce_batch(east.bootstrap, "ledger", 10, "third")
        await wait_for(lambda: "FAILED ledger-0" in mirror.status()["problems"],
                       what="the target to refuse the straddling batch", timeout_s=60)
        problem = mirror.status()["problems"]["FAILED ledger-0"]
        failed = next(p for p in mirror.status()["partitions"] if p["topic"] == "ledger")["error"]
        topic_state = mirror.status()["topic_states"]["ledger"]  # the topic's link state says it too
    assert problem == failed and "source offsets 5..14" in problem and "straddles" in problem, problem
    assert topic_state["state"] == "FAILED" and topic_state["reason"] == failed, topic_state
    assert await ends_of(west.bootstrap, "ledger", 1) == {0: 10}  # the copy is left as it was


async def _gone(client: Client, topic: str) -> bool:
    return topic not in await admin.list_topics(client)
