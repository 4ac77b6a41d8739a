"""Issue 24: the WAN emulator's Prometheus metrics (``GET /metrics``), read with a real Prometheus
text parser while real bytes cross a proxy on a shared link."""

from __future__ import annotations

import contextlib
import functools
import urllib.request
from collections.abc import Callable

import trio
from prometheus_client.parser import text_string_to_metric_families

from deploy.wan.client import WanClient
from deploy.wan.proxy import split_hostport
from deploy.wan.server import serve_wan
from tests.support.polling import wait_for

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(api: str) -> Samples:
    """Every sample the emulator serves: (name, sorted labels) -> value."""
    with urllib.request.urlopen(f"http://{api}/metrics", timeout=10) as answer:
        assert answer.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = answer.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def proxy_sample(samples: Samples, name: str, proxy: str, **labels: str) -> float:
    matching = [v for (n, ls), v in samples.items() if n == name and dict(ls).get("proxy") == proxy
                and all(dict(ls).get(k) == want for k, want in labels.items())]
    assert len(matching) == 1, (name, proxy, labels, samples)
    return matching[0]


async def echo(stream: trio.SocketStream) -> None:
    """Sends back what it receives, until the proxy closes the connection (or resets it, as a
    disabled proxy does to a connection with bytes still in flight)."""
    async with stream:
        try:
            while data := await stream.receive_some(65536):
                await stream.send_all(data)
        except trio.BrokenResourceError:
            pass


async def in_thread(fn: Callable[..., object], *args: object, **kwargs: object) -> object:
    return await trio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))


async def test_bytes_each_way_toxics_enabled_and_queue_depth_move_with_real_traffic() -> None:
    async with trio.open_nursery() as nursery:
        host, port = await nursery.start(serve_wan, "127.0.0.1", 0)
        api = f"{host}:{port}"
        client = WanClient(api, timeout_s=10)
        listeners = await nursery.start(functools.partial(trio.serve_tcp, echo, 0, host="127.0.0.1"))
        upstream = f"127.0.0.1:{listeners[0].socket.getsockname()[1]}"
        await in_thread(client.create_link, {"name": "east~west", "between": ["east", "west"], "bandwidth": 125_000})
        await in_thread(client.create_proxy, "east-to-west", "127.0.0.1:0", upstream,
                        link={"name": "east~west", "upstream": "east"})
        shown = await in_thread(client.request, "GET", "/proxies/east-to-west")
        before = await in_thread(scrape, api)
        assert proxy_sample(before, "toxiproxy_proxy_received_bytes_total", "east-to-west", direction="upstream") == 0
        assert proxy_sample(before, "causeway_wan_proxy_enabled", "east-to-west") == 1
        assert before[("causeway_wan_link_bandwidth_bytes", (("link", "east~west"),))] == 125_000

        # 100 KB there and back: under a second of the 1 Mbit/s link each way.
        payload = b"z" * 100_000
        host_, port_ = split_hostport(shown["listen"])  # type: ignore[index]
        async with await trio.open_tcp_stream(host_, port_) as stream:
            await stream.send_all(payload)
            received = 0
            while received < len(payload):
                received += len(await stream.receive_some(65536))
            after = await in_thread(scrape, api)
            assert proxy_sample(after, "causeway_wan_proxy_connections", "east-to-west") == 1
        for family in ("toxiproxy_proxy_received_bytes_total", "toxiproxy_proxy_sent_bytes_total"):
            for direction in ("upstream", "downstream"):
                assert proxy_sample(after, family, "east-to-west", direction=direction) == len(payload)
        for way in ("west->east", "east->west"):
            assert after[("causeway_wan_link_sent_bytes_total", (("direction", way), ("link", "east~west")))] \
                == len(payload)
            assert after[("causeway_wan_link_queued_bytes", (("direction", way), ("link", "east~west")))] == 0

        # A flood larger than the link carries in seconds waits at its entrance: the queue depth.
        flood = await trio.open_tcp_stream(host_, port_)

        async def send_flood() -> None:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):  # cut below
                await flood.send_all(b"q" * 1_000_000)

        nursery.start_soon(send_flood)
        depths: list[float] = []

        async def queued() -> bool:
            samples = await in_thread(scrape, api)
            key = ("causeway_wan_link_queued_bytes", (("direction", "west->east"), ("link", "east~west")))
            depths.append(samples[key])  # type: ignore[arg-type]
            return depths[-1] > 0

        await wait_for(queued, what="bytes queued at the link's entrance", timeout_s=30)
        assert depths[-1] <= 1_000_000

        # A fault injected and the link cut show as they happen.
        await in_thread(client.proxy("east-to-west").add_toxic, name="slow", type="latency",
                        attributes={"latency": 100})
        await in_thread(client.proxy("east-to-west").disable)
        cut = await in_thread(scrape, api)
        assert proxy_sample(cut, "causeway_wan_proxy_toxics", "east-to-west") == 1
        assert proxy_sample(cut, "causeway_wan_proxy_enabled", "east-to-west") == 0
        await flood.aclose()
        nursery.cancel_scope.cancel()
