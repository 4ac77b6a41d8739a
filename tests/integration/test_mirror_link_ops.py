"""Link operations with real processes (mirror/link_ops.py, `causeway mirror list | describe |
pause | resume | failover`): two brokers and a link-mode `causeway mirror` process. A paused
topic takes nothing more (the target refuses the mirror's appends), shows PAUSED in `describe`,
`--json`, `list` and the mirror's status, stays paused across restarts of the mirror and of the
target's broker (the state is the topic's config), and, resumed, receives every record the
source took meanwhile exactly once, in order. Bad input changes nothing."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from broker.client import MIRROR_NAME_CONFIG, TopicPartition, admin, link_append, open_client
from broker.client.admin import NewTopic
from broker.protocol.constants import MIRROR_STATE_CONFIG
from broker.protocol.errors import ErrorCode, KafkaError
from deploy.broker_process import BrokerProcess
from mirror.config import mirror_config_from_data
from mirror.link_ops import set_paused
from tests.integration.mirror_process import read_status, start_mirror
from tests.integration.started_clusters import started
from tests.integration.test_mirror import produce_with_confluent, running
from tests.integration.test_mirror_link import NAME, assert_same_copy, consume, ends_of, wait_copied
from tests.support.cluster import ZkCluster
from tests.support.polling import wait_for
from tests.support.zookeeper import ZooKeeperServer

REPO = Path(__file__).resolve().parents[2]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "deploy.cli", "mirror", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120)


async def acli(*args: str) -> subprocess.CompletedProcess[str]:
    return await trio.to_thread.run_sync(partial(cli, *args))


async def produce(bootstrap: str, count: int, start: int) -> None:
    await trio.to_thread.run_sync(partial(produce_with_confluent, bootstrap, "orders", count, start=start))


async def describe(west: BrokerProcess, east: BrokerProcess) -> dict[str, Any]:
    done = await acli("describe", "--bootstrap", west.bootstrap, "--source-bootstrap", east.bootstrap,
                      "--mirror", NAME, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    doc: dict[str, Any] = json.loads(done.stdout)
    return {t["topic"]: t for t in doc["topics"]}


def topic_state(status: Path, topic: str = "orders") -> dict[str, Any] | None:
    report = read_status(status)
    if report is None:
        return None
    state: dict[str, Any] | None = report.get("topic_states", {}).get(topic)
    return state


async def configs(bootstrap: str, topic: str) -> dict[str, str | None]:
    async with open_client(bootstrap) as client:
        entries = await admin.describe_configs(client, topic, keys=[MIRROR_NAME_CONFIG, MIRROR_STATE_CONFIG])
    return {k: e.value for k, e in entries.items()}


def write_config(tmp_path: Path, east: BrokerProcess, west: BrokerProcess) -> Path:
    config = tmp_path / "mirror.yaml"
    config.write_text(json.dumps({
        "name": NAME, "mode": "link",
        "source": {"alias": "east", "bootstrap": east.bootstrap},
        "target": {"alias": "west", "bootstrap": west.bootstrap},
        "topics": {"include": ["orders"]},
        "refresh.topics.interval.seconds": 0.2,
        "emit.heartbeats.interval.seconds": 0.5}))
    return config


async def test_pause_survives_restarts_and_resume_copies_each_record_once(east: BrokerProcess, west: BrokerProcess,
                                                                         tmp_path: Path) -> None:
    status, log = tmp_path / "status.json", tmp_path / "mirror.log"
    config = write_config(tmp_path, east, west)
    await produce(east.bootstrap, 30, 0)
    mirror = start_mirror(config, log, status)
    try:
        await wait_copied(east, west, "orders", 3)
        await wait_for(lambda: (topic_state(status) or {}).get("state") == "ACTIVE", what="orders ACTIVE")
        active = (await describe(west, east))["orders"]
        assert (active["state"], active["lag"], active["lag_ms"], active["mirror"]) == ("ACTIVE", 0, 0, NAME)

        paused = await acli("pause", "--bootstrap", west.bootstrap, "--mirror", NAME)
        assert paused.returncode == 0, paused.stdout + paused.stderr
        assert f"paused 1 mirror topic(s) of mirror {NAME}" in paused.stdout, paused.stdout
        before = await ends_of(west.bootstrap, "orders", 3)
        assert before == {0: 10, 1: 10, 2: 10}
        await produce(east.bootstrap, 30, 30)

        def paused_with_lag() -> bool:
            state = topic_state(status)
            return state is not None and state["state"] == "PAUSED" and state["lag"] == 30

        # The mirror has read the source's new ends (its lag counts them): nothing was copied.
        await wait_for(paused_with_lag, what="the mirror's status to say PAUSED with lag 30")
        assert await ends_of(west.bootstrap, "orders", 3) == before
        shown = (await describe(west, east))["orders"]
        assert (shown["state"], shown["lag"]) == ("PAUSED", 30), shown
        assert shown["lag_ms"] is not None and shown["lag_ms"] > 0  # the oldest waiting record's age
        assert [p["lag"] for p in shown["partitions"]] == [10, 10, 10]
        listed = await acli("list", "--bootstrap", west.bootstrap, "--json")
        assert json.loads(listed.stdout)["mirrors"] == {NAME: {"target": west.bootstrap,
                                                               "topics": {"orders": "PAUSED"}}}, listed.stdout
        table = await acli("describe", "--bootstrap", west.bootstrap, "--mirror", NAME)
        assert table.stdout.splitlines()[1].split()[:3] == ["orders", NAME, "PAUSED"], table.stdout
        again = await acli("pause", "--bootstrap", west.bootstrap, "--mirror", NAME, "--topics", "orders")
        assert again.returncode == 0 and "paused already: orders" in again.stdout, again.stdout + again.stderr

        # Restarts of the mirror and of the target's broker: still paused, still nothing copied.
        mirror.send_signal(signal.SIGTERM)
        assert mirror.wait(60) == 0, log.read_text()
        status.unlink()
        west.restart()
        mirror = start_mirror(config, log, status)
        await wait_for(paused_with_lag, what="the restarted mirror to say PAUSED with lag 30")
        assert await ends_of(west.bootstrap, "orders", 3) == before
        assert (await configs(west.bootstrap, "orders"))[MIRROR_STATE_CONFIG] == "PAUSED"

        resumed = await acli("resume", "--bootstrap", west.bootstrap, "--mirror", NAME)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        assert "orders-0: the copy ends at offset 10; copying resumes there" in resumed.stdout, resumed.stdout
        await wait_copied(east, west, "orders", 3)
        await wait_for(lambda: (topic_state(status) or {}).get("state") == "ACTIVE", what="orders ACTIVE again")
        assert await ends_of(west.bootstrap, "orders", 3) == {0: 20, 1: 20, 2: 20}
        # Every record once, in order, at the source's offsets (consumed, and batch for batch).
        await assert_same_copy(east, west, "orders", 3)
        assert MIRROR_STATE_CONFIG not in await configs(west.bootstrap, "orders")

        # `failover` is promote --failover: the topic is STOPPED, and no longer pausable.
        failover = await acli("failover", "--bootstrap", west.bootstrap, "--mirror", NAME, "--topics", "orders")
        assert failover.returncode == 0, failover.stdout + failover.stderr
        assert "promoted 1 topic(s)" in failover.stdout, failover.stdout
        await wait_for(lambda: (topic_state(status) or {}).get("state") == "STOPPED", what="orders STOPPED")
        refused = await acli("pause", "--bootstrap", west.bootstrap, "--mirror", NAME, "--topics", "orders")
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert "orders is a normal topic" in refused.stderr, refused.stderr
        mirror.send_signal(signal.SIGTERM)
        assert mirror.wait(60) == 0, log.read_text()
    finally:
        mirror.kill()
    assert "Traceback" not in log.read_text()


async def test_bad_input_changes_nothing(east: BrokerProcess, west: BrokerProcess, tmp_path: Path) -> None:
    status, log = tmp_path / "status.json", tmp_path / "mirror.log"
    await produce(east.bootstrap, 6, 0)
    mirror = start_mirror(write_config(tmp_path, east, west), log, status)
    try:
        await wait_copied(east, west, "orders", 3)
    finally:
        mirror.send_signal(signal.SIGTERM)
        assert mirror.wait(60) == 0, log.read_text()
    async with open_client(west.bootstrap) as client:
        await admin.create_topics(client, {"plain": NewTopic(1)})
    unchanged = {"orders": await configs(west.bootstrap, "orders"), "plain": await configs(west.bootstrap, "plain")}

    unknown = await acli("pause", "--bootstrap", west.bootstrap, "--mirror", "nobody")
    assert unknown.returncode == 1, unknown.stdout + unknown.stderr
    assert f"no mirror topics of mirror 'nobody' (mirrors with topics there: {NAME})" in unknown.stderr
    # One of the topics named is not the mirror's: refused whole, the mirror topic not paused either.
    mixed = await acli("pause", "--bootstrap", west.bootstrap, "--mirror", NAME, "--topics", "orders|plain")
    assert mixed.returncode == 1, mixed.stdout + mixed.stderr
    assert "plain is a normal topic" in mixed.stderr and "nothing was changed" in mixed.stderr, mixed.stderr
    none = await acli("resume", "--bootstrap", west.bootstrap, "--mirror", NAME, "--topics", "nothing.*")
    assert none.returncode == 1 and "no topic at the target matches" in none.stderr, none.stderr
    usage = await acli("pause", "--bootstrap", west.bootstrap)
    assert usage.returncode == 2 and "--mirror NAME is required" in usage.stderr, usage.stderr
    bad_regex = await acli("pause", "--bootstrap", west.bootstrap, "--mirror", NAME, "--topics", "(")
    assert bad_regex.returncode == 2, bad_regex.stderr
    assert {"orders": await configs(west.bootstrap, "orders"),
            "plain": await configs(west.bootstrap, "plain")} == unchanged

    # The broker itself: PAUSED only on a mirror topic, and no value but ACTIVE or PAUSED.
    async with open_client(west.bootstrap) as client:
        with pytest.raises(KafkaError) as normal:
            await admin.alter_configs(client, "plain", {MIRROR_STATE_CONFIG: "PAUSED"})
        assert normal.value.code == ErrorCode.INVALID_CONFIG
        with pytest.raises(KafkaError) as value:
            await admin.alter_configs(client, "orders", {MIRROR_STATE_CONFIG: "SLEEPING"})
        assert value.value.code == ErrorCode.INVALID_CONFIG
        # Nor at creation: a new topic born paused without a mirror is refused, and not made.
        with pytest.raises(KafkaError) as born_paused:
            await admin.create_topics(client, {"born-paused": NewTopic(1, configs={MIRROR_STATE_CONFIG: "PAUSED"})})
        assert born_paused.value.code == ErrorCode.INVALID_CONFIG
        assert "only for a mirror topic" in str(born_paused.value)
        assert "born-paused" not in await admin.list_topics(client)
    assert {"orders": await configs(west.bootstrap, "orders"),
            "plain": await configs(west.bootstrap, "plain")} == unchanged


async def test_a_planned_promotion_is_promoting_while_it_waits(east: BrokerProcess, west: BrokerProcess,
                                                              tmp_path: Path) -> None:
    status, log = tmp_path / "status.json", tmp_path / "mirror.log"
    config = write_config(tmp_path, east, west)
    await produce(east.bootstrap, 6, 0)
    mirror = start_mirror(config, log, status)
    try:
        await wait_copied(east, west, "orders", 3)
        mirror.send_signal(signal.SIGTERM)
        assert mirror.wait(60) == 0, log.read_text()
        await produce(east.bootstrap, 6, 6)  # not copied: the mirror is stopped
        promote = ["promote", "--bootstrap", west.bootstrap, "--source-bootstrap", east.bootstrap, "--mirror", NAME]

        # Paused: a planned promotion would wait for a copy that does not come; refused.
        assert (await acli("pause", "--bootstrap", west.bootstrap, "--mirror", NAME)).returncode == 0
        refused = await acli(*promote)
        assert refused.returncode == 1 and "paused" in refused.stderr, refused.stdout + refused.stderr
        assert (await configs(west.bootstrap, "orders"))[MIRROR_STATE_CONFIG] == "PAUSED"
        assert (await acli("resume", "--bootstrap", west.bootstrap, "--mirror", NAME)).returncode == 0

        # Behind, past its timeout: nothing promoted, and ACTIVE again.
        late = await acli(*promote, "--timeout", "1")
        assert late.returncode == 1 and "nothing was promoted" in late.stderr, late.stdout + late.stderr
        assert await configs(west.bootstrap, "orders") == {MIRROR_NAME_CONFIG: NAME}

        # While it waits: PROMOTING (the copy goes on); once the mirror caught up, promoted.
        argv = [sys.executable, "-m", "deploy.cli", "mirror", *promote, "--timeout", "120"]
        waiting = await trio.to_thread.run_sync(lambda: subprocess.Popen(
            argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        try:
            async def promoting() -> bool:
                shown = (await describe(west, east))["orders"]
                return bool(shown["state"] == "PROMOTING" and shown["lag"] == 6)

            await wait_for(promoting, what="describe to show orders PROMOTING with lag 6")
            mirror = start_mirror(config, log, status)
            out, err = await trio.to_thread.run_sync(lambda: waiting.communicate(timeout=120))
        finally:
            waiting.kill()
        assert waiting.returncode == 0, out + err
        assert "promoted 1 topic(s)" in out, out
        assert await configs(west.bootstrap, "orders") == {}  # a normal topic: no link state left
        await wait_for(lambda: (topic_state(status) or {}).get("state") == "STOPPED", what="orders STOPPED")
        mirror.send_signal(signal.SIGTERM)
        assert mirror.wait(60) == 0, log.read_text()
    finally:
        mirror.kill()
    await assert_same_copy(east, west, "orders", 3)


async def test_a_source_that_does_not_answer_is_source_unavailable(east: BrokerProcess, west: BrokerProcess,
                                                                   tmp_path: Path) -> None:
    status, log = tmp_path / "status.json", tmp_path / "mirror.log"
    await produce(east.bootstrap, 6, 0)
    mirror = start_mirror(write_config(tmp_path, east, west), log, status)
    try:
        await wait_copied(east, west, "orders", 3)
        await wait_for(lambda: (topic_state(status) or {}).get("state") == "ACTIVE", what="orders ACTIVE")
        east.stop()
        await wait_for(lambda: (topic_state(status) or {}).get("state") == "SOURCE_UNAVAILABLE",
                       what="the mirror's status to say SOURCE_UNAVAILABLE")
        reported = topic_state(status)
        assert reported is not None and reported["reason"] and reported["lag"] is None, reported
        shown = (await describe(west, east))["orders"]
        assert shown["state"] == "SOURCE_UNAVAILABLE" and shown["lag"] is None and shown["reason"], shown
        mirror.send_signal(signal.SIGTERM)
        assert mirror.wait(60) == 0, log.read_text()
    finally:
        mirror.kill()


@pytest.fixture
def dr_cluster(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[ZkCluster]:
    with started(ZkCluster(zookeeper, tmp_path / "dr", ("zookeeper.session.timeout.ms=6000",
                                                          "offsets.topic.num.partitions=1"))) as cluster:
        yield cluster


async def test_a_pause_holds_on_every_broker_of_a_three_broker_target(east: BrokerProcess,
                                                                      dr_cluster: ZkCluster) -> None:
    target = dr_cluster.bootstrap()
    config = mirror_config_from_data({
        "name": NAME, "mode": "link", "replication.factor": 3,
        "source": {"alias": "east", "bootstrap": east.bootstrap},
        "target": {"alias": "dr", "bootstrap": target},
        "topics": {"include": ["orders"]},
        "refresh.topics.interval.seconds": 0.2, "emit.heartbeats.interval.seconds": 0.5})
    await produce(east.bootstrap, 30, 0)

    async def copied() -> bool:
        try:
            return await ends_of(target, "orders", 3) == await ends_of(east.bootstrap, "orders", 3)
        except KafkaError:  # not created yet, or its leaders not elected yet
            return False

    async with running(config) as mirror:
        await wait_for(copied, what="the copy at the three-broker target")
        # Applied by every broker (each from ZooKeeper's notification) before the command returns.
        report = await set_paused(target, NAME, paused=True)
        assert (report.changed, report.not_applied) == (["orders"], {})
        before = await ends_of(target, "orders", 3)
        await produce(east.bootstrap, 30, 30)
        await wait_for(lambda: mirror.status()["topic_states"].get("orders") == {
            "state": "PAUSED", "reason": None, "lag": 30, "lag_ms": None}, what="orders PAUSED with lag 30")
        assert await ends_of(target, "orders", 3) == before
        # A leader elsewhere (its broker stopped) still refuses: the state is the cluster's.
        leader = int(str(dr_cluster.state("orders", 0)["leader"]))
        dr_cluster.brokers[leader].stop()
        survivors = dr_cluster.bootstrap(*(i for i in dr_cluster.brokers if i != leader))
        await wait_for(lambda: dr_cluster.state("orders", 0)["leader"] not in (leader, -1),
                       what="a new leader for orders-0")
        async with open_client(survivors) as client:
            refused = await link_append(client, NAME, {TopicPartition("orders", 0): b""})
        assert refused[TopicPartition("orders", 0)].error == ErrorCode.INVALID_REQUEST
        assert "paused" in (refused[TopicPartition("orders", 0)].error_message or "")
        resumed = await set_paused(survivors, NAME, paused=False)
        assert resumed.changed == ["orders"]
        await wait_for(copied, what="the copy after the resume")
    source = await trio.to_thread.run_sync(consume, east.bootstrap, "orders", 3)
    assert await trio.to_thread.run_sync(consume, survivors, "orders", 3) == source and len(source) == 60
