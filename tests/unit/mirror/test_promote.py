"""`mirror.promote`: waiting for the copy, promoting, failing over, against real brokers.

A source and a target broker (real processes) per module; each test makes its own topics. The
target's mirror topics are created with `causeway.mirror.name` as a link-mode mirror creates
them; where a test needs the copy to advance, it copies the source's batches itself with
LinkAppend (broker.client.link), as the mirror does.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
import trio
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from broker.client import ErrorCode, TopicPartition, open_client
from broker.client import KafkaError as KafkaError_
from broker.client.admin import NewTopic, create_topics, describe_configs, list_topics
from broker.client.fetch import fetch, whole_batches
from broker.client.groups import CommittedOffset, commit_offsets, fetch_offsets, link_commit_offsets
from broker.protocol.constants import MIRROR_NAME_CONFIG
from deploy.broker_process import BrokerProcess
from mirror.config import MirrorConfig
from mirror.formats import OffsetSync
from mirror.link_groups import commit_carried
from mirror.promote import PromotionError, promote
from mirror.topics import append
from tests.support.polling import wait_for

REPO = Path(__file__).resolve().parents[3]
#: Bounds each test's calls so that a hang fails the test instead of holding the suite.
BOUND_S = 60


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    root = tmp_path_factory.mktemp("promote")
    source = BrokerProcess(root / "source").start()
    try:
        target = BrokerProcess(root / "target").start()
    except BaseException:
        source.stop()
        raise
    yield source, target
    target.stop()
    source.stop()


def produce(bootstrap: str, topic: str, counts: dict[int, int]) -> None:
    """Idempotent librdkafka writes; raises KafkaException with the first delivery error."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 0})
    errors: list[KafkaError] = []

    def delivered(error: KafkaError | None, _message: object) -> None:
        if error is not None:
            errors.append(error)

    for partition, n in counts.items():
        for i in range(n):
            producer.produce(topic, value=b"v%d" % i, key=b"k", partition=partition, on_delivery=delivered)
    assert producer.flush(30) == 0
    if errors:
        raise KafkaException(errors[0])


async def make_topics(source: BrokerProcess, target: BrokerProcess, topic: str, partitions: int,
                      mirror: str = "dr") -> None:
    async with open_client(source.bootstrap) as client:
        await create_topics(client, {topic: NewTopic(partitions)})
    async with open_client(target.bootstrap) as client:
        await create_topics(client, {topic: NewTopic(partitions, -1, {MIRROR_NAME_CONFIG: mirror})})


async def mirror_name_of(bootstrap: str, topic: str) -> str | None:
    async with open_client(bootstrap) as client:
        entry = (await describe_configs(client, topic, keys=[MIRROR_NAME_CONFIG])).get(MIRROR_NAME_CONFIG)
    return entry.value if entry is not None else None


async def test_without_failover_nothing_is_promoted_while_the_copy_is_behind(brokers) -> None:  # type: ignore[no-untyped-def]
    source, target = brokers
    await make_topics(source, target, "behind", 2)
    await trio.to_thread.run_sync(produce, source.bootstrap, "behind", {0: 5, 1: 0})
    lines: list[str] = []
    with trio.fail_after(BOUND_S):
        report = await promote(target.bootstrap, source_bootstrap=source.bootstrap, mirror="dr",
                               topics_regex="behind", timeout_s=2.0, say=lines.append, progress_every_s=0.5)
    assert not report.ok and report.timed_out and report.promoted == []
    assert "still behind: partition 0 5 record(s)" in report.failed["behind"]
    assert any("1/2 partitions caught up, 5 record(s) behind" in line for line in lines), lines
    assert await mirror_name_of(target.bootstrap, "behind") == "dr"  # still a mirror topic


async def test_failover_promotes_at_once_and_counts_what_was_not_copied(brokers) -> None:  # type: ignore[no-untyped-def]
    source, target = brokers
    await make_topics(source, target, "lost", 2)
    await trio.to_thread.run_sync(produce, source.bootstrap, "lost", {0: 3, 1: 4})
    lines: list[str] = []
    with trio.fail_after(BOUND_S):
        report = await promote(target.bootstrap, source_bootstrap=source.bootstrap, topics_regex="lost",
                               failover=True, timeout_s=5.0, say=lines.append)
    assert report.ok and report.promoted == ["lost"]
    assert {(p.partition, p.behind) for p in report.partitions} == {(0, 3), (1, 4)}
    assert "lost-0: target end 0, source end 3, not copied 3" in "\n".join(lines)
    assert await mirror_name_of(target.bootstrap, "lost") is None
    # A normal topic now: a producer writes to it.
    await trio.to_thread.run_sync(produce, target.bootstrap, "lost", {0: 1})


async def test_failover_copies_the_groups_offsets_at_most_to_the_copys_end(brokers) -> None:  # type: ignore[no-untyped-def]
    source, target = brokers
    await make_topics(source, target, "clamp", 1)
    await trio.to_thread.run_sync(produce, source.bootstrap, "clamp", {0: 4})
    async with open_client(source.bootstrap) as client:
        await commit_offsets(client, "clamp-readers", {TopicPartition("clamp", 0): 3})
    lines: list[str] = []
    with trio.fail_after(BOUND_S):
        report = await promote(target.bootstrap, source_bootstrap=source.bootstrap, topics_regex="clamp",
                               failover=True, timeout_s=5.0, say=lines.append)
    # The copy holds nothing of the source's 4 records: the group resumes at 0 at the target,
    # never past a record written there after the promotion.
    assert report.ok and report.groups_synced["clamp-readers"] == {TopicPartition("clamp", 0): 0}, report
    assert "group clamp-readers: offsets copied one last time: clamp-0 0" in lines
    async with open_client(target.bootstrap) as client:
        assert (await fetch_offsets(client, "clamp-readers"))[TopicPartition("clamp", 0)].offset == 0


@pytest.mark.parametrize("disaster", ["frozen", "killed"])
async def test_a_failover_from_dead_source_brokers_does_not_wait_for_them(tmp_path: Path, brokers,  # type: ignore[no-untyped-def]
                                                                          disaster: str) -> None:
    """The source's broker is SIGSTOPped (it accepts connections and never answers) or
    SIGKILLed (every connection refused). The failover promotes without waiting for it (a
    killed one is known unreachable from its refused connections, a frozen one is left after
    FIRST_ANSWER_S without an answer, not at the end of the 2 s deadline), says the source's ends are unknown
    and deferred, and names the group that could not be copied at the end with the offsets it
    resumes from (its last copy)."""
    _, target = brokers
    dead = BrokerProcess(tmp_path / disaster).start()
    topic = f"{disaster}-orders"
    try:
        await make_topics(dead, target, topic, 2)
        await trio.to_thread.run_sync(produce, dead.bootstrap, topic, {0: 3, 1: 2})
        async with open_client(target.bootstrap) as client:  # the mirror's last periodic copy
            await commit_offsets(client, f"{disaster}-readers", {TopicPartition(topic, 0): 0,
                                                                 TopicPartition(topic, 1): 0})
        assert dead.proc is not None
        if disaster == "killed":
            dead.proc.kill()  # SIGKILL, and waited for: its port refuses connections
        else:
            os.kill(dead.proc.pid, signal.SIGSTOP)
        try:
            lines: list[str] = []
            with trio.fail_after(BOUND_S):  # --timeout 60: the failover's own bound on the source, 2 s
                report = await promote(target.bootstrap, source_bootstrap=dead.bootstrap,
                                       topics_regex=topic, failover=True, timeout_s=60.0, say=lines.append)
        finally:
            if disaster == "frozen":
                os.kill(dead.proc.pid, signal.SIGCONT)
    finally:
        dead.stop()
    assert report.ok and report.promoted == [topic], report
    why = {"killed": "source unreachable, connection refused by every bootstrap address",
           "frozen": "source unreachable, no answer within 1 s"}[disaster]
    assert (report.source_error or "").startswith(why), report.source_error
    assert [p.behind for p in report.partitions] == [None, None]
    assert report.groups_unsynced == {f"{disaster}-readers": {TopicPartition(topic, 0): 0,
                                                              TopicPartition(topic, 1): 0}}
    text = "\n".join(lines)
    assert f"records not copied: unknown ({report.source_error}); report deferred" in text, text
    assert f"groups NOT copied at the end ({report.source_error})" in text, text
    assert f"  group {disaster}-readers: last copied {topic}-0 0, {topic}-1 0" in text, text
    assert await mirror_name_of(target.bootstrap, topic) is None


async def test_a_planned_promotion_refuses_a_source_that_does_not_answer(brokers) -> None:  # type: ignore[no-untyped-def]
    source, target = brokers
    await make_topics(source, target, "unanswered", 1)
    hung = _hung_listener()
    try:
        with trio.fail_after(BOUND_S), pytest.raises(PromotionError) as exc:
            await promote(target.bootstrap, source_bootstrap=f"127.0.0.1:{hung.getsockname()[1]}",
                          topics_regex="unanswered", timeout_s=60.0)
    finally:
        hung.close()
    assert "does not answer" in str(exc.value) and "--failover" in str(exc.value)
    assert await mirror_name_of(target.bootstrap, "unanswered") == "dr"  # nothing promoted


def _hung_listener() -> socket.socket:
    """A port that completes TCP handshakes (the backlog) but never answers a request."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    return sock


@pytest.mark.parametrize("source_kind", ["refusing", "hung", "none"])
async def test_failover_with_the_source_gone_says_unknown(brokers, source_kind: str) -> None:  # type: ignore[no-untyped-def]
    source, target = brokers
    topic = f"gone-{source_kind}"
    await make_topics(source, target, topic, 1)
    hung = _hung_listener()
    try:
        if source_kind == "refusing":
            closed = socket.socket()
            closed.bind(("127.0.0.1", 0))
            address: str | None = f"127.0.0.1:{closed.getsockname()[1]}"
            closed.close()  # nothing listens there now
        elif source_kind == "hung":
            address = f"127.0.0.1:{hung.getsockname()[1]}"
        else:
            address = None
        lines: list[str] = []
        with trio.fail_after(BOUND_S):  # the source's own deadline: min(timeout, FAILOVER_SOURCE_S)
            report = await promote(target.bootstrap, source_bootstrap=address, topics_regex=topic,
                                   failover=True, timeout_s=60.0, say=lines.append)
    finally:
        hung.close()
    assert report.ok and report.promoted == [topic]
    why = {"refusing": "source unreachable, connection refused by every bootstrap address",
           "hung": "source unreachable, no answer within 1 s",
           "none": "no source given"}[source_kind]
    assert [p.behind for p in report.partitions] == [None] and (report.source_error or "").startswith(why)
    assert f"records not copied: unknown ({report.source_error}); report deferred" in "\n".join(lines)
    assert f"{topic}-0: target end 0, source end unknown, not copied unknown" in "\n".join(lines)


async def test_only_the_named_mirrors_topics_are_selected(brokers) -> None:  # type: ignore[no-untyped-def]
    source, target = brokers
    await make_topics(source, target, "sel-mine", 1, mirror="dr")
    await make_topics(source, target, "sel-other", 1, mirror="other")
    async with open_client(target.bootstrap) as client:
        await create_topics(client, {"sel-plain": NewTopic(1)})
    with trio.fail_after(BOUND_S), pytest.raises(PromotionError) as exc:
        await promote(target.bootstrap, source_bootstrap=source.bootstrap, mirror="nobody",
                      topics_regex="sel-.*", timeout_s=5.0)
    message = str(exc.value)
    assert "has none of mirror nobody's mirror topics matching 'sel-.*': nothing to promote" in message
    assert "sel-other (a mirror topic of mirror other)" in message and "sel-plain (a normal topic" in message
    with trio.fail_after(BOUND_S):
        report = await promote(target.bootstrap, source_bootstrap=source.bootstrap, mirror="dr",
                               topics_regex="sel-.*", timeout_s=5.0)
    assert report.ok and report.promoted == ["sel-mine"]  # both empty: caught up at once
    assert await mirror_name_of(target.bootstrap, "sel-other") == "other"


async def test_waiting_needs_a_source() -> None:
    with pytest.raises(PromotionError, match="--failover"):
        await promote("127.0.0.1:1", source_bootstrap=None)


async def test_the_wait_ends_when_the_copy_catches_up_then_promotes(brokers) -> None:  # type: ignore[no-untyped-def]
    from broker.client.link import link_append

    source, target = brokers
    await make_topics(source, target, "catching", 2)
    await trio.to_thread.run_sync(produce, source.bootstrap, "catching", {0: 6, 1: 2})
    lines: list[str] = []
    copied = trio.Event()

    async def copy_once_promote_waits() -> None:
        # The mirror's job, once the promotion has started waiting: the source's batches as they are.
        await wait_for(lambda: any("caught up" in line for line in lines), what="a progress line")
        async with open_client(source.bootstrap) as src, open_client(target.bootstrap) as dst:
            fetched = await fetch(src, {TopicPartition("catching", p): 0 for p in range(2)})
            batches = {tp: whole_batches(f.records) for tp, f in fetched.items()}
            results = await link_append(dst, "dr", batches)
        assert all(r.error == ErrorCode.NONE for r in results.values()), results
        copied.set()

    with trio.fail_after(BOUND_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(copy_once_promote_waits)
            report = await promote(target.bootstrap, source_bootstrap=source.bootstrap, mirror="dr",
                                   topics_regex="catching", timeout_s=30.0, say=lines.append, progress_every_s=0.2)
    assert copied.is_set()
    assert report.ok and report.promoted == ["catching"], report
    assert {(p.partition, p.target_end, p.source_end) for p in report.partitions} == {(0, 6, 6), (1, 2, 2)}
    assert await mirror_name_of(target.bootstrap, "catching") is None
    await trio.to_thread.run_sync(produce, target.bootstrap, "catching", {0: 1})


async def test_a_planned_promotion_copies_the_groups_offsets_once_more(brokers) -> None:  # type: ignore[no-untyped-def]
    from broker.client.link import link_append

    source, target = brokers
    await make_topics(source, target, "switch", 1)
    await trio.to_thread.run_sync(produce, source.bootstrap, "switch", {0: 5})
    tp = TopicPartition("switch", 0)
    async with open_client(source.bootstrap) as src, open_client(target.bootstrap) as dst:
        fetched = await fetch(src, {tp: 0})
        await link_append(dst, "dr", {tp: whole_batches(fetched[tp].records)})
        await commit_offsets(dst, "switchers", {tp: 2})  # the mirror's last periodic copy
        await commit_offsets(src, "switchers", {tp: 5})  # read on at the source since
    lines: list[str] = []
    with trio.fail_after(BOUND_S):
        report = await promote(target.bootstrap, source_bootstrap=source.bootstrap, topics_regex="switch",
                               timeout_s=30.0, say=lines.append)
    assert report.ok and report.groups_synced == {"switchers": {tp: 5}}, report
    # Once promoted (the mirror's own copies fenced from then on): the last word on them.
    assert lines.index("group switchers: offsets copied one last time: switch-0 5") > lines.index(
        "promoted switch: a normal writable topic now (mirror dr no longer writes it)"), lines
    async with open_client(target.bootstrap) as client:
        assert (await fetch_offsets(client, "switchers"))[tp].offset == 5


@pytest.mark.parametrize("failover", [False, True])
async def test_a_stale_mirrors_group_commit_after_the_promotion_is_refused(brokers, failover: bool) -> None:  # type: ignore[no-untyped-def]
    """The race seen in CI (the promotion said 162, the DR site held 175 after it), made to
    happen: a pass of the mirror's group-offset copy read the source before the promotion and
    sends its commit after it (a slow pass, a mirror cut off or stale). The target refuses it
    where it would land, so the DR site holds what the promotion said, and then what the moved
    group commits there, whatever the mirror sends."""
    from broker.client.link import link_append

    source, target = brokers
    topic = f"fenced-{'failover' if failover else 'switch'}"
    await make_topics(source, target, topic, 1)
    await trio.to_thread.run_sync(produce, source.bootstrap, topic, {0: 20})
    tp = TopicPartition(topic, 0)
    async with open_client(source.bootstrap) as src, open_client(target.bootstrap) as dst:
        fetched = await fetch(src, {tp: 0})
        await link_append(dst, "dr", {tp: whole_batches(fetched[tp].records)})
        # The mirror's periodic copy, on its own mirror topic: taken.
        assert await link_commit_offsets(dst, "dr", "movers", {tp: 4}) == {}
        assert (await fetch_offsets(dst, "movers"))[tp].offset == 4
        await commit_offsets(src, "movers", {tp: 12})  # read on at the source
    with trio.fail_after(BOUND_S):
        report = await promote(target.bootstrap, source_bootstrap=source.bootstrap, topics_regex=topic,
                               failover=failover, timeout_s=30.0)
    assert report.ok and report.groups_synced == {"movers": {tp: 12}}, report
    async with open_client(target.bootstrap) as dst:
        assert (await fetch_offsets(dst, "movers"))[tp].offset == 12  # what the promotion said
        # The stale pass read 17 at the source before the promotion; its commit comes now.
        refused = await link_commit_offsets(dst, "dr", "movers", {tp: CommittedOffset(17, "stale")})
        assert list(refused) == [tp] and "not a mirror topic (never one, or promoted)" in refused[tp], refused
        assert (await fetch_offsets(dst, "movers"))[tp] == CommittedOffset(12), "the stale commit landed"
        # The moved group commits at the DR site (a plain OffsetCommit: the topic is its own now);
        # the mirror's code, sending what it read before, is refused again and counts nothing.
        await commit_offsets(dst, "movers", {tp: 15})
        carried = await commit_carried(dst, {"movers": {tp: CommittedOffset(17)}}, link_name="dr")
        assert (carried.committed, list(carried.refused), carried.offsets) == (0, [tp], {"movers": {}}), carried
        assert (await fetch_offsets(dst, "movers"))[tp].offset == 15


async def test_a_mirrors_group_commit_lands_only_on_its_own_mirror_topics(brokers) -> None:  # type: ignore[no-untyped-def]
    """LinkOffsetCommit at the target: another mirror's topic and a normal topic are refused
    (INVALID_REQUEST, saying why; nothing committed), a group with live members is its
    consumers' (UNKNOWN_MEMBER_ID), a partition the topic lacks is unknown."""
    source, target = brokers
    await make_topics(source, target, "owned", 1, mirror="other")
    tp = TopicPartition("owned", 0)
    async with open_client(target.bootstrap) as dst:
        await create_topics(dst, {"plain": NewTopic(1)})
        refused = await link_commit_offsets(dst, "dr", "owners", {tp: 1, TopicPartition("plain", 0): 1})
        assert refused[tp] == "topic owned is the mirror topic of mirror other, not of mirror dr", refused
        assert "topic plain is not a mirror topic" in refused[TopicPartition("plain", 0)], refused
        assert await fetch_offsets(dst, "owners") == {}
        with pytest.raises(KafkaError_) as unknown:
            await link_commit_offsets(dst, "other", "owners", {TopicPartition("owned", 5): 1})
        assert unknown.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert await link_commit_offsets(dst, "other", "owners", {tp: 1}) == {}
        assert (await fetch_offsets(dst, "owners"))[tp].offset == 1

    def live_member_commits() -> None:
        consumer = Consumer({"bootstrap.servers": target.bootstrap, "group.id": "live-owners",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        try:
            consumer.subscribe(["owned"])
            deadline = time.monotonic() + BOUND_S
            while not consumer.assignment() and time.monotonic() < deadline:
                consumer.poll(0.2)
            assert consumer.assignment(), "no assignment"
            trio.from_thread.run(attempt)
        finally:
            consumer.close()

    async def attempt() -> None:
        async with open_client(target.bootstrap) as dst:
            with pytest.raises(KafkaError_) as live:
                await link_commit_offsets(dst, "other", "live-owners", {tp: 1})
            assert live.value.code == ErrorCode.UNKNOWN_MEMBER_ID

    await trio.to_thread.run_sync(live_member_commits)


async def test_a_mirror_topic_refuses_producers_until_promoted(brokers) -> None:  # type: ignore[no-untyped-def]
    source, target = brokers
    await make_topics(source, target, "guarded", 1)
    with pytest.raises(KafkaException) as exc:
        await trio.to_thread.run_sync(produce, target.bootstrap, "guarded", {0: 1})
    assert exc.value.args[0].code() == KafkaError.INVALID_REQUEST
    with trio.fail_after(BOUND_S):
        assert (await promote(target.bootstrap, source_bootstrap=source.bootstrap, topics_regex="guarded",
                              timeout_s=5.0)).ok
    await trio.to_thread.run_sync(produce, target.bootstrap, "guarded", {0: 1})


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "deploy.cli", "mirror", "promote", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=BOUND_S)


async def test_the_command_exits_1_on_a_timeout_and_0_once_promoted(brokers) -> None:  # type: ignore[no-untyped-def]
    source, target = brokers
    await make_topics(source, target, "cmd", 1)
    await trio.to_thread.run_sync(produce, source.bootstrap, "cmd", {0: 2})
    run = partial(trio.to_thread.run_sync, _cli)
    waited = await run("--bootstrap", target.bootstrap, "--source-bootstrap", source.bootstrap,
                       "--topics", "cmd", "--timeout", "1")
    assert waited.returncode == 1, waited
    assert "Error: cmd: not promoted: after 1 s still behind: partition 0 2 record(s)" in waited.stderr
    assert "nothing was promoted" in waited.stderr
    assert "copy catching up: 0/2 records (0%)" in waited.stdout  # the wait's progress, off a terminal
    assert "promotion of 1 mirror topic(s)" in waited.stdout and "waiting up to 1 s" in waited.stdout
    # --quiet: no progress (what it starts, the wait, the bar's lines); the errors as before.
    quiet = await run("--bootstrap", target.bootstrap, "--source-bootstrap", source.bootstrap,
                      "--topics", "cmd", "--timeout", "1", "--quiet")
    assert quiet.returncode == 1, quiet
    assert quiet.stdout == "", quiet.stdout
    assert quiet.stderr == waited.stderr
    # ... and the result as before: the failover's report lines, without the line saying it starts.
    failed_over = await run("--bootstrap", target.bootstrap, "--topics", "cmd", "--failover", "-q")
    assert failed_over.returncode == 0, failed_over
    assert "records not copied: unknown (no source given)" in failed_over.stdout
    assert f"promoted 1 topic(s) at {target.bootstrap}: cmd" in failed_over.stdout
    assert "failover of 1 mirror topic(s)" not in failed_over.stdout, failed_over.stdout
    again = await run("--bootstrap", target.bootstrap, "--topics", "cmd", "--failover")
    assert again.returncode == 0 and "cmd promoted already" in again.stdout, again
    nothing = await run("--bootstrap", target.bootstrap, "--mirror", "nobody", "--failover")
    assert nothing.returncode == 1 and "nothing to promote" in nothing.stderr, nothing
    usage = await run("--bootstrap", target.bootstrap, "--topics", "cmd")
    assert usage.returncode == 1 and "--failover" in usage.stderr, usage


def _mm2_config(source: BrokerProcess, target: BrokerProcess) -> MirrorConfig:
    return MirrorConfig.model_validate({"name": "src-to-dst", "mode": "mm2",
                                        "source": {"alias": "src", "bootstrap": source.bootstrap},
                                        "target": {"alias": "dst", "bootstrap": target.bootstrap},
                                        "topics": {"include": ["mm-.*"]}})


async def test_an_mm2_failover_creates_local_topics_shaped_as_the_source(brokers) -> None:  # type: ignore[no-untyped-def]
    """Without the source, the remote topic the mirror kept in line with it gives the shape;
    with it, the source does; a second run finds them there."""
    source, target = brokers
    config = _mm2_config(source, target)
    retention = {"retention.ms": "7200000"}
    async with open_client(source.bootstrap) as client:
        await create_topics(client, {"mm-orders": NewTopic(3, -1, retention), "mm-pay": NewTopic(2)})
    async with open_client(target.bootstrap) as client:  # as the mirror created them
        await create_topics(client, {"src.mm-orders": NewTopic(3, -1, retention), "src.mm-pay": NewTopic(2)})
    hung = _hung_listener()
    try:
        lines: list[str] = []
        with trio.fail_after(BOUND_S):
            report = await promote(target.bootstrap, source_bootstrap=f"127.0.0.1:{hung.getsockname()[1]}",
                                   topics_regex="mm-orders", failover=True, timeout_s=60.0, say=lines.append,
                                   config=config)
    finally:
        hung.close()
    assert report.ok and report.promoted == ["mm-orders"] and report.source_error, report
    assert "created mm-orders: 3 partition(s), configs retention.ms=7200000, as at the source; " \
           "producers write to it now" in lines, lines
    with trio.fail_after(BOUND_S):
        planned = await promote(target.bootstrap, source_bootstrap=source.bootstrap, timeout_s=60.0, config=config)
    assert planned.ok and planned.promoted == ["mm-pay"] and planned.already == ["mm-orders"], planned
    async with open_client(target.bootstrap) as client:
        counts = await list_topics(client)
        configs = await describe_configs(client, "mm-orders", keys=["retention.ms"])
    assert counts["mm-orders"] == 3 and counts["mm-pay"] == 2
    assert configs["retention.ms"].value == "7200000"
    with trio.fail_after(BOUND_S):
        again = await promote(target.bootstrap, source_bootstrap=source.bootstrap, failover=True, config=config)
    assert again.ok and again.promoted == [] and again.already == ["mm-orders", "mm-pay"], again


async def test_an_mm2_promotion_translates_and_commits_the_groups_offsets_once_more(brokers) -> None:  # type: ignore[no-untyped-def]
    """The source answers: each group's committed offsets are translated through the mirror's
    offset syncs (at the source, `mm2-offset-syncs.dst.internal`) and committed on the remote
    topic at the target, never backwards, as the mirror's own group sync does."""
    source, target = brokers
    config = _mm2_config(source, target)
    async with open_client(source.bootstrap) as client:
        await create_topics(client, {"mm-grp": NewTopic(1), "mm2-offset-syncs.dst.internal": NewTopic(1)})
        syncs = [OffsetSync("mm-grp", 0, 0, 0), OffsetSync("mm-grp", 0, 50, 40)]
        await append(client, "mm2-offset-syncs.dst.internal", [(sync.key(), sync.value()) for sync in syncs])
        await commit_offsets(client, "exact", {TopicPartition("mm-grp", 0): 50})
        await commit_offsets(client, "later", {TopicPartition("mm-grp", 0): 60})
        await commit_offsets(client, "ahead", {TopicPartition("mm-grp", 0): 60})
    async with open_client(target.bootstrap) as client:  # as the mirror created it, and synced groups
        await create_topics(client, {"src.mm-grp": NewTopic(1)})
        await commit_offsets(client, "exact", {TopicPartition("src.mm-grp", 0): 12})
        await commit_offsets(client, "ahead", {TopicPartition("src.mm-grp", 0): 45})  # read further there
    lines: list[str] = []
    with trio.fail_after(BOUND_S):
        report = await promote(target.bootstrap, source_bootstrap=source.bootstrap, topics_regex="mm-grp",
                               timeout_s=60.0, say=lines.append, config=config)
    assert report.ok and report.promoted == ["mm-grp"], report
    remote = TopicPartition("src.mm-grp", 0)
    assert report.groups_synced == {"exact": {remote: 40}, "later": {remote: 41}, "ahead": {remote: 45}}, report
    assert "group exact: offsets translated and committed one last time: src.mm-grp-0 40" in lines, lines
    async with open_client(target.bootstrap) as client:
        got = {g: (await fetch_offsets(client, g))[remote].offset for g in ("exact", "later", "ahead")}
    assert got == {"exact": 40, "later": 41, "ahead": 45}


async def test_an_mm2_failover_from_a_killed_source_does_not_wait_for_it(tmp_path: Path, brokers) -> None:  # type: ignore[no-untyped-def]
    """Every connection refused: the remote topic gives the shape at once, and the groups are
    said to resume from the mirror's last sync."""
    _, target = brokers
    dead = BrokerProcess(tmp_path / "dead").start()
    dead.stop()  # its port refuses connections now
    bootstrap, config = dead.bootstrap, _mm2_config(dead, target)
    async with open_client(target.bootstrap) as client:
        await create_topics(client, {"src.mm-dead": NewTopic(2)})
    lines: list[str] = []
    with trio.fail_after(BOUND_S):
        report = await promote(target.bootstrap, source_bootstrap=bootstrap, topics_regex="mm-dead",
                               failover=True, timeout_s=60.0, say=lines.append, config=config)
    assert report.ok and report.promoted == ["mm-dead"], report
    assert (report.source_error or "").startswith("source unreachable, connection refused by every bootstrap"), report
    assert "created mm-dead: 2 partition(s), as at the source; producers write to it now" in lines, lines
    assert any(line.startswith("groups NOT synced at the end") for line in lines), lines
