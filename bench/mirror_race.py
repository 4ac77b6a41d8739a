"""MirrorMaker 2 against `causeway mirror`: alike topics, from the same Causeway source broker to
the same Causeway target, one mirror after the other; first on loopback, then over the emulated
WAN link.

    .venv/bin/python -m bench.mirror_race [--records 200000] [--size 100] [--partitions 4]
                                                 [--rate-mbit 100] [--latency-ms 40] [--no-wan]

Each mirror gets a topic of its own (`race-mm2`, `race-causeway`: same partitions, same records)
filled before it starts. Cold: the mirror is started (MM2: a JVM and a Connect herder; `causeway
mirror`: a Python process) and timed from its start to the first record at the target and to the
last one. Warm: with it running and caught up, the same records are produced again and timed from
the first produce to the last record at the target: the copy alone, since a cold start mixes
start-up into the copy (a mirror may fetch for seconds before its first write lands). Resident
memory is read from /proc after the cold copy. MM2 copies to `east.<topic>`, `causeway mirror` to
`south.<topic>`.

Over the WAN, the mirrors run beside the target (as MM2's docs advise: consume remotely, produce
locally) and reach the source through the WAN emulator (`causeway wan`) on the shared link
`causeway up` makes for such a topology link: latency each way and one bandwidth per direction
shared by every connection across it (deploy/wan/link.py). So each mirror runs with its default
number of tasks (fetch streams): MM2's tasks.max 1, `causeway mirror`'s 4; more connections get
no more of the link. The link's own rate is measured on one connection across the same link
before the mirrors run. The share of the link is the warm wave's record payload per second over
that rate (the records' framing, ~10 B each here, rides on top).

The warm wave's clock starts at the first produce, so it includes the producer's own ramp (its
client starting, its first batch filling): about half a second here, before the source holds a
single new record, and the same for either mirror. So the warm wave is also timed from the
first append at the source (its end offsets, polled every 5 ms) to the last record at the
target, and over the link the bytes that crossed it toward the mirror in that time are read from
the emulator's own counter (`causeway_wan_link_sent_bytes_total`): the link's use is those bytes
per second over the link's declared bandwidth, framing included. One line of figures per mirror
and setting, then ratios.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from bench.mirror import link_ceiling_mb_s
from bench.peers.events import ToolProcess, start_tool
from deploy.broker_process import BrokerProcess
from deploy.child_process import ChildProcess, rss_bytes
from deploy.launcher.launch import free_port, link_body
from deploy.launcher.plan import LinkPlan
from deploy.wan.client import WanClient
from deploy.wan.process import WanProcess

REPO = Path(__file__).resolve().parents[1]
MM2_JVM_FLAGS = ("-Xms128m", "-Xmx1g", "-XX:+UseG1GC", "-Xshare:auto", "-Xlog:disable",
                 "-Xlog:all=warning,cds*=off:stderr", "-Djava.awt.headless=true")
COPY_TIMEOUT_S = 600.0
POLL_S = 0.05  # with a client per poll (~10 ms), the timings' resolution is under 0.1 s
WARM_POLL_S = 0.01  # the warm wave's end: one client kept, so the resolution is ~15 ms
APPEND_POLL_S = 0.005  # the warm wave's first append at the source


def fill(bootstrap: str, topic: str, records: int, size: int, partitions: int, *, create: bool = True) -> None:
    if create:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
            future.result(timeout=60)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                         "compression.type": "none", "enable.idempotence": True})
    payload = bytes(size)
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value=payload, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(120) != 0:
        raise RuntimeError("records not acknowledged by the source")


def end_offsets(consumer: Consumer, topic: str, partitions: int) -> int:
    """The sum of `topic`'s end offsets (high watermarks) over its partitions, as `consumer` reads them."""
    return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1] for p in range(partitions))


def copied(target: BrokerProcess, topic: str, partitions: int) -> int:
    """Records at the target so far, through a new client each time: one client kept across the
    remote topic's creation went on answering "unknown partition" for it in one run."""
    consumer = Consumer({"bootstrap.servers": target.bootstrap, "group.id": "mirror-race"})
    try:
        return end_offsets(consumer, topic, partitions)
    except KafkaException:  # not created yet
        return 0
    finally:
        consumer.close()


def race(name: str, start: Callable[[], int], target: BrokerProcess, remote: str, records: int,
         partitions: int) -> dict[str, object]:
    began = time.monotonic()
    pid = start()
    first = None
    deadline = began + COPY_TIMEOUT_S
    while True:
        count = copied(target, remote, partitions)
        now = time.monotonic()
        if count and first is None:
            first = now - began
        if count >= records:
            break
        if now > deadline:
            raise RuntimeError(f"{name}: {count} of {records} records copied in {COPY_TIMEOUT_S} s")
        time.sleep(POLL_S)  # polling another process's progress; a benchmark, not a test
    done = time.monotonic() - began
    rss = rss_bytes(pid)
    assert first is not None
    return {"mirror": name, "first_record_s": round(first, 2), "all_records_s": round(done, 2),
            "copy_s": round(done - first, 2), "records_per_s": round(records / max(done - first, 1e-9)),
            "rss_mb": round(rss / 1e6)}


def run_pair(base: Path, source_bootstrap: str, fill_bootstrap: str, target: BrokerProcess, args: argparse.Namespace,
             tasks: int | None, setting: str, link_counter: Callable[[], int] | None = None) -> list[dict[str, object]]:
    """Fill the source, then MM2 and `causeway mirror` one after the other, each reaching the
    source at `source_bootstrap` (`fill_bootstrap`: the producer's way in, never through a link),
    with `tasks` tasks each (None: each mirror's default); `link_counter`: the bytes the link has
    carried toward the mirrors so far."""
    task_settings = {} if tasks is None else {"tasks.max": tasks}
    # A topic per mirror, alike (partitions, records, sizes): each mirror's second wave goes to its own.
    topics = ("race-mm2", "race-causeway")
    for topic in topics:
        fill(fill_bootstrap, topic, args.records, args.size, args.partitions)
    mm2: ToolProcess | None = None
    mirror: ChildProcess | None = None
    try:
        properties = base / "mm2.properties"
        properties.write_text("".join(f"{k} = {v}\n" for k, v in {
            "clusters": "east, west", "east.bootstrap.servers": source_bootstrap,
            "west.bootstrap.servers": target.bootstrap, "east->west.enabled": "true",
            "west->east.enabled": "false", "east->west.topics": topics[0], "replication.factor": "1",
            "config.storage.replication.factor": "1", "offset.storage.replication.factor": "1",
            "status.storage.replication.factor": "1", "offset-syncs.topic.replication.factor": "1",
            "heartbeats.topic.replication.factor": "1", "checkpoints.topic.replication.factor": "1",
            **{k: str(v) for k, v in task_settings.items()}}.items()))

        def start_mm2() -> int:
            nonlocal mm2
            mm2 = start_tool("connect-mirror-maker", str(properties), stderr_path=base / "mm2.log",
                             jvm_flags=MM2_JVM_FLAGS)
            return mm2.proc.pid

        def start_mirror() -> int:
            nonlocal mirror
            config = base / "mirror.yaml"
            config.write_text(json.dumps({"source": {"alias": "south", "bootstrap": source_bootstrap},
                                          "target": {"alias": "west", "bootstrap": target.bootstrap},
                                          "topics": {"include": [topics[1]]}, **task_settings}))
            mirror = ChildProcess.start("causeway mirror",
                                        [sys.executable, "-m", "deploy.cli", "mirror", "--config", str(config)],
                                        log_path=base / "mirror.log", stdout="discard", cwd=REPO)
            return mirror.pid

        results = [race("MirrorMaker 2 (4.3.1)", start_mm2, target, f"east.{topics[0]}", args.records,
                        args.partitions)]
        warm_wave(fill_bootstrap, topics[0], target, f"east.{topics[0]}", args, results[0], link_counter)
        assert mm2 is not None
        mm2.stop()
        results.append(race("causeway mirror", start_mirror, target, f"south.{topics[1]}", args.records,
                            args.partitions))
        warm_wave(fill_bootstrap, topics[1], target, f"south.{topics[1]}", args, results[1], link_counter)
    finally:
        if mm2 is not None:
            mm2.stop()
        if mirror is not None:
            mirror.stop(60)
    for result in results:
        result["setting"] = setting
        result["tasks"] = "default" if tasks is None else tasks
    return results


def loopback(base: Path, args: argparse.Namespace) -> list[dict[str, object]]:
    base.mkdir(parents=True)
    source = BrokerProcess(base / "source", overrides=("group.initial.rebalance.delay.ms=0",)).start()
    target = BrokerProcess(base / "target", overrides=("group.initial.rebalance.delay.ms=0",)).start()
    try:
        return run_pair(base, source.bootstrap, source.bootstrap, target, args, args.partitions, "loopback")
    finally:
        source.stop()
        target.stop()


def over_wan(base: Path, args: argparse.Namespace) -> tuple[list[dict[str, object]], float]:
    """Both mirrors through one emulated link to the source; returns their figures and the link's
    own rate in MB/s on one connection (raw bytes), measured in the same run."""
    base.mkdir(parents=True)
    local, wan, proxy = free_port(), free_port(), free_port()
    overrides = ("group.initial.rebalance.delay.ms=0",
                 f"listeners=LOCAL://127.0.0.1:{local},WAN://127.0.0.1:{wan}",
                 f"advertised.listeners=LOCAL://127.0.0.1:{local},WAN://127.0.0.1:{proxy}",
                 "listener.security.protocol.map=LOCAL:PLAINTEXT,WAN:PLAINTEXT", "inter.broker.listener.name=LOCAL")
    with WanProcess(log_path=base / "wan.log") as emulator:
        source = BrokerProcess(base / "source", overrides=overrides).start()
        target = BrokerProcess(base / "target", overrides=("group.initial.rebalance.delay.ms=0",)).start()
        try:
            plan = LinkPlan("target-dc", "source-dc", args.latency_ms, 0, args.rate_mbit * 1_000_000 // 8)
            client = WanClient(emulator.api)
            client.create_link(link_body(plan))
            on_link = {"name": plan.name, "upstream": "source-dc"}
            link = link_ceiling_mb_s(emulator.api, [], link=on_link)
            client.delete_proxy("ceiling")
            client.create_proxy("link", f"127.0.0.1:{proxy}", f"127.0.0.1:{wan}", link=on_link)
            setting = f"{args.rate_mbit} Mbit/s, {args.latency_ms} ms link"
            results = run_pair(base, f"127.0.0.1:{proxy}", source.listeners["LOCAL"], target, args, None, setting,
                               lambda: link_bytes_toward_mirror(emulator.api, "source-dc"))
        finally:
            source.stop()
            target.stop()
    for result in results:
        result["link_share"] = round(float(str(result["payload_mb_per_s"])) / link, 2)
        # Against what the link is declared to carry, as an operator reads a link's use.
        result["link_use_of_declared"] = round(float(str(result["link_mb_per_s"])) / (args.rate_mbit / 8), 2)
    return results, link


class FirstAppend:
    """The moment the source first holds more records of `topic` than when entered: a thread
    polling its end offsets every APPEND_POLL_S, so the warm wave can be timed without the
    producer's own start."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "mirror-race-source"})
        self.topic, self.partitions = topic, partitions
        self.at: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="first-append", daemon=True)

    def _end(self) -> int:
        return end_offsets(self.consumer, self.topic, self.partitions)

    def _watch(self) -> None:
        before = self._end_before
        while not self._stop.is_set():
            if self._end() > before:
                self.at = time.monotonic()
                return
            time.sleep(APPEND_POLL_S)  # polling another process's log; a benchmark, not a test

    def __enter__(self) -> FirstAppend:
        self._end_before = self._end()  # before the first produce: the thread compares with it
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.consumer.close()


def link_bytes_toward_mirror(api: str, source_dc: str) -> int:
    """Bytes the emulator's shared links have carried out of `source_dc` so far (its
    `causeway_wan_link_sent_bytes_total` counter: every byte through the bottleneck)."""
    with urllib.request.urlopen(f"http://{api}/metrics", timeout=10) as reply:  # noqa: S310 - http only
        text = reply.read().decode()
    return int(sum(sample.value for family in text_string_to_metric_families(text) for sample in family.samples
                   if sample.name == "causeway_wan_link_sent_bytes_total"
                   and sample.labels.get("direction", "").startswith(f"{source_dc}->")))


def warm_wave(fill_bootstrap: str, topic: str, target: BrokerProcess, remote: str, args: argparse.Namespace,
              result: dict[str, object], link_counter: Callable[[], int] | None = None) -> None:
    """With the mirror running and caught up, the same records again: timed from the first produce
    to the last record at the target. A cold start's figures mix start-up into the copy (a mirror
    may fetch for seconds before its first write lands); this is the copy alone, the link's share.
    Also timed from the first append at the source; `link_counter` reads the bytes the link has
    carried toward the mirror, read before and after: its use over the wave."""
    sent_before = link_counter() if link_counter is not None else 0
    watch = Consumer({"bootstrap.servers": target.bootstrap, "group.id": "mirror-race"})
    try:
        with FirstAppend(fill_bootstrap, topic, args.partitions) as first_append:
            began = time.monotonic()
            fill(fill_bootstrap, topic, args.records, args.size, args.partitions, create=False)
            produced = time.monotonic() - began
            deadline = began + COPY_TIMEOUT_S
            while end_offsets(watch, remote, args.partitions) < 2 * args.records:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{result['mirror']}: the second wave not copied in {COPY_TIMEOUT_S} s")
                time.sleep(WARM_POLL_S)  # polling another process's progress; a benchmark, not a test
            done = time.monotonic()
    finally:
        watch.close()
    assert first_append.at is not None  # the records were acknowledged, so the source holds them
    took, copying = done - began, done - first_append.at
    result["warm_produce_s"] = round(produced, 2)
    result["warm_copy_s"] = round(took, 2)
    result["warm_from_first_append_s"] = round(copying, 2)
    result["payload_mb_per_s"] = round(args.records * args.size / 1e6 / took, 1)
    result["payload_mb_per_s_from_first_append"] = round(args.records * args.size / 1e6 / copying, 1)
    if link_counter is not None:
        result["link_bytes"] = link_counter() - sent_before
        result["link_mb_per_s"] = round(int(str(result["link_bytes"])) / 1e6 / copying, 2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.mirror_race", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rate-mbit", type=int, default=100, help="the emulated link's bandwidth")
    parser.add_argument("--latency-ms", type=int, default=40, help="the emulated link's latency, each way")
    parser.add_argument("--no-wan", action="store_true", help="loopback only")
    args = parser.parse_args(argv)
    megabytes = args.records * args.size / 1e6
    print(f"{args.records} records of {args.size} B ({megabytes:.0f} MB), {args.partitions} partitions, "
          "Causeway to Causeway", flush=True)
    with tempfile.TemporaryDirectory(prefix="mirror-race-") as tmp:
        pairs = [loopback(Path(tmp) / "loopback", args)]
        for result in pairs[0]:
            print(json.dumps(result), flush=True)
        if not args.no_wan:
            wan_results, link = over_wan(Path(tmp) / "wan", args)
            print(f"the emulated link carries {link:.2f} MB/s on one connection", flush=True)
            for result in wan_results:
                print(json.dumps(result), flush=True)
            pairs.append(wan_results)
    for mm2_result, causeway_result in pairs:
        for key in ("first_record_s", "all_records_s", "copy_s", "warm_copy_s", "warm_from_first_append_s"):
            ratio = float(str(mm2_result[key])) / max(float(str(causeway_result[key])), 1e-9)
            print(f"{mm2_result['setting']}: {key}: MM2 / causeway mirror = {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
