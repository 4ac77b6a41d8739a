"""Joining a ZooKeeper-mode cluster against a real ZooKeeper: Kafka's top-level paths, the cluster
id and meta.properties, broker registration (duplicates refused, a killed predecessor waited
out, re-registration after expiry) and producer id blocks that never overlap."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import trio
from kazoo.client import KazooClient

from broker.config import ListenerSpec, StartupError
from broker.controller.model import BrokerInfo
from broker.controller.zk import znodes
from broker.controller.zk.client import ZkSessionState, open_zk_client
from broker.controller.zk.producer_ids import allocate_producer_id_block
from broker.controller.zk.registration import (
    check_meta_properties,
    ensure_persistent_paths,
    get_or_create_cluster_id,
    register_broker,
)
from tests.support.polling import wait_for
from tests.support.zookeeper import ZooKeeperServer

SESSION_MS = 4000
PROTOCOLS = {"PLAINTEXT": "PLAINTEXT"}


def _info(broker_id: int, port: int) -> BrokerInfo:
    return BrokerInfo(broker_id, (ListenerSpec("PLAINTEXT", "127.0.0.1", port),))


async def test_persistent_paths_and_cluster_id(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    async with open_zk_client(zookeeper.connect + "/c1", session_timeout_ms=SESSION_MS) as zk, \
            open_zk_client(zookeeper.connect + "/c1", session_timeout_ms=SESSION_MS) as zk2:
        await ensure_persistent_paths(zk)
        for path in znodes.PERSISTENT_PATHS:
            assert await zk.exists(path) is not None, path

        ids: list[str] = []

        async def get(client) -> None:  # type: ignore[no-untyped-def]
            ids.append(await get_or_create_cluster_id(client))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(get, zk)
            nursery.start_soon(get, zk2)
        assert ids[0] == ids[1] and len(ids[0]) == 22
        data, _ = await zk.get("/cluster/id")
        assert data == b'{"version":"1","id":"%s"}' % ids[0].encode()

        # meta.properties: written when missing, accepted when it matches.
        dirs = [tmp_path / "d1", tmp_path / "d2"]
        await check_meta_properties(dirs, 1, ids[0])
        text = (dirs[1] / "meta.properties").read_text()
        assert "broker.id=1\n" in text and f"cluster.id={ids[0]}\n" in text
        await check_meta_properties(dirs, 1, ids[0])
        # Another cluster's data dir: refused naming both ids (Kafka's InconsistentClusterIdException).
        with pytest.raises(StartupError) as caught:
            await check_meta_properties(dirs, 1, "OtherClusterIdAAAAAAAA")
        assert ids[0] in str(caught.value) and "OtherClusterIdAAAAAAAA" in str(caught.value)
        assert "wrong cluster" in str(caught.value)
        with pytest.raises(StartupError, match="belongs to broker 1, not 2"):
            await check_meta_properties(dirs, 2, ids[0])

        # Garbage in /cluster/id stops the start naming the znode.
        await zk.set("/cluster/id", b"{nope")
        with pytest.raises(StartupError, match="znode /cluster/id: "):
            await get_or_create_cluster_id(zk)


async def test_proposed_cluster_id_is_used_when_zookeeper_has_none(zookeeper: ZooKeeperServer) -> None:
    async with open_zk_client(zookeeper.connect + "/c2", session_timeout_ms=SESSION_MS) as zk:
        assert await get_or_create_cluster_id(zk, proposed="FromMetaPropertiesAAAA") == "FromMetaPropertiesAAAA"
        assert await get_or_create_cluster_id(zk, proposed="IgnoredNowAAAAAAAAAAAA") == "FromMetaPropertiesAAAA"


async def test_registration_and_a_duplicate_broker_id(zookeeper: ZooKeeperServer) -> None:
    async with open_zk_client(zookeeper.connect, session_timeout_ms=SESSION_MS) as first, \
            open_zk_client(zookeeper.connect, session_timeout_ms=SESSION_MS) as second:
        epoch = await register_broker(first, _info(1, 9092), PROTOCOLS)
        data, stat = await first.get("/brokers/ids/1")
        assert stat.ephemeral_owner == first.session_id and stat.czxid == epoch
        registration = znodes.parse_broker("/brokers/ids/1", data)
        assert registration.version == 5 and registration.endpoints == ["PLAINTEXT://127.0.0.1:9092"]
        # Registering again from the same session keeps the node (Kafka's checked create).
        assert await register_broker(first, _info(1, 9092), PROTOCOLS) == epoch
        data, _ = await first.get("/brokers/ids/1")

        with pytest.raises(StartupError) as caught:
            await register_broker(second, _info(1, 9093), PROTOCOLS, wait_s=0)
        message = str(caught.value)
        assert message.startswith(f"broker id 1 is already registered in ZooKeeper at {zookeeper.connect}"
                                  "/brokers/ids/1"), message
        assert "PLAINTEXT://127.0.0.1:9092" in message and "another broker.id" in message
        # The first broker's registration is untouched.
        assert (await second.get("/brokers/ids/1"))[0] == data


async def test_a_predecessors_registration_is_waited_out(zookeeper: ZooKeeperServer,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    """A broker restarted right after a SIGKILL finds its old znode, held by a session that only
    times out later: it waits for it to go, then registers."""
    old = KazooClient(hosts=zookeeper.connect, timeout=SESSION_MS / 1000)
    await trio.to_thread.run_sync(old.start)
    await trio.to_thread.run_sync(lambda: old.create("/brokers/ids/5", b"{}", ephemeral=True, makepath=True))
    async with open_zk_client(zookeeper.connect, session_timeout_ms=SESSION_MS) as zk:
        async with trio.open_nursery() as nursery:
            async def end_old_session_once_waiting() -> None:
                await wait_for(lambda: any("waiting up to" in r.getMessage() for r in caplog.records),
                               what="the registration to wait", timeout_s=10)
                await trio.to_thread.run_sync(old.stop)
                old.close()

            with caplog.at_level(logging.WARNING, logger="broker.controller.zk.registration"):
                nursery.start_soon(end_old_session_once_waiting)
                epoch = await register_broker(zk, _info(5, 9092), PROTOCOLS, wait_s=30)
        _, stat = await zk.get("/brokers/ids/5")
        assert stat.ephemeral_owner == zk.session_id and stat.czxid == epoch


async def test_reregistration_after_session_expiry(zookeeper: ZooKeeperServer) -> None:
    async with open_zk_client(zookeeper.connect, session_timeout_ms=SESSION_MS) as zk:
        events = zk.session_events()
        first_epoch = await register_broker(zk, _info(2, 9092), PROTOCOLS)
        old = zk.session_id
        session_id, password = zk._kazoo.client_id
        thief = KazooClient(hosts=zookeeper.connect, client_id=(session_id, password), timeout=SESSION_MS / 1000)
        await trio.to_thread.run_sync(thief.start)
        await trio.to_thread.run_sync(thief.stop)
        thief.close()
        with trio.fail_after(20):
            async for event in events:
                if event.state is ZkSessionState.CONNECTED and event.session_id != old:
                    break
        new_epoch = await register_broker(zk, _info(2, 9092), PROTOCOLS)
        assert new_epoch > first_epoch  # a new registration: a new broker epoch
        assert (await zk.get("/brokers/ids/2"))[1].ephemeral_owner == zk.session_id


async def test_producer_id_blocks_never_overlap(zookeeper: ZooKeeperServer) -> None:
    blocks: list[tuple[int, range]] = []
    async with open_zk_client(zookeeper.connect, session_timeout_ms=SESSION_MS) as a, \
            open_zk_client(zookeeper.connect, session_timeout_ms=SESSION_MS) as b:
        await ensure_persistent_paths(a)  # Kafka's empty /latest_producer_id_block

        async def allocate(zk, broker_id: int) -> None:  # type: ignore[no-untyped-def]
            for _ in range(15):
                blocks.append((broker_id, await allocate_producer_id_block(zk, broker_id)))

        async with trio.open_nursery() as nursery:
            for broker_id, zk in ((1, a), (2, b), (3, a), (4, b)):
                nursery.start_soon(allocate, zk, broker_id)
        ranges = sorted((r for _, r in blocks), key=lambda r: r.start)
        assert len(ranges) == 60 and all(len(r) == 1000 for r in ranges)
        # Contiguous from 0, no id twice.
        assert [r.start for r in ranges] == list(range(0, 60_000, 1000))
        data, _ = await a.get("/latest_producer_id_block")
        last = znodes.parse_producer_id_block("/latest_producer_id_block", data)
        assert (last.first, last.last) == (59_000, 59_999)
        assert last.broker in {bid for bid, r in blocks if r.start == 59_000}
