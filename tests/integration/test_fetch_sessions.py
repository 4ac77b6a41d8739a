"""Incremental fetch sessions (KIP-227) on real brokers: followers of a three-broker ZooKeeper
cluster name only what changed once their session is open, idle partitions stay in the ISR,
replication, ISR shrink and expansion and leader changes still work, a follower whose leader
restarted starts over with a full fetch, and a leader with no room for a session replicates
through full fetches. A raw consumer sees the session errors and incremental answers as Kafka
gives them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker.client.connection import open_connection
from broker.protocol.errors import ErrorCode
from broker.protocol.messages import FetchRequest, FetchResponse, MetadataRequest
from deploy.broker_process import BrokerProcess
from tests.support.cluster import ZkCluster
from tests.support.consume import read_partition
from tests.support.metrics import metrics_url, scrape
from tests.support.polling import wait_until
from tests.support.zookeeper import ZooKeeperServer

TOPIC = "many"
PARTITIONS = 30
LAG_MS = 3000
OVERRIDES = ("zookeeper.session.timeout.ms=6000", "offsets.topic.num.partitions=3", f"replica.lag.time.max.ms={LAG_MS}",
             "min.insync.replicas=2", "leader.imbalance.check.interval.seconds=1",
             "causeway.metrics.listener=127.0.0.1:0", "log.flush.offset.checkpoint.interval.ms=200")
INCREMENTAL = 'causeway_replica_fetch_requests_total{kind="incremental"}'
FULL = 'causeway_replica_fetch_requests_total{kind="full"}'
SENT_INCREMENTAL = 'causeway_replica_fetch_partitions_total{kind="incremental"}'


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ZkCluster]:
    running = ZkCluster(zookeeper, tmp_path, (*OVERRIDES, *getattr(request, "param", ())))
    try:
        running.start()
        yield running
    finally:
        running.close()


def _metrics(broker: BrokerProcess) -> dict[str, float]:
    return scrape(metrics_url(broker))


def _cached(cluster: ZkCluster) -> float:
    """Partitions held in the fetch sessions of all the brokers."""
    key = "kafka_server_fetchsessioncache_numincrementalfetchpartitionscached"
    return sum(_metrics(b)[key] for b in cluster.brokers.values())


def _log_starts(cluster: ZkCluster, broker_id: int) -> dict[int, int]:
    """The topic's log start offsets in the broker's log-start-offset-checkpoint."""
    path = cluster.root / f"broker-{broker_id}" / "log-start-offset-checkpoint"
    lines = path.read_text().splitlines()[2:] if path.exists() else []
    return {int(p): int(o) for t, p, o in (line.split() for line in lines) if t == TOPIC}


def _full_isr(cluster: ZkCluster) -> bool:
    return all(sorted(cluster.state(TOPIC, p)["isr"]) == [1, 2, 3] for p in range(PARTITIONS))  # type: ignore[arg-type]


def _create(cluster: ZkCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)], operation_timeout=30)[TOPIC].result(timeout=60)
    wait_until(lambda: _full_isr(cluster), what="every partition with its whole ISR", timeout_s=60)


def _produce_everywhere(bootstrap: str, tag: str) -> None:
    """One acks=all record to each partition; every one acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "message.timeout.ms": 60000, "linger.ms": 0})
    failed: list[object] = []
    for p in range(PARTITIONS):
        producer.produce(TOPIC, f"{tag}-{p}".encode(), partition=p,
                         on_delivery=lambda err, _msg: failed.append(err) if err is not None else None)
    assert producer.flush(90) == 0 and not failed, failed


def _rounds(broker: BrokerProcess, count: int, kind: str = INCREMENTAL) -> tuple[dict[str, float], dict[str, float]]:
    """The broker's metrics before and after its followers made `count` more fetches of `kind`."""
    before = _metrics(broker)
    after: dict[str, float] = {}

    def done() -> bool:
        after.update(_metrics(broker))
        return after.get(kind, 0) >= before.get(kind, 0) + count

    wait_until(done, what=f"{count} {kind} fetches by broker's followers", timeout_s=60, interval_s=0.2)
    return before, after


def _delta(before: dict[str, float], after: dict[str, float], name: str) -> float:
    return after.get(name, 0) - before.get(name, 0)


def test_followers_fetch_incrementally_and_replication_still_works(cluster: ZkCluster) -> None:
    _create(cluster)
    follower = cluster.brokers[2]
    followed = sum(1 for p in range(PARTITIONS) if cluster.state(TOPIC, p)["leader"] != 2)
    wait_until(lambda: _cached(cluster) >= 2 * PARTITIONS, what="both followers of every partition in a session",
               timeout_s=60, interval_s=0.2)

    # Idle: once the sessions are open, rounds name (next to) nothing, where a full fetch names
    # every followed partition each round. Longer than replica.lag.time.max.ms, so an idle
    # partition's followers must stay in the ISR although they no longer name it.
    rounds = 2 * LAG_MS // 500 + 2  # replica.fetch.wait.max.ms=500 per idle round
    before, after = _rounds(follower, rounds)
    assert _delta(before, after, FULL) == 0
    assert _delta(before, after, SENT_INCREMENTAL) < followed, (before, after)
    for leader_id in (1, 3):
        assert _metrics(cluster.brokers[leader_id])["kafka_server_fetchsessioncache_numincrementalfetchsessions"] >= 1
    _produce_everywhere(cluster.bootstrap(), "one")
    assert _full_isr(cluster), "an idle partition's follower left the ISR"
    # The changed partitions were named in incremental fetches, and the ISR stays whole past the lag bound.
    before, after = _rounds(follower, rounds)
    assert _delta(before, after, FULL) == 0
    assert _full_isr(cluster)

    # DeleteRecords moves the leaders' log starts on idle partitions: the sessions answer it and
    # every follower's log starts there too (as its log-start-offset-checkpoint says).
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    for future in admin.delete_records([TopicPartition(TOPIC, p, 1) for p in range(PARTITIONS)]).values():
        future.result(30)
    wait_until(lambda: all(_log_starts(cluster, i) == dict.fromkeys(range(PARTITIONS), 1) for i in (1, 2, 3)),
               what="every replica's log start at 1", timeout_s=60, interval_s=0.2)

    # A follower stops: it leaves the ISR of the partitions that move on (shrink), acks=all still
    # works with two, and it comes back through a new connection and a full fetch (expansion).
    cluster.brokers[3].kill()
    _produce_everywhere(cluster.bootstrap(1, 2), "two")
    wait_until(lambda: all(3 not in cluster.state(TOPIC, p)["isr"] for p in range(PARTITIONS)),  # type: ignore[operator]
               what="broker 3 out of every ISR", timeout_s=60)
    cluster.brokers[3].start()
    wait_until(lambda: _full_isr(cluster), what="broker 3 back in every ISR", timeout_s=90)
    assert _metrics(cluster.brokers[3]).get(FULL, 0) > 0  # its new sessions began full
    # Its leaders changed meanwhile (broker 3 led a third of them, and takes them back as the
    # preferred leader): the others started over with broker 3 with a full fetch.
    _produce_everywhere(cluster.bootstrap(), "three")

    def settled() -> bool:  # a few rounds without a full fetch, once the leaderships are back
        before, after = _rounds(follower, 4)
        return _delta(before, after, FULL) == 0

    wait_until(settled, what="the follower back to incremental fetches only", timeout_s=60)

    for p in range(PARTITIONS):
        values = [m.value() for m in read_partition(cluster.bootstrap(), TOPIC, p, start=1)]
        assert values == [f"{tag}-{p}".encode() for tag in ("two", "three")], (p, values)  # "one" was deleted
        for broker_id in (1, 2, 3):  # every replica holds the same bytes
            files = sorted((cluster.root / f"broker-{broker_id}").glob(f"{TOPIC}-{p}/*.log"))
            assert b"".join(f.read_bytes() for f in files).count(f"three-{p}".encode()) == 1


@pytest.mark.parametrize("cluster", [("max.incremental.fetch.session.cache.slots=1",)], indirect=True)
def test_a_leader_without_room_for_a_session_replicates_through_full_fetches(cluster: ZkCluster) -> None:
    _create(cluster)
    # Two followers per leader, one slot: one of them fetches without a session, every round full.
    fulls = [_rounds(cluster.brokers[i], 0, FULL)[1].get(FULL, 0) for i in (1, 2, 3)]
    wait_until(lambda: sum(_metrics(cluster.brokers[i]).get(FULL, 0) for i in (1, 2, 3)) >= sum(fulls) + 6,
               what="full fetches going on", timeout_s=60, interval_s=0.2)
    for leader_id in (1, 2, 3):
        assert _metrics(cluster.brokers[leader_id])["kafka_server_fetchsessioncache_numincrementalfetchsessions"] <= 1
    _produce_everywhere(cluster.bootstrap(), "one")
    assert _full_isr(cluster)
    for p in range(PARTITIONS):
        assert [m.value() for m in read_partition(cluster.bootstrap(), TOPIC, p)] == [f"one-{p}".encode()]


async def _fetch(conn: object, request: FetchRequest) -> FetchResponse:
    response: FetchResponse = await conn.request(request)  # type: ignore[attr-defined]
    return response


async def test_a_consumers_session_answers_what_changed_and_refuses_stale_epochs(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", topics=("s:3",)).start()
    try:
        host, port = broker.bootstrap.rsplit(":", 1)
        async with open_connection(host, int(port), client_id="raw") as conn:
            md = await conn.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="s")]))
            topic_id: uuid.UUID = md.topics[0].topic_id

            def fetch(session_id: int, epoch: int, partitions: list[tuple[int, int]],
                      forget: Sequence[int] = ()) -> FetchRequest:
                return FetchRequest(
                    replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=1 << 20, session_id=session_id,
                    session_epoch=epoch,
                    topics=[FetchRequest.FetchTopic(topic="s", topic_id=topic_id, partitions=[
                        FetchRequest.FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=1 << 20)
                        for p, o in partitions])] if partitions else [],
                    forgotten_topics_data=[FetchRequest.ForgottenTopic(topic="s", topic_id=topic_id,
                                                                       partitions=list(forget))] if forget else [])

            full = await _fetch(conn, fetch(0, 0, [(0, 0), (1, 0), (2, 0)]))
            assert full.error_code == ErrorCode.NONE and full.session_id > 0
            assert sorted(p.partition_index for t in full.responses for p in t.partitions) == [0, 1, 2]
            sid = full.session_id
            # Nothing changed: an incremental answer names no partition.
            quiet = await _fetch(conn, fetch(sid, 1, []))
            assert quiet.error_code == ErrorCode.NONE and quiet.session_id == sid
            assert [p for t in quiet.responses for p in t.partitions] == []
            # A record in partition 1: only it is answered, with its records.
            producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "1"})
            producer.produce("s", b"hello", partition=1)
            assert producer.flush(30) == 0
            changed = await _fetch(conn, fetch(sid, 2, []))
            parts = [p for t in changed.responses for p in t.partitions]
            assert [p.partition_index for p in parts] == [1] and parts[0].high_watermark == 1
            assert b"hello" in bytes(parts[0].records)
            # The client moves on past it and forgets partition 2: nothing more to say.
            moved = await _fetch(conn, fetch(sid, 3, [(1, 1)], forget=[2]))
            assert [p for t in moved.responses for p in t.partitions] == []
            # A stale epoch (a duplicate request) and an unknown session are refused, as Kafka.
            stale = await _fetch(conn, fetch(sid, 3, []))
            assert stale.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
            unknown = await _fetch(conn, fetch(sid + 1 if sid < 2**31 - 1 else 1, 1, []))
            assert unknown.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
            # Epoch -1 closes the session: its id is unknown afterwards.
            closed = await _fetch(conn, fetch(sid, -1, [(0, 0)]))
            assert closed.error_code == ErrorCode.NONE and closed.session_id == 0
            gone = await _fetch(conn, fetch(sid, 4, []))
            assert gone.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    finally:
        broker.stop()



async def test_sessions_never_hold_more_partitions_than_the_broker_allows(tmp_path: Path) -> None:
    """The cache holds at most 10 entries per partition the broker may host (here 4: 40). A
    client that grows its sessions past that through incremental fetches loses the session it
    grew (FETCH_SESSION_ID_NOT_FOUND), and a full fetch that does not fit is answered without one."""
    broker = BrokerProcess(tmp_path / "data", topics=("s:3",),
                           overrides=("max.broker.partitions=4", "offsets.topic.num.partitions=1")).start()
    try:
        host, port = broker.bootstrap.rsplit(":", 1)
        async with open_connection(host, int(port), client_id="raw") as conn:
            def fetch(session_id: int, epoch: int, partitions: Sequence[int]) -> FetchRequest:
                return FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, session_id=session_id,
                                    session_epoch=epoch, topics=[FetchRequest.FetchTopic(topic="s", partitions=[
                                        FetchRequest.FetchPartition(partition=p, partition_max_bytes=1024)
                                        for p in partitions])])

            sessions = []
            for _ in range(16):
                full = await _fetch(conn, fetch(0, 0, [0]))
                assert full.session_id > 0
                sessions.append(full.session_id)
            codes = [ErrorCode((await _fetch(conn, fetch(sid, 1, [1, 2]))).error_code) for sid in sessions]
            expected, held = [], len(sessions)
            for _ in sessions:  # each growth adds 2; one past 40 drops its session (1 + 2)
                fits = held + 2 <= 40
                expected.append(ErrorCode.NONE if fits else ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
                held += 2 if fits else -1
            assert codes == expected and ErrorCode.FETCH_SESSION_ID_NOT_FOUND in codes, codes
            again = await _fetch(conn, fetch(0, 0, [0, 1, 2]))  # 39 + 3 > 40
            assert again.error_code == ErrorCode.NONE and again.session_id == 0
            assert sorted(p.partition_index for t in again.responses for p in t.partitions) == [0, 1, 2]
    finally:
        broker.stop()
