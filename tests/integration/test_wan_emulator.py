"""The WAN-link emulator driven by the unmodified toxiproxy-python client against a local echo
server. A toxic's delays are measured on trio's MockClock (see `jumping`): the emulator runs in
the test's trio run and keeps time with it, so a test sees the emulator's schedule in virtual
seconds, never the machine's speed. Only lower bounds of delays are asserted, and bandwidth is
judged by the bytes that have arrived by each instant."""

from __future__ import annotations

import functools
import json
import math
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest
import requests
import trio
from toxiproxy import Toxiproxy  # type: ignore[import-untyped]
from toxiproxy.exceptions import InvalidToxic, NotFound, ProxyExists  # type: ignore[import-untyped]
from toxiproxy.proxy import Proxy  # type: ignore[import-untyped]
from trio.testing import MockClock

from deploy.wan import serve_wan
from deploy.wan.toxics import BANDWIDTH_BURST_SECONDS

T = TypeVar("T")


async def in_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """toxiproxy-python and requests block; run them off the trio thread."""
    return await trio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))


async def echo(stream: trio.SocketStream) -> None:
    async with stream:
        try:
            while data := await stream.receive_some(65536):
                await stream.send_all(data)
            await stream.send_eof()
        except trio.BrokenResourceError:
            pass


@dataclass
class Wan:
    client: Toxiproxy
    api: str
    echo_port: int

    @property
    def upstream(self) -> str:
        return f"127.0.0.1:{self.echo_port}"

    async def create(self, name: str = "link") -> Proxy:
        return await in_thread(self.client.create, upstream=self.upstream, name=name, listen="127.0.0.1:0")

    async def raw(self, method: str, path: str, body: Any = None, data: bytes | None = None) -> requests.Response:
        return await in_thread(requests.request, method, self.api + path, json=body, data=data, timeout=10)


@pytest.fixture
async def wan(nursery: trio.Nursery) -> Wan:
    host, port = await nursery.start(serve_wan, "127.0.0.1", 0)
    listeners = await nursery.start(functools.partial(trio.serve_tcp, echo, 0, host="127.0.0.1"))
    client = Toxiproxy()
    client.update_api_consumer(host, port)
    return Wan(client, f"http://{host}:{port}", listeners[0].socket.getsockname()[1])


@contextmanager
def jumping(clock: MockClock) -> Iterator[None]:
    """Inside the block, trio's clock (pytest-trio's `mock_clock`, standing still until then)
    jumps to the next deadline whenever every task waits: a toxic's delays cost no real time.
    Outside it the clock stands still again, for toxiproxy-python's calls: they run in threads,
    and a clock that jumped while one ran would time its request out."""
    clock.autojump_threshold = 0
    try:
        yield
    finally:
        clock.autojump_threshold = math.inf


def port_of(proxy: Proxy) -> int:
    return int(proxy.listen.rsplit(":", 1)[1])


async def connect(proxy: Proxy) -> trio.SocketStream:
    return await trio.open_tcp_stream("127.0.0.1", port_of(proxy))


async def receive_exactly(stream: trio.SocketStream, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = await stream.receive_some(size - len(data))
        assert chunk, f"closed after {len(data)} of {size} bytes"
        data += chunk
    return bytes(data)


async def receive_all(stream: trio.SocketStream) -> tuple[bytes, int]:
    """Everything until the end of stream, and in how many reads it came."""
    data = bytearray()
    reads = 0
    while chunk := await stream.receive_some(65536):
        data += chunk
        reads += 1
    return bytes(data), reads


async def receive_until_cut(stream: trio.SocketStream) -> bytes:
    """Everything until the end of stream or a reset (a link cut mid-stream)."""
    received = bytearray()
    try:
        while chunk := await stream.receive_some(65536):
            received += chunk
    except trio.BrokenResourceError:
        pass
    return bytes(received)


async def round_trip(stream: trio.SocketStream, payload: bytes = b"ping") -> float:
    start = trio.current_time()
    await stream.send_all(payload)
    assert await receive_exactly(stream, len(payload)) == payload
    return trio.current_time() - start


# --- API -------------------------------------------------------------------------------------


async def test_create_list_get_update_delete(wan: Wan) -> None:
    proxy = await wan.create()
    assert proxy.listen.startswith("127.0.0.1:") and port_of(proxy) != 0
    assert proxy.enabled is True
    proxies = await in_thread(wan.client.proxies)
    assert set(proxies) == {"link"}
    assert proxies["link"].listen == proxy.listen and proxies["link"].upstream == wan.upstream

    async with await connect(proxy) as stream:
        await round_trip(stream, b"hello through the link")

    shown = (await wan.raw("GET", "/proxies/link")).json()
    assert shown == {"name": "link", "listen": proxy.listen, "upstream": wan.upstream, "enabled": True, "toxics": []}

    # Update by PATCH (what Toxiproxy 2.x clients send) and by POST (toxiproxy-python).
    reply = await wan.raw("PATCH", "/proxies/link", {"upstream": "127.0.0.1:9"})
    assert reply.status_code == 200 and reply.json()["upstream"] == "127.0.0.1:9"
    reply = await wan.raw("POST", "/proxies/link", {"upstream": wan.upstream})
    assert reply.status_code == 200 and reply.json()["upstream"] == wan.upstream

    assert await in_thread(proxy.destroy) is True
    assert await in_thread(wan.client.proxies) == {}
    with pytest.raises(OSError):
        await connect(proxy)


async def test_error_codes(wan: Wan) -> None:
    await wan.create()
    with pytest.raises(ProxyExists):
        await wan.create()
    cases = [
        ("POST", "/proxies", {"name": "link", "upstream": wan.upstream}, 409),
        ("GET", "/proxies/nope", None, 404),
        ("DELETE", "/proxies/nope", None, 404),
        ("GET", "/proxies/nope/toxics", None, 404),
        ("GET", "/proxies/link/toxics/nope", None, 404),
        ("DELETE", "/proxies/link/toxics/nope", None, 404),
        ("POST", "/proxies", {"name": "x"}, 400),
        ("POST", "/proxies", {"upstream": wan.upstream}, 400),
        ("POST", "/proxies", {"name": "x", "upstream": "no-port"}, 400),
        ("POST", "/proxies/link/toxics", {"type": "wormhole"}, 400),
        ("POST", "/proxies/link/toxics", {"type": "latency", "stream": "sideways"}, 400),
        ("POST", "/proxies/link/toxics", {"type": "latency", "attributes": {"latency": "40ms"}}, 400),
        ("POST", "/proxies/link/toxics", {"type": "latency", "toxicity": 2}, 400),
    ]
    for method, path, body, status in cases:
        reply = await wan.raw(method, path, body)
        assert reply.status_code == status, (method, path, body, reply.text)
        error = reply.json()
        assert error["status"] == status and isinstance(error["error"], str) and error["error"]
    for raw in (b"{not json", b"", b"[1, 2]"):
        reply = await wan.raw("POST", "/proxies", data=raw)
        assert reply.status_code == 400, raw
        assert reply.json()["error"].startswith("bad request body")
    reply = await wan.raw("POST", "/proxies/link/toxics", data=b"{oops")
    assert reply.status_code == 400

    proxy = (await in_thread(wan.client.proxies))["link"]
    with pytest.raises(InvalidToxic):
        await in_thread(proxy.add_toxic, type="wormhole")
    with pytest.raises(NotFound):
        await in_thread(Proxy(name="ghost", upstream="", enabled=True, listen="").destroy)
    await in_thread(proxy.add_toxic, type="latency", attributes={"latency": 1})
    reply = await wan.raw("POST", "/proxies/link/toxics", {"type": "latency"})
    assert reply.status_code == 409


async def test_listen_address_in_use_is_an_error_not_a_crash(wan: Wan) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        reply = await wan.raw("POST", "/proxies", {"name": "clash", "listen": address, "upstream": wan.upstream})
        assert reply.status_code == 500
        assert "in use" in reply.json()["error"]
        # Enabling onto a taken address fails the same way and leaves the proxy disabled.
        await wan.raw(
            "POST", "/proxies", {"name": "later", "listen": address, "upstream": wan.upstream, "enabled": False}
        )
        reply = await wan.raw("POST", "/proxies/later", {"enabled": True})
        assert reply.status_code == 500
        assert (await wan.raw("GET", "/proxies/later")).json()["enabled"] is False
    assert set(await in_thread(wan.client.proxies)) == {"later"}
    proxy = await wan.create()
    async with await connect(proxy) as stream:
        await round_trip(stream)


async def test_toxic_listing_update_and_delete(wan: Wan) -> None:
    proxy = await wan.create()
    await in_thread(proxy.add_toxic, type="latency", attributes={"latency": 40, "jitter": 5})
    await in_thread(proxy.add_toxic, type="bandwidth", stream="upstream", name="uplink", attributes={"rate": 100})
    toxics = await in_thread(proxy.toxics)
    assert set(toxics) == {"latency_downstream", "uplink"}
    assert toxics["uplink"].stream == "upstream" and toxics["uplink"].attributes == {"rate": 100}
    # Toxiproxy lists upstream toxics first.
    listed = (await wan.raw("GET", "/proxies/link/toxics")).json()
    assert [t["name"] for t in listed] == ["uplink", "latency_downstream"]

    reply = await wan.raw("PATCH", "/proxies/link/toxics/latency_downstream", {"attributes": {"latency": 80}})
    assert reply.status_code == 200
    assert reply.json()["attributes"] == {"latency": 80, "jitter": 5}
    reply = await wan.raw("POST", "/proxies/link/toxics/uplink", {"toxicity": 0.5})
    assert reply.json()["toxicity"] == 0.5
    assert (await wan.raw("GET", "/proxies/link/toxics/uplink")).json()["toxicity"] == 0.5
    assert (await wan.raw("GET", "/proxies/link")).json()["toxics"] == (
        await wan.raw("GET", "/proxies/link/toxics")
    ).json()

    assert await in_thread(proxy.destroy_toxic, "uplink") is True
    assert set(await in_thread(proxy.toxics)) == {"latency_downstream"}


async def test_version(wan: Wan) -> None:
    body = await in_thread(wan.client.version)
    assert json.loads(body)["version"].startswith("2.")
    assert await in_thread(wan.client.running) is True


async def test_populate(wan: Wan) -> None:
    entries: list[dict[str, Any]] = [
        {"name": "a", "listen": "127.0.0.1:0", "upstream": wan.upstream},
        {"name": "b", "listen": "127.0.0.1:0", "upstream": wan.upstream, "enabled": False},
    ]
    reply = await wan.raw("POST", "/populate", entries)
    assert reply.status_code == 201
    created = reply.json()["proxies"]
    assert [(p["name"], p["enabled"]) for p in created] == [("a", True), ("b", False)]
    listen_a = created[0]["listen"]
    # Same again with a's actual address: a is kept as it is.
    entries[0]["listen"] = listen_a
    reply = await wan.raw("POST", "/populate", entries)
    assert reply.status_code == 201 and reply.json()["proxies"][0]["listen"] == listen_a
    reply = await wan.raw("POST", "/populate", [{"name": "c"}])
    assert reply.status_code == 400
    assert set(await in_thread(wan.client.proxies)) == {"a", "b"}
    # The client's own populate (list, create, destroy) works too.
    made = await in_thread(wan.client.populate, [{"name": "d", "listen": "127.0.0.1:0", "upstream": wan.upstream}])
    assert [p.name for p in made] == ["d"]
    async with await connect(made[0]) as stream:
        await round_trip(stream)


# --- enable, disable, reset ------------------------------------------------------------------


async def test_disable_closes_connections_and_enable_rebinds(wan: Wan) -> None:
    proxy = await wan.create()
    stream = await connect(proxy)
    await round_trip(stream)
    await in_thread(proxy.disable)
    with pytest.raises(OSError):
        await connect(proxy)
    try:
        assert await stream.receive_some(10) == b""
    except trio.BrokenResourceError:
        pass  # a reset is as good as a close here
    await stream.aclose()
    assert (await wan.raw("GET", "/proxies/link")).json()["enabled"] is False

    await in_thread(proxy.enable)
    shown = (await wan.raw("GET", "/proxies/link")).json()
    assert shown["enabled"] is True and shown["listen"] == proxy.listen
    async with await connect(proxy) as stream:
        await round_trip(stream)

    def refused_while_down() -> None:
        with proxy.down(), pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port_of(proxy)), timeout=5).close()

    await in_thread(refused_while_down)
    async with await connect(proxy) as stream:
        await round_trip(stream)


async def test_reset_enables_all_and_removes_toxics(wan: Wan) -> None:
    proxy = await wan.create()
    await in_thread(proxy.add_toxic, type="latency", attributes={"latency": 1000})
    await in_thread(proxy.disable)
    assert await in_thread(wan.client.reset) is True
    shown = (await wan.raw("GET", "/proxies/link")).json()
    assert shown["enabled"] is True and shown["toxics"] == []
    async with await connect(proxy) as stream:
        await round_trip(stream)


# --- toxics ----------------------------------------------------------------------------------


async def test_latency_each_way(wan: Wan, mock_clock: MockClock) -> None:
    proxy = await wan.create()
    await in_thread(proxy.add_toxic, type="latency", attributes={"latency": 150, "jitter": 10})
    with jumping(mock_clock):
        async with await connect(proxy) as stream:
            assert await round_trip(stream) >= 0.14
    await in_thread(proxy.add_toxic, type="latency", stream="upstream", attributes={"latency": 100})
    with jumping(mock_clock):
        async with await connect(proxy) as stream:
            assert await round_trip(stream) >= 0.24


async def test_latency_keeps_data_intact_and_in_order(wan: Wan, mock_clock: MockClock) -> None:
    proxy = await wan.create()
    await in_thread(proxy.add_toxic, type="latency", attributes={"latency": 50, "jitter": 40})
    payload = bytes(range(256)) * 4096  # 1 MiB
    with jumping(mock_clock):
        async with await connect(proxy) as stream:
            start = trio.current_time()
            async with trio.open_nursery() as nursery:

                async def send() -> None:
                    await stream.send_all(payload)
                    await stream.send_eof()

                nursery.start_soon(send)
                received, _ = await receive_all(stream)
            assert received == payload
            assert trio.current_time() - start >= 0.01


async def test_bandwidth(wan: Wan, mock_clock: MockClock) -> None:
    # The toxic shapes with trio time, so the bytes that have arrived by each virtual instant
    # are bounded by the rate, however slow the machine: the test counts bytes.
    proxy = await wan.create()
    rate = 400 * 1000  # bytes/s; Toxiproxy's unit is KB/s
    await in_thread(proxy.add_toxic, type="bandwidth", attributes={"rate": rate // 1000})
    payload = bytes(range(256)) * 4700  # 1,203,200 bytes: 3 s at the rate
    received = bytearray()
    seen: list[tuple[float, int]] = []  # (virtual seconds since the first byte could enter, bytes arrived)
    start = trio.current_time()
    with jumping(mock_clock):
        async with await connect(proxy) as stream, trio.open_nursery() as nursery:

            async def receive() -> None:
                while len(received) < len(payload):
                    chunk = await stream.receive_some(65536)
                    assert chunk, f"closed after {len(received)} of {len(payload)} bytes"
                    received.extend(chunk)
                seen.append((trio.current_time() - start, len(received)))
                nursery.cancel_scope.cancel()

            nursery.start_soon(stream.send_all, payload)
            nursery.start_soon(receive)
            while True:  # a look every quarter of a virtual second, until the last byte is in
                seen.append((trio.current_time() - start, len(received)))
                await trio.sleep(0.25)
    assert received == payload  # whole and in order
    # The bucket releases a part no earlier than its bytes' share of the rate after the last
    # (less the burst it holds after idling): by any instant, at most rate × (time + burst). A
    # link kept busy meets the bound exactly; the one byte more allows for float rounding.
    for elapsed, count in seen:
        assert count <= rate * (elapsed + BANDWIDTH_BURST_SECONDS) + 1, seen


async def test_limit_data_closes_after_n_bytes(wan: Wan) -> None:
    proxy = await wan.create()
    await in_thread(proxy.add_toxic, type="limit_data", attributes={"bytes": 1000})
    payload = bytes(range(250)) * 20
    async with await connect(proxy) as stream:
        await stream.send_all(payload)
        assert await receive_until_cut(stream) == payload[:1000]


async def test_limit_data_upstream(wan: Wan) -> None:
    proxy = await wan.create()
    await in_thread(proxy.add_toxic, type="limit_data", stream="upstream", attributes={"bytes": 10})
    async with await connect(proxy) as stream:
        await stream.send_all(b"0123456789abcdef")
        # Only what reached the echo server can come back, and the link was closed after it.
        assert b"0123456789".startswith(await receive_until_cut(stream))


async def test_reset_peer(wan: Wan, mock_clock: MockClock) -> None:
    proxy = await wan.create()
    await in_thread(proxy.add_toxic, type="reset_peer", stream="upstream", attributes={"timeout": 200})
    with jumping(mock_clock):
        async with await connect(proxy) as stream:
            start = trio.current_time()
            await stream.send_all(b"hello")
            with pytest.raises(trio.BrokenResourceError) as caught:
                await stream.receive_some(10)
            assert isinstance(caught.value.__cause__, ConnectionResetError)
            assert trio.current_time() - start >= 0.19


async def test_timeout_holds_data_then_closes(wan: Wan, mock_clock: MockClock) -> None:
    proxy = await wan.create()
    await in_thread(proxy.add_toxic, type="timeout", attributes={"timeout": 300})
    with jumping(mock_clock):
        async with await connect(proxy) as stream:
            start = trio.current_time()
            await stream.send_all(b"lost")
            assert await stream.receive_some(10) == b""
            assert trio.current_time() - start >= 0.29


async def test_timeout_zero_holds_until_removed(wan: Wan, mock_clock: MockClock) -> None:
    proxy = await wan.create()
    await in_thread(proxy.add_toxic, type="timeout", attributes={"timeout": 0})
    async with await connect(proxy) as stream:
        await stream.send_all(b"held")
        with jumping(mock_clock), trio.move_on_after(60) as waited:  # a virtual minute
            await stream.receive_some(10)
        assert waited.cancelled_caught
        await in_thread(proxy.destroy_toxic, "timeout_downstream")
        # Data sent while the toxic was there was dropped; the connection still works.
        await round_trip(stream, b"after")


async def test_slicer_delivers_everything_in_more_pieces(wan: Wan) -> None:
    proxy = await wan.create()
    await in_thread(
        proxy.add_toxic, type="slicer", attributes={"average_size": 100, "size_variation": 20, "delay": 5000}
    )
    payload = bytes(range(256)) * 8
    async with await connect(proxy) as stream:
        await stream.send_all(payload)
        await stream.send_eof()
        received, reads = await receive_all(stream)
    assert received == payload
    assert reads >= 8


async def test_slow_close(wan: Wan, nursery: trio.Nursery, mock_clock: MockClock) -> None:
    async def greet_and_close(stream: trio.SocketStream) -> None:
        async with stream:
            await stream.send_all(b"hello")

    listeners = await nursery.start(functools.partial(trio.serve_tcp, greet_and_close, 0, host="127.0.0.1"))
    upstream = f"127.0.0.1:{listeners[0].socket.getsockname()[1]}"
    proxy = await in_thread(wan.client.create, upstream=upstream, name="closer", listen="127.0.0.1:0")
    await in_thread(proxy.add_toxic, type="slow_close", attributes={"delay": 300})
    with jumping(mock_clock):
        async with await connect(proxy) as stream:
            start = trio.current_time()
            received, _ = await receive_all(stream)
            assert received == b"hello"
            assert trio.current_time() - start >= 0.29


async def test_toxics_act_on_open_connections(wan: Wan, mock_clock: MockClock) -> None:
    proxy = await wan.create()
    async with await connect(proxy) as stream:
        await round_trip(stream)
        await in_thread(proxy.add_toxic, type="latency", attributes={"latency": 200})
        with jumping(mock_clock):
            assert await round_trip(stream) >= 0.19
        await in_thread(proxy.destroy_toxic, "latency_downstream")
        # An idle connection starts a timeout's clock as soon as the toxic is added.
        await in_thread(proxy.add_toxic, type="timeout", attributes={"timeout": 100})
        with jumping(mock_clock):
            assert await stream.receive_some(10) == b""


async def test_toxicity_zero_spares_connections(wan: Wan) -> None:
    proxy = await wan.create()
    await in_thread(proxy.add_toxic, type="limit_data", toxicity=0.0, attributes={"bytes": 1})
    async with await connect(proxy) as stream:
        await round_trip(stream, b"not limited at all")
