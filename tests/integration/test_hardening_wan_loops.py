"""Issue 19, item 11: a WAN proxy whose upstream is its own listen address was accepted, and one
connection through it then looped until the emulator had 20,000 file descriptors and its API was
dead.

Against a real `causeway wan` process, through the Toxiproxy HTTP API: a proxy that would forward
to a proxy (itself, another, a 2-cycle in one populate, an update that closes a loop) is refused
with a 400 naming the proxies, and the emulator keeps forwarding and answering; a loop through a
host name (which only connecting reveals) closes the connection at once; and each proxy serves at
most --max-connections-per-proxy client connections.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.launcher.launch import free_port
from deploy.wan.process import WanProcess
from tests.integration.test_hardening_wan import Echo, call, round_trip
from tests.support.polling import wait_until

MAX_CONNECTIONS = 5


@pytest.fixture
def wan(tmp_path: Path) -> Iterator[tuple[WanProcess, Echo]]:
    echo = Echo()
    try:
        with WanProcess(log_path=tmp_path / "wan.log", max_connections=MAX_CONNECTIONS) as emulator:
            yield emulator, echo
    finally:
        echo.close()


def _fds(emulator: WanProcess) -> int:
    assert emulator.proc is not None
    return len(os.listdir(f"/proc/{emulator.proc.pid}/fd"))


def _proxy(api: str, name: str, upstream: str, listen: str = "127.0.0.1:0") -> str:
    status, proxy = call(api, "POST", "/proxies", json.dumps({"name": name, "listen": listen, "upstream": upstream}))
    assert status == 201, proxy
    return str(proxy["listen"])


@pytest.mark.parametrize(("listen", "upstream"), [
    ("127.0.0.1:{port}", "127.0.0.1:{port}"),
    ("127.0.0.1:{port}", "localhost:{port}"),
    ("0.0.0.0:{port}", "127.0.0.1:{port}"),
    ("127.0.0.1:{port}", "0.0.0.0:{port}"),
], ids=["same address", "localhost", "wildcard listen", "wildcard upstream"])
def test_a_proxy_to_its_own_listen_address_is_refused(wan: tuple[WanProcess, Echo], listen: str,
                                                      upstream: str) -> None:
    emulator, echo = wan
    port = free_port()
    body = {"name": "loop", "listen": listen.format(port=port), "upstream": upstream.format(port=port)}
    status, reply = call(emulator.api, "POST", "/proxies", json.dumps(body))
    assert status == 400 and "proxy loop" in str(reply["error"]), reply
    assert call(emulator.api, "GET", "/proxies") == (200, {})
    # The emulator is whole: a proxy made now forwards.
    assert round_trip(_proxy(emulator.api, "link", echo.address), b"ping") == b"ping"


def test_a_proxy_to_another_proxy_is_refused_however_it_is_made(wan: tuple[WanProcess, Echo]) -> None:
    emulator, echo = wan
    api = emulator.api
    a = _proxy(api, "a", echo.address)
    status, reply = call(api, "POST", "/proxies", json.dumps({"name": "b", "upstream": a}))
    assert status == 400 and "listen address of proxy 'a'" in str(reply["error"]), reply

    # An update that points a proxy at itself, or at another, is refused and changes nothing.
    b = _proxy(api, "b", echo.address)
    for name, upstream in (("a", a), ("a", b)):
        status, reply = call(api, "POST", f"/proxies/{name}", json.dumps({"upstream": upstream}))
        assert status == 400 and "proxy loop" in str(reply["error"]), reply
    # A listen address another proxy forwards to is refused too.
    status, reply = call(api, "POST", "/proxies", json.dumps({"name": "c", "listen": echo.address,
                                                              "upstream": "127.0.0.1:1"}))
    assert status == 400 and "upstream of proxy" in str(reply["error"]), reply

    # A 2-cycle in one populate is refused before anything changes.
    x, y = free_port(), free_port()
    cycle = [{"name": "x", "listen": f"127.0.0.1:{x}", "upstream": f"127.0.0.1:{y}"},
             {"name": "y", "listen": f"127.0.0.1:{y}", "upstream": f"127.0.0.1:{x}"}]
    status, reply = call(api, "POST", "/populate", json.dumps(cycle))
    assert status == 400 and "proxy loop" in str(reply["error"]), reply

    status, proxies = call(api, "GET", "/proxies")
    assert status == 200 and set(proxies) == {"a", "b"}
    assert {p["upstream"] for p in proxies.values()} == {echo.address}  # type: ignore[index]
    assert round_trip(a, b"x" * 10_000) == b"x" * 10_000 and round_trip(b, b"y") == b"y"


def _closed(sock: socket.socket) -> bool:
    try:
        sock.sendall(b"ping")
        return sock.recv(100) == b""
    except ConnectionError:
        return True


def _loopback_name() -> str:
    """A host name other than `localhost` that resolves to a loopback address: one the API can
    not tell from an address without resolving it."""
    name = socket.gethostname()
    if not socket.gethostbyname(name).startswith("127."):
        pytest.fail(f"this host's name {name} does not resolve to a loopback address (/etc/hosts)")
    return name


def test_a_loop_through_a_host_name_closes_the_connection_at_once(wan: tuple[WanProcess, Echo],
                                                                  tmp_path: Path) -> None:
    emulator, echo = wan
    name = _loopback_name()
    port = free_port()
    listen = _proxy(emulator.api, "named", f"{name}:{port}", listen=f"0.0.0.0:{port}")
    before = _fds(emulator)
    with socket.create_connection(("127.0.0.1", int(listen.rsplit(":", 1)[1])), timeout=30) as sock:
        assert _closed(sock)  # not forwarded round and round
    wait_until(lambda: _fds(emulator) <= before, what="the emulator to close the looped connections", timeout_s=30)
    assert call(emulator.api, "GET", "/version")[0] == 200
    assert round_trip(_proxy(emulator.api, "link", echo.address), b"ping") == b"ping"


def test_each_proxy_serves_at_most_max_connections(wan: tuple[WanProcess, Echo]) -> None:
    emulator, echo = wan
    listens = [_proxy(emulator.api, name, echo.address) for name in ("one", "two")]
    address = listens[0].rsplit(":", 1)
    held = [socket.create_connection((address[0], int(address[1])), timeout=30) for _ in range(MAX_CONNECTIONS)]
    try:
        for sock in held:  # each served: the echo answers through the proxy
            sock.sendall(b"hi")
            assert sock.recv(100) == b"hi"
        for _ in range(3):  # one past the bound, several times over
            with socket.create_connection((address[0], int(address[1])), timeout=30) as extra:
                assert _closed(extra)
        assert round_trip(listens[1], b"other proxy") == b"other proxy"  # the bound is per proxy
        held.pop().close()

        def room_again() -> bool:
            with socket.create_connection((address[0], int(address[1])), timeout=30) as sock:
                return not _closed(sock)

        wait_until(room_again, what="a connection slot to free up", timeout_s=30)
        for sock in held:
            sock.sendall(b"still")
            assert sock.recv(100) == b"still"
    finally:
        for sock in held:
            sock.close()
