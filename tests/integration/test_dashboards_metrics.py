"""Every metric the Grafana dashboards (monitoring/grafana/) name is one that real daemons serve:
a 2-broker ZooKeeper-mode source cluster (so followers fetch and replication bytes are counted)
with real traffic and a committed consumer group, mirrored by a real mm2-mode mirror (which also
checkpoints the group) and a real link-mode mirror, and a real WAN emulator (`causeway wan`) with
one shared link and a proxy on it that real bytes cross, each scraped through prometheus_client's
text parser. A metric counts as served once a scrape held a sample of it, so a misspelt or renamed
metric leaves a panel that would stay empty in Grafana and fails here."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from deploy.broker_process import BrokerProcess
from deploy.child_process import ChildProcess
from deploy.wan.client import WanClient
from deploy.wan.process import WanProcess
from tests.integration.mirror_process import start_mirror
from tests.support.cluster import ZkCluster
from tests.support.dashboards import expressions, load_dashboards, metric_names
from tests.support.metrics import logged_metrics_url, metrics_url, sample_names, scrape, scrape_text
from tests.support.polling import wait_until
from tests.support.zookeeper import ZooKeeperServer

RECORDS = 300
WAN_PREFIXES = ("causeway_wan_", "toxiproxy_")


def _named(dashboard: str) -> set[str]:
    return {name for expr in expressions(load_dashboards()[dashboard]) for name in metric_names(expr)}


def _served_by_wan(tmp_path: Path, upstream_url: str) -> set[str]:
    """What a real WAN emulator serves with a link (1 MB/s each way) and a proxy on it, once an
    HTTP GET of `upstream_url` (a broker's metrics page) has crossed the proxy both ways."""
    with WanProcess(log_path=tmp_path / "wan.log") as wan:
        client = WanClient(wan.api, timeout_s=10)
        client.create_link({"name": "east~west", "between": ["east", "west"], "bandwidth": 1_000_000})
        upstream = urlsplit(upstream_url)
        client.create_proxy("west-to-east", "127.0.0.1:0", upstream.netloc, link={"name": "east~west",
                                                                                "upstream": "east"})
        listen = client.proxies()["west-to-east"]["listen"]
        assert "# TYPE" in scrape_text(f"http://{listen}{upstream.path}")  # the broker's page, through the link
        samples = scrape(f"http://{wan.api}/metrics")
    sent = {key: value for key, value in samples.items() if key.startswith("causeway_wan_link_sent_bytes_total{")}
    assert len(sent) == 2 and all(value > 0 for value in sent.values()), sent  # bytes crossed the link each way
    return {key.split("{", 1)[0] for key in samples}


def _wait(condition: Callable[[], bool], dashboard: str, named: set[str], served: set[str]) -> None:
    try:
        wait_until(condition, what=f"every metric of {dashboard} served", timeout_s=60, interval_s=0.5)
    except AssertionError as e:
        raise AssertionError(f"{e}; never served: {sorted(named - served)}") from None


@pytest.fixture
def east(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[ZkCluster]:
    running = ZkCluster(zookeeper, tmp_path / "east", ids=(1, 2), overrides=(
        "causeway.metrics.listener=127.0.0.1:0", "offsets.topic.num.partitions=3"))
    try:
        running.start()
        yield running
    finally:
        running.close()


def _mirror(tmp_path: Path, mode: str, source: str) -> tuple[BrokerProcess, ChildProcess, str]:
    """A target broker and a mirror of `mode` copying `orders` into it, and the mirror's metrics URL."""
    target = BrokerProcess(tmp_path / f"west-{mode}", overrides=("group.initial.rebalance.delay.ms=0",)).start()
    config = tmp_path / f"mirror-{mode}.yaml"
    config.write_text(
        f"source: {{alias: east, bootstrap: '{source}'}}\n"
        f"target: {{alias: west, bootstrap: '{target.bootstrap}'}}\n"
        f"mode: {mode}\n"
        "topics: {include: [orders]}\n"
        "emit.checkpoints.interval.seconds: 1\n"
        "metrics.listener: 127.0.0.1:0\n")
    log = tmp_path / f"mirror-{mode}.log"
    try:
        proc = start_mirror(config, log, tmp_path / f"status-{mode}.json")
    except BaseException:
        target.stop()
        raise
    return target, proc, logged_metrics_url(log)


def test_every_metric_the_dashboards_name_is_served_by_a_real_broker_mirror_or_wan_emulator(
        east: ZkCluster, tmp_path: Path) -> None:
    source = east.bootstrap()
    admin = AdminClient({"bootstrap.servers": source})
    admin.create_topics([NewTopic("orders", 3, 2)], operation_timeout=30)["orders"].result(timeout=60)
    producer = Producer({"bootstrap.servers": source, "acks": "all", "linger.ms": 5})
    for i in range(RECORDS):
        producer.produce("orders", value=b"v%d" % i, partition=i % 3)
    assert producer.flush(60) == 0
    consumer = Consumer({"bootstrap.servers": source, "group.id": "billing", "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition("orders", p, 10) for p in range(3)], asynchronous=False)
    finally:
        consumer.close()

    # The mirrors' fetches are the brokers' bytes out: the brokers are scraped while they run.
    broker_urls = [metrics_url(b) for b in east.brokers.values()]
    served_by_brokers: set[str] = set()
    served_by_mirrors: set[str] = set()
    broker_names = _named("causeway-broker.json")
    mirror_names = _named("causeway-mirror.json")
    started: list[tuple[BrokerProcess, ChildProcess, str]] = []
    try:
        for mode in ("mm2", "link"):
            started.append(_mirror(tmp_path, mode, source))

        def brokers_serve_all() -> bool:
            for url in broker_urls:
                served_by_brokers.update(sample_names(url))
            return broker_names <= served_by_brokers

        def mirrors_serve_all() -> bool:
            for _, _, url in started:
                served_by_mirrors.update(sample_names(url))
            return mirror_names <= served_by_mirrors

        _wait(mirrors_serve_all, "the mirror dashboard", mirror_names, served_by_mirrors)
        _wait(brokers_serve_all, "the broker dashboard", broker_names, served_by_brokers)
    finally:
        for target, proc, _ in started:
            proc.stop(10)
            target.stop()

    served_by_wan = _served_by_wan(tmp_path, broker_urls[0])
    every_name = {name for board in load_dashboards() for name in _named(board)}
    wan_names = {name for name in every_name if name.startswith(WAN_PREFIXES)}
    assert wan_names, "no dashboard reads the WAN emulator's link metrics"
    assert wan_names <= served_by_wan, sorted(wan_names - served_by_wan)
    topology_names = _named("causeway-topology.json")
    served = served_by_brokers | served_by_mirrors | served_by_wan
    assert topology_names <= served, sorted(topology_names - served)
