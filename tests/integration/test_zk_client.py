"""The trio ZooKeeper client against a real ZooKeeper: requests, errors, chroot, watches, session
events, an unreachable ZooKeeper, and a watch that fires far faster than it is read."""

from __future__ import annotations

import logging
import socket

import pytest
import trio
from kazoo.client import KazooClient

from broker.controller.zk.client import (
    CheckVersionOp,
    CreateOp,
    DeleteOp,
    SetOp,
    ZkBadVersion,
    ZkClient,
    ZkNodeExists,
    ZkNoNode,
    ZkNotEmpty,
    ZkSessionState,
    ZkUnavailable,
    open_zk_client,
    parse_connect,
)
from tests.support.polling import wait_for
from tests.support.zookeeper import ZooKeeperServer

SESSION_MS = 4000


async def _next(channel: trio.MemoryReceiveChannel, timeout_s: float = 10.0):  # type: ignore[no-untyped-def]
    with trio.fail_after(timeout_s):
        return await channel.receive()


async def test_requests_and_errors(zookeeper: ZooKeeperServer) -> None:
    async with open_zk_client(zookeeper.connect, session_timeout_ms=SESSION_MS) as zk:
        assert zk.session_id != 0 and zk.state is ZkSessionState.CONNECTED
        assert await zk.create("/a", b"one") == "/a"
        data, stat = await zk.get("/a")
        assert data == b"one" and stat.version == 0 and stat.ephemeral_owner == 0
        stat = await zk.set("/a", b"two", version=0)
        assert stat.version == 1
        with pytest.raises(ZkBadVersion, match="/a"):
            await zk.set("/a", b"three", version=0)
        with pytest.raises(ZkNodeExists):
            await zk.create("/a")
        with pytest.raises(ZkNoNode, match="/missing"):
            await zk.get("/missing")
        assert await zk.exists("/missing") is None

        await zk.create("/a/b/c", b"", make_parents=True)
        await zk.ensure_path("/a/b/d")
        await zk.ensure_path("/a/b/d")
        assert await zk.get_children("/a/b") == ["c", "d"]
        seq = await zk.create("/a/n_", b"", sequence=True)
        assert seq.startswith("/a/n_") and len(seq) == len("/a/n_") + 10
        with pytest.raises(ZkNotEmpty):
            await zk.delete("/a")
        await zk.delete("/a", recursive=True)
        assert await zk.exists("/a") is None


async def test_transactions_are_all_or_nothing(zookeeper: ZooKeeperServer) -> None:
    async with open_zk_client(zookeeper.connect, session_timeout_ms=SESSION_MS) as zk:
        await zk.create("/epoch", b"1")
        await zk.create("/state", b"s0")
        # A check that fails rolls back the other ops.
        with pytest.raises(ZkBadVersion, match="transaction op 0"):
            await zk.transaction([CheckVersionOp("/epoch", 5), SetOp("/state", b"s1"), CreateOp("/new")])
        assert (await zk.get("/state"))[0] == b"s0" and await zk.exists("/new") is None

        results = await zk.transaction([CheckVersionOp("/epoch", 0), SetOp("/state", b"s1", version=0),
                                        CreateOp("/new", b"x"), DeleteOp("/epoch")])
        assert results[0] is None and results[2] == "/new" and results[3] is None
        assert results[1] is not None and getattr(results[1], "version", None) == 1

        stat = await zk.set_checked("/state", b"s2", version=1, check=("/new", 0))
        assert stat.version == 2
        with pytest.raises(ZkBadVersion):
            await zk.set_checked("/state", b"s3", version=2, check=("/new", 7))

        await zk.create("/controller_epoch", b"0")
        version = await zk.create_controller("/controller", b"me", "/controller_epoch", b"1", 0)
        assert version == 1
        with pytest.raises(ZkNodeExists):
            await zk.create_controller("/controller", b"other", "/controller_epoch", b"2", 1)


async def test_chroot_is_created_and_confines_paths(zookeeper: ZooKeeperServer) -> None:
    async with open_zk_client(zookeeper.connect + "/kafka/one", session_timeout_ms=SESSION_MS) as zk:
        await zk.create("/x", b"inside")
        assert await zk.get_children("/") == ["x"]
    async with open_zk_client(zookeeper.connect, session_timeout_ms=SESSION_MS) as root:
        assert (await root.get("/kafka/one/x"))[0] == b"inside"


def test_connect_strings() -> None:
    target = parse_connect("a:1,b:2,[::1]:3/kafka/x")
    assert target.hosts == (("a", 1), ("b", 2), ("::1", 3)) and target.chroot == "/kafka/x"
    assert parse_connect("zk").hosts == (("zk", 2181),) and parse_connect("zk").chroot == ""
    for bad in ("", "a:1/kafka/", "a:x", "a:1//k", ":1"):
        with pytest.raises(ValueError, match="zookeeper.connect"):
            parse_connect(bad)


async def test_watches_fire(zookeeper: ZooKeeperServer) -> None:
    async with open_zk_client(zookeeper.connect, session_timeout_ms=SESSION_MS) as zk:
        children = zk.watch_children("/brokers/ids")
        assert await _next(children) == []  # absent: no children, the watch goes on
        await zk.create("/brokers/ids/1", b"", make_parents=True)
        assert await _next(children) == ["1"]
        await zk.create("/brokers/ids/2", b"", ephemeral=True)
        assert await _next(children) == ["1", "2"]
        await zk.delete("/brokers/ids/1")
        assert await _next(children) == ["2"]

        data = zk.watch_data("/controller")
        assert await _next(data) is None
        await zk.create("/controller", b"1")
        assert await _next(data) == b"1"
        await zk.set("/controller", b"2")
        assert await _next(data) == b"2"
        await zk.delete("/controller")
        assert await _next(data) is None

        # Closing the channel ends the watch's task.
        data.close()
        await zk.create("/controller", b"3")
        await wait_for(lambda: not any(w.path == "/controller" for w in zk._watches), what="the watch to stop",
                       timeout_s=10)


async def test_a_watch_firing_far_faster_than_read_keeps_one_value(zookeeper: ZooKeeperServer) -> None:
    """1,000 changes while nobody reads: one value waits (the newest), one ZooKeeper watch is set."""
    async with open_zk_client(zookeeper.connect, session_timeout_ms=SESSION_MS) as zk:
        await zk.create("/hot", b"0")
        values = zk.watch_data("/hot")
        await wait_for(lambda: values.statistics().current_buffer_used == 1, what="the first value")
        writes = 1000

        async def writer(first: int) -> None:
            for i in range(first, writes + 1, 4):
                await zk.set("/hot", str(i).encode())

        high_water = 0
        async with trio.open_nursery() as nursery:
            for first in range(1, 5):
                nursery.start_soon(writer, first)
            while len(nursery.child_tasks) > 0:
                high_water = max(high_water, values.statistics().current_buffer_used,
                                 len(zk._kazoo._data_watchers.get("/hot", ())))
                await trio.sleep(0.001)
        assert high_water <= 1
        final = (await zk.get("/hot"))[0]
        # The newest value arrives; what waits is always one value, never a backlog.
        await wait_for(lambda: _peek_latest(values) == final, what="the newest value", timeout_s=10)


def _peek_latest(channel: trio.MemoryReceiveChannel) -> bytes | None:  # type: ignore[type-arg]
    # Take what waits, if anything, and remember it: the channel holds at most one value.
    try:
        value = channel.receive_nowait()
    except trio.WouldBlock:
        return getattr(_peek_latest, "last", None)
    _peek_latest.last = value  # type: ignore[attr-defined]
    return value  # type: ignore[no-any-return]


async def _expire(zookeeper: ZooKeeperServer, zk: ZkClient) -> None:
    """Expire `zk`'s session: a second client takes it over with its id and password and closes it."""
    session_id, password = zk._kazoo.client_id
    other = KazooClient(hosts=zookeeper.connect, client_id=(session_id, password), timeout=SESSION_MS / 1000)
    await trio.to_thread.run_sync(other.start)
    await trio.to_thread.run_sync(other.stop)
    other.close()


async def test_session_expiry_is_reported_and_a_new_session_follows(zookeeper: ZooKeeperServer) -> None:
    async with open_zk_client(zookeeper.connect, session_timeout_ms=SESSION_MS) as zk:
        events = zk.session_events()
        first = await _next(events)
        assert first.state is ZkSessionState.CONNECTED and first.session_id == zk.session_id
        await zk.create("/mine", b"", ephemeral=True)
        children = zk.watch_children("/")
        assert "mine" in await _next(children)

        old = zk.session_id
        await _expire(zookeeper, zk)
        seen = []
        with trio.fail_after(20):
            while not (seen and seen[-1].state is ZkSessionState.CONNECTED and seen[-1].session_id != old):
                seen.append(await events.receive())
        assert any(e.state is ZkSessionState.LOST and e.session_id == old for e in seen), seen
        assert zk.session_id == seen[-1].session_id != old
        assert await zk.exists("/mine") is None  # the expired session's ephemeral is gone
        # Watches carry over to the new session: the ephemeral's disappearance is seen.
        with trio.fail_after(10):
            while "mine" in await children.receive():
                pass
        await zk.create("/again", b"")
        with trio.fail_after(10):
            while "again" not in await children.receive():
                pass


async def test_a_restarted_zookeeper_suspends_then_resumes_the_session(zookeeper: ZooKeeperServer) -> None:
    # A session far longer than a restart under load (a JVM start can take seconds on a busy machine).
    async with open_zk_client(zookeeper.connect, session_timeout_ms=30000, connection_timeout_ms=60000) as zk:
        events = zk.session_events()
        assert (await _next(events)).state is ZkSessionState.CONNECTED
        session = zk.session_id
        await zk.create("/e", b"", ephemeral=True)
        await trio.to_thread.run_sync(zookeeper.kill)
        suspended = await _next(events)
        assert suspended.state is ZkSessionState.SUSPENDED and suspended.session_id == session
        await trio.to_thread.run_sync(zookeeper.start)
        # A read while disconnected waits for the connection to come back.
        assert await zk.exists("/e") is not None
        back = await _next(events, 60)
        assert back.state is ZkSessionState.CONNECTED and back.session_id == session


def test_unread_session_events_collapse_but_keep_an_expiry() -> None:
    from broker.controller.zk.client import ZkSessionEvent, collapse_unread_events

    c, s, lost = ZkSessionState.CONNECTED, ZkSessionState.SUSPENDED, ZkSessionState.LOST
    flapping = [ZkSessionEvent(s, 1), ZkSessionEvent(c, 1), ZkSessionEvent(lost, 1), ZkSessionEvent(c, 2),
                ZkSessionEvent(s, 2), ZkSessionEvent(c, 2)]
    assert collapse_unread_events(flapping) == [ZkSessionEvent(lost, 1), ZkSessionEvent(c, 2)]
    assert collapse_unread_events(flapping[:2]) == [ZkSessionEvent(c, 1)]
    assert collapse_unread_events(flapping[:3]) == [ZkSessionEvent(lost, 1)]


def _refused_port() -> tuple[socket.socket, int]:
    """A loopback port that refuses connections for as long as the socket is held (bound, not
    listening: no other process can take it meanwhile)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock, sock.getsockname()[1]


async def test_unreachable_zookeeper_is_retried_with_backoff_then_unavailable(
        autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture) -> None:
    sock, port = _refused_port()
    with sock, caplog.at_level(logging.WARNING, logger="broker.controller.zk.client"):
        with pytest.raises(ZkUnavailable, match=f"127.0.0.1:{port}.*within 10000 ms"):
            async with open_zk_client(f"127.0.0.1:{port}", session_timeout_ms=SESSION_MS,
                                      connection_timeout_ms=10000):
                pass
    attempts = [r.getMessage() for r in caplog.records if "cannot connect to ZooKeeper" in r.getMessage()]
    # Backoff from 0.5 s doubling to 5 s within 10 s: a handful of attempts, each one logged
    # with the address, never a spin.
    assert 3 <= len(attempts) <= 6, attempts
    assert all(f"127.0.0.1:{port}" in line and "refused" in line.lower() for line in attempts), attempts


async def test_a_zookeeper_that_comes_up_late_is_connected(zookeeper: ZooKeeperServer,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    await trio.to_thread.run_sync(zookeeper.stop)
    with caplog.at_level(logging.WARNING, logger="broker.controller.zk.client"):
        async with trio.open_nursery() as nursery:
            async def start_later() -> None:
                await wait_for(lambda: any("cannot connect" in r.getMessage() for r in caplog.records),
                               what="a failed attempt", timeout_s=10)
                await trio.to_thread.run_sync(zookeeper.start)

            nursery.start_soon(start_later)
            async with open_zk_client(zookeeper.connect, session_timeout_ms=SESSION_MS,
                                      connection_timeout_ms=30000) as zk:
                assert zk.state is ZkSessionState.CONNECTED
                await zk.create("/up", b"")
