"""deploy.wan.client against the emulator in this process: what the launcher, `status`, the chaos
rig and the benchmarks do with it, and how it reports a refusal and a silent API."""

from __future__ import annotations

import socket

import pytest
import trio

from deploy.wan import serve_wan
from deploy.wan.client import WanApiError, WanClient


def echo_server() -> socket.socket:
    return socket.create_server(("127.0.0.1", 0))


async def test_proxies_and_toxics_made_changed_and_removed() -> None:
    upstream = echo_server()
    async with trio.open_nursery() as nursery:
        host, port = await nursery.start(serve_wan, "127.0.0.1", 0)
        client = WanClient(f"{host}:{port}", timeout_s=10)

        def scenario() -> None:
            proxy = client.create_proxy("link", "127.0.0.1:0", f"127.0.0.1:{upstream.getsockname()[1]}")
            proxy.add_toxic(name="slow", type="latency", stream="upstream", attributes={"latency": 5})
            proxy.add_toxics([{"name": "cap", "type": "bandwidth", "attributes": {"rate": 100}}])
            described = client.proxies()["link"]
            assert {t["name"] for t in described["toxics"]} == {"slow", "cap"}
            proxy.disable()
            assert client.proxies()["link"]["enabled"] is False
            proxy.enable()
            assert client.proxies()["link"]["enabled"] is True
            assert proxy.destroy_toxic("slow")
            assert [t["name"] for t in client.proxies()["link"]["toxics"]] == ["cap"]
            with pytest.raises(WanApiError) as refused:  # the same name twice: Toxiproxy's 409
                client.create_proxy("link", "127.0.0.1:0", "127.0.0.1:1")
            assert refused.value.status == 409
            client.delete_proxy("link")
            assert client.proxies() == {}

        await trio.to_thread.run_sync(scenario)
        nursery.cancel_scope.cancel()
    upstream.close()


def test_a_silent_api_times_out() -> None:
    """A listener that accepts and never answers: the call ends after its timeout with OSError."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        client = WanClient(f"127.0.0.1:{silent.getsockname()[1]}", timeout_s=0.5)
        with pytest.raises(OSError):
            client.proxies()
