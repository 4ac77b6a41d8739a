"""The launcher with real processes: two datacenters, a WAN link, restarts, status, clean stop."""

from __future__ import annotations

import os
import signal
import time
from functools import partial
from pathlib import Path

import pytest
import trio
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from deploy.launcher.control import alive, status, stop
from deploy.launcher.launch import LaunchState, run_plan
from deploy.launcher.plan import ClusterPlan, LaunchPlan, LinkPlan
from deploy.supervisor import Supervised

PLAN = LaunchPlan(
    name="two-dc",
    clusters=(
        ClusterPlan("east", "east", topics={"orders": 3}, remote_datacenters=("west",)),
        ClusterPlan("west", "west"),
    ),
    links=(LinkPlan("east", "west", latency_ms=20, jitter_ms=2, bandwidth_bytes_per_s=50_000_000),),
)


def _round_trip_across_the_link(east_local: str, east_via_wan: str) -> tuple[int, int]:
    producer = Producer({"bootstrap.servers": east_local})
    for i in range(10):
        producer.produce("orders", value=b"%d" % i, partition=0)
    assert producer.flush(30) == 0
    # A client in the west datacenter: bootstrap and every later connection go through the proxy.
    admin = AdminClient({"bootstrap.servers": east_via_wan})
    brokers = admin.list_topics(timeout=30).brokers
    advertised = {f"{b.host}:{b.port}" for b in brokers.values()}
    consumer = Consumer({"bootstrap.servers": east_via_wan, "group.id": "west-reader", "enable.auto.commit": False})
    consumer.assign([TopicPartition("orders", 0, 0)])
    got = 0
    deadline = time.monotonic() + 30
    while got < 10 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got += 1
    consumer.close()
    assert advertised == {east_via_wan}
    return got, len(brokers)


async def test_up_status_restart_and_down(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    async with trio.open_nursery() as nursery:
        state: LaunchState = await nursery.start(run_plan, PLAN, state_dir)
        report = await trio.to_thread.run_sync(status, state_dir)
        assert report["running"] and report["wan"]["healthy"]
        assert {n: c["healthy"] for n, c in report["clusters"].items()} == {"east": True, "west": True}
        east = report["clusters"]["east"]
        assert set(east["wan"]) == {"west"} and east["wan"]["west"] != east["bootstrap"]

        got, brokers = await trio.to_thread.run_sync(_round_trip_across_the_link, east["bootstrap"],
                                                      east["wan"]["west"])
        assert (got, brokers) == (10, 1)

        # Kill the east broker: the supervisor brings it back on the same address.
        supervised = state.clusters["east"].broker
        back = trio.Event()
        saves_state = supervised.on_change

        def watch(s: Supervised) -> None:
            if saves_state is not None:
                saves_state(s)
            if s.restarts == 1 and s.healthy:
                back.set()

        supervised.on_change = watch
        victim = supervised.pid
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
        with trio.fail_after(60):
            await back.wait()
        report = await trio.to_thread.run_sync(status, state_dir)
        assert report["clusters"]["east"]["healthy"]
        assert report["clusters"]["east"]["brokers"][0]["restarts"] == 1
        pids = [c.broker.pid for c in state.clusters.values()] + [state.wan.pid if state.wan else None]
        nursery.cancel_scope.cancel()
    assert not any(alive(pid) for pid in pids)  # cancelling stopped every process
    assert stop(state_dir) == []  # nothing left for `down` to stop


async def test_an_external_toxiproxy_serves_the_links(tmp_path: Path) -> None:
    """Pointed at a running Toxiproxy API (here Causeway's emulator in this process, standing in
    for the real one), the launcher starts no emulator, makes its proxies there, removes them."""
    from deploy.wan import serve_wan
    from deploy.wan.client import WanClient

    def proxies(api: str) -> dict[str, object]:
        return WanClient(api, timeout_s=10).proxies()

    async with trio.open_nursery() as outer:
        host, port = await outer.start(serve_wan, "127.0.0.1", 0)
        api = f"{host}:{port}"
        async with trio.open_nursery() as nursery:
            state: LaunchState = await nursery.start(partial(run_plan, PLAN, tmp_path / "s", toxiproxy=api))
            assert state.wan is None and state.wan_api == api
            made = await trio.to_thread.run_sync(proxies, api)
            assert set(made) == {"east-to-west"}
            # The proxy crosses the shared link east~west (its upstream, the broker, in east),
            # which carries the link's shaping; the proxy has no toxics of its own.
            assert made["east-to-west"]["link"] == {"name": "east~west", "upstream": "east"}  # type: ignore[index]
            assert made["east-to-west"]["toxics"] == []  # type: ignore[index]
            links = await trio.to_thread.run_sync(WanClient(api, timeout_s=10).links)
            assert {k: v for k, v in links["east~west"].items() if k != "sent"} == {
                "name": "east~west", "between": ["east", "west"], "bandwidth": 50_000_000, "latency": 20,
                "jitter": 2, "loss": 0.0, "reorder": 0.0}
            report = await trio.to_thread.run_sync(status, tmp_path / "s")
            assert report["wan"]["healthy"] and report["wan"]["pid"] is None
            metrics_host, metrics_port = state.metrics.rsplit(":", 1)
            await (await trio.open_tcp_stream(metrics_host, int(metrics_port))).aclose()  # served
            nursery.cancel_scope.cancel()
        # Cancelled, the launcher still cleans up: its proxies and links, and its metrics endpoint.
        with pytest.raises(OSError):
            await trio.open_tcp_stream(metrics_host, int(metrics_port))
        assert await trio.to_thread.run_sync(proxies, api) == {}
        assert await trio.to_thread.run_sync(WanClient(api, timeout_s=10).links) == {}
        outer.cancel_scope.cancel()


async def test_a_toxiproxy_without_links_gets_the_link_as_toxics_per_proxy(tmp_path: Path) -> None:
    """A real Toxiproxy has no /links (404): each proxy then gets the link's latency and
    bandwidth as its own toxics, as before links were shared."""
    from deploy.wan.api import WanApi
    from deploy.wan.client import WanClient
    from deploy.wan.http import Request, Response, serve_http
    from deploy.wan.proxy import ProxyRegistry, open_listener

    async with trio.open_nursery() as outer:
        api_of_emulator = WanApi(ProxyRegistry(outer))

        async def like_toxiproxy(request: Request) -> Response:
            if request.target.startswith("/links"):
                return Response(404, b'{"error": "not found", "status": 404}\n')
            return await api_of_emulator.handle(request)

        listener = await open_listener("127.0.0.1", 0)
        await outer.start(serve_http, listener, like_toxiproxy)
        api = f"127.0.0.1:{listener.socket.getsockname()[1]}"
        async with trio.open_nursery() as nursery:
            state: LaunchState = await nursery.start(partial(run_plan, PLAN, tmp_path / "s", toxiproxy=api))
            assert not state.shared_links and state.wan_links == []
            made = await trio.to_thread.run_sync(WanClient(api, timeout_s=10).proxies)
            assert "link" not in made["east-to-west"]
            assert {t["name"] for t in made["east-to-west"]["toxics"]} == {
                "latency_upstream", "latency_downstream", "bandwidth_upstream", "bandwidth_downstream"}
            nursery.cancel_scope.cancel()
        outer.cancel_scope.cancel()
