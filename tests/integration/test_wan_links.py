"""Issue 24, links as links: a link's bandwidth is shared by every connection crossing it, fairly.

Real sockets on 127.0.0.1 through the emulator's proxies, on trio's MockClock (autojump): the
link shapes with trio time, so a window of virtual seconds carries exactly what the link lets
through, and the tests assert bytes (each connection's count over the same window) with a
tolerance in bytes: the link's burst plus a quantum per connection.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable

import pytest
import trio

from deploy.wan.client import WanApiError, WanClient
from deploy.wan.link import LINK_BURST_SECONDS, LinkSpec
from deploy.wan.proxy import ProxyRegistry, split_hostport
from deploy.wan.server import serve_wan
from deploy.wan.toxics import parse_toxic

MBIT = 1_000_000 // 8
RATE = 10 * MBIT  # bytes/s: a 10 Mbit/s link
WARM_UP_S = 1.0
WINDOW_S = 4.0
CHUNK = 64 * 1024


class Sink:
    """An upstream server counting the bytes each connection delivered, in accept order."""

    def __init__(self) -> None:
        self.counts: list[int] = []
        self.arrived = trio.Event()  # set when a new connection delivers its first bytes

    async def serve(self, stream: trio.SocketStream) -> None:
        index = len(self.counts)
        self.counts.append(0)
        async with stream:
            while data := await stream.receive_some(1 << 20):
                if not self.counts[index]:
                    self.arrived.set()
                self.counts[index] += len(data)


async def start_sink(nursery: trio.Nursery) -> tuple[Sink, str]:
    sink = Sink()
    listeners = await nursery.start(functools.partial(trio.serve_tcp, sink.serve, 0, host="127.0.0.1"))
    return sink, f"127.0.0.1:{listeners[0].socket.getsockname()[1]}"


async def flood(address: str) -> None:
    """Send as fast as the proxy takes it, until cancelled."""
    host, port = split_hostport(address)
    payload = b"x" * CHUNK
    async with await trio.open_tcp_stream(host, port) as stream:
        while True:
            await stream.send_all(payload)


async def connect_in_order(nursery: trio.Nursery, sink: Sink, addresses: list[str]) -> None:
    """One flooding connection to each address, each accepted at the sink before the next (so
    sink.counts[i] is the connection to addresses[i])."""
    for address in addresses:
        sink.arrived = trio.Event()
        nursery.start_soon(flood, address)
        await sink.arrived.wait()


async def window(sink: Sink) -> list[int]:
    """Each connection's bytes over WINDOW_S virtual seconds, after WARM_UP_S."""
    await trio.sleep(WARM_UP_S)
    before = list(sink.counts)
    await trio.sleep(WINDOW_S)
    return [after - start for after, start in zip(sink.counts, before, strict=True)]


def slack(registry: ProxyRegistry, connections: int) -> int:
    """What may pass beyond rate × window: the link's burst and a quantum per connection at each
    end of the window."""
    direction = registry.get_link("wan").direction("west", "east")
    return int(RATE * LINK_BURST_SECONDS) + 2 * connections * direction.quantum


async def make_link(nursery: trio.Nursery, upstream: str, proxies: int, latency_ms: int = 40) -> ProxyRegistry:
    """A 10 Mbit/s, 40 ms link between west (clients) and east (the sink), crossed by `proxies`
    proxies to the sink, named p0, p1, ..."""
    registry = ProxyRegistry(nursery)
    registry.create_link(LinkSpec("wan", ("west", "east"), bandwidth=RATE, latency=latency_ms))
    for i in range(proxies):
        await registry.create(f"p{i}", "127.0.0.1:0", upstream, True, ("wan", "east"))
    return registry


async def run_with(nursery: trio.Nursery, body: Callable[[], Awaitable[list[int]]]) -> list[int]:
    try:
        return await body()
    finally:
        nursery.cancel_scope.cancel()


async def test_four_connections_share_the_link_fairly(autojump_clock: trio.abc.Clock) -> None:
    async with trio.open_nursery() as nursery:
        sink, upstream = await start_sink(nursery)
        registry = await make_link(nursery, upstream, proxies=2)
        # Four connections over two proxies of one link: as four mirror fetch connections to two
        # brokers would be.
        addresses = [registry.get(f"p{i % 2}").listen for i in range(4)]

        async def measure() -> list[int]:
            await connect_in_order(nursery, sink, addresses)
            return await window(sink)

        counts = await run_with(nursery, measure)
    link_bytes = int(RATE * WINDOW_S)
    assert sum(counts) <= link_bytes + slack(registry, 4), counts
    # The link stays full across its 40 ms (the data in flight is not waited for) ...
    assert sum(counts) >= link_bytes - slack(registry, 4), counts
    # ... and each connection gets a quarter of it.
    for count in counts:
        assert abs(count - link_bytes / 4) <= slack(registry, 4), counts
    assert registry.get_link("wan").direction("west", "east").sent >= sum(counts)


async def test_one_connection_alone_gets_the_whole_link(autojump_clock: trio.abc.Clock) -> None:
    async with trio.open_nursery() as nursery:
        sink, upstream = await start_sink(nursery)
        registry = await make_link(nursery, upstream, proxies=1)

        async def measure() -> list[int]:
            await connect_in_order(nursery, sink, [registry.get("p0").listen])
            return await window(sink)

        [count] = await run_with(nursery, measure)
    assert abs(count - RATE * WINDOW_S) <= slack(registry, 1)


async def test_a_per_connection_toxic_still_applies_on_top(autojump_clock: trio.abc.Clock) -> None:
    """A chaos run's bandwidth toxic on one proxy caps that proxy's connection; the other
    connection across the link takes what the link has left."""
    async with trio.open_nursery() as nursery:
        sink, upstream = await start_sink(nursery)
        registry = await make_link(nursery, upstream, proxies=2)
        capped_kb = 250  # Toxiproxy's unit: KB/s, a fifth of the link
        registry.get("p0").add_toxic(parse_toxic({"type": "bandwidth", "stream": "upstream",
                                                  "attributes": {"rate": capped_kb}}))

        async def measure() -> list[int]:
            await connect_in_order(nursery, sink, [registry.get("p0").listen, registry.get("p1").listen])
            return await window(sink)

        capped, free = await run_with(nursery, measure)
    capped_bytes = capped_kb * 1000 * WINDOW_S
    assert abs(capped - capped_bytes) <= slack(registry, 2), (capped, free)
    assert abs(free - (RATE * WINDOW_S - capped_bytes)) <= slack(registry, 2), (capped, free)


async def test_the_two_directions_are_separate_pipes(autojump_clock: trio.abc.Clock) -> None:
    """A request one way does not wait behind a flood the other way: each direction has its
    own bandwidth (an echo through a link carrying a flood toward east comes back)."""

    async def echo(stream: trio.SocketStream) -> None:
        async with stream:
            while data := await stream.receive_some(65536):
                await stream.send_all(data)

    async with trio.open_nursery() as nursery:
        sink, upstream = await start_sink(nursery)
        listeners = await nursery.start(functools.partial(trio.serve_tcp, echo, 0, host="127.0.0.1"))
        registry = await make_link(nursery, upstream, proxies=1, latency_ms=0)
        await registry.create("echo", "127.0.0.1:0", f"127.0.0.1:{listeners[0].socket.getsockname()[1]}", True,
                              ("wan", "east"))
        await connect_in_order(nursery, sink, [registry.get("p0").listen])
        host, port = split_hostport(registry.get("echo").listen)
        async with await trio.open_tcp_stream(host, port) as stream:
            payload = b"y" * 100_000
            await stream.send_all(payload)
            received = b""
            while len(received) < len(payload):
                received += await stream.receive_some(65536)
        nursery.cancel_scope.cancel()
    assert received == payload
    back = registry.get_link("wan").direction("east", "west").sent
    assert back == len(payload)  # the echo's answer, alone on the east-to-west pipe


async def test_links_through_the_api() -> None:
    async with trio.open_nursery() as nursery:
        host, port = await nursery.start(serve_wan, "127.0.0.1", 0)
        client = WanClient(f"{host}:{port}", timeout_s=10)

        async def call(fn: Callable[..., object], *args: object, **kwargs: object) -> object:
            return await trio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))

        await call(client.create_link, {"name": "east~west", "between": ["east", "west"], "bandwidth": RATE,
                                        "latency": 40, "jitter": 5, "loss": 0.1, "reorder": 1})
        await call(client.create_proxy, "east-to-west", "127.0.0.1:0", f"{host}:1",
                   link={"name": "east~west", "upstream": "east"})
        links = await call(client.links)
        assert isinstance(links, dict)
        assert links["east~west"]["loss"] == 0.1 and links["east~west"]["bandwidth"] == RATE
        proxies = await call(client.proxies)
        assert isinstance(proxies, dict)
        assert proxies["east-to-west"]["link"] == {"name": "east~west", "upstream": "east"}
        await call(client.request, "PATCH", "/links/east~west", {"bandwidth": 2 * RATE})
        assert (await call(client.request, "GET", "/links/east~west"))["bandwidth"] == 2 * RATE  # type: ignore[index]
        refusals = [
            ("POST", "/links", {"name": "x", "between": ["a", "b"], "loss": 150}, "loss"),
            ("POST", "/links", {"name": "x", "between": ["a", "b"], "bandwidth": -1}, "bandwidth"),
            ("POST", "/links", {"name": "x", "between": ["a", "a"]}, "between"),
            ("POST", "/links", {"name": "x", "between": ["a", "b"], "latency": 5, "jitter": 9}, "jitter"),
            ("POST", "/links", {"name": "x", "between": ["a", "b"], "speed": 9}, "speed"),
            ("POST", "/links", {"name": "east~west", "between": ["a", "b"]}, "exists"),
            ("POST", "/proxies", {"name": "y", "upstream": f"{host}:1", "link": {"name": "nope", "upstream": "a"}},
             "nope"),
            ("POST", "/proxies", {"name": "y", "upstream": f"{host}:1",
                                  "link": {"name": "east~west", "upstream": "north"}}, "north"),
            ("DELETE", "/links/east~west", None, "east-to-west"),
        ]
        for method, path, body, named in refusals:
            with pytest.raises(WanApiError, match=named):
                await call(client.request, method, path, body)
        await call(client.delete_proxy, "east-to-west")
        await call(client.request, "DELETE", "/links/east~west")
        assert await call(client.links) == {}
        nursery.cancel_scope.cancel()
