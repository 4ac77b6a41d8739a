"""Issue 10, item 10: one toxic crashed the emulator and the links never came back.

Against a real `causeway wan` process: toxic and proxy fields that are not finite, in range and of
the right type get a 400 naming the field, and the emulator keeps forwarding; a request that never
finishes gets a 408 and its connection closed. Under a real `causeway up -d`: a SIGKILLed emulator
is restarted with its proxies and toxics made again and the mirror carries on; `status` fails
while the mirror cannot reach its source.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.child_process import ChildProcess
from deploy.cli import main
from deploy.launcher.control import alive
from deploy.launcher.control import status as status_of
from deploy.wan.process import WanProcess
from tests.support.consume import read_topic
from tests.support.polling import wait_until
from tests.support.produce import produce_spread

REPO = Path(__file__).resolve().parents[2]


class Echo:
    """A TCP echo server on a thread: the upstream the proxies forward to."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    @staticmethod
    def _echo(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def wan(tmp_path: Path) -> Iterator[tuple[ChildProcess, str]]:
    with WanProcess(request_timeout_s=1, log_path=tmp_path / "wan.log") as emulator:
        assert emulator.proc is not None
        yield emulator.proc, emulator.api


def call(api: str, method: str, path: str, body: str | None = None) -> tuple[int, dict[str, object]]:
    host, port = api.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
        reply = conn.getresponse()
        data = reply.read()
        return reply.status, json.loads(data) if data else {}
    finally:
        conn.close()


def round_trip(listen: str, payload: bytes) -> bytes:
    host, port = listen.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(payload)
        got = b""
        while len(got) < len(payload):
            chunk = sock.recv(65536)
            assert chunk, "the proxy closed the connection"
            got += chunk
        return got


BIG = "1" + "0" * 400  # an integer JSON allows and no float holds
HOST_300 = "h" * 300  # a label longer than DNS allows (63): unencodable for the resolver
NAME_300 = "n" * 300

BAD_TOXICS = [
    ('{"type": "latency", "attributes": {"latency": 1e400}}', "latency"),
    ('{"type": "latency", "attributes": {"latency": ' + BIG + "}}", "latency"),
    ('{"type": "latency", "attributes": {"latency": NaN}}', "latency"),
    ('{"type": "latency", "attributes": {"jitter": -Infinity}}', "jitter"),
    ('{"type": "latency", "attributes": {"latency": -5}}', "latency"),
    ('{"type": "latency", "attributes": {"latency": 86400001}}', "latency"),
    ('{"type": "latency", "attributes": {"jitter": "5ms"}}', "jitter"),
    ('{"type": "latency", "attributes": {"latency": [40]}}', "latency"),
    ('{"type": "bandwidth", "attributes": {"rate": 1e30}}', "rate"),
    ('{"type": "slicer", "attributes": {"average_size": 8, "delay": 1e300}}', "delay"),
    ('{"type": "slicer", "attributes": {"average_size": 0}}', "average_size"),
    ('{"type": "timeout", "attributes": {"timeout": true}}', "timeout"),
    ('{"type": "limit_data", "attributes": {"bytes": 9223372036854775808}}', "bytes"),
    ('{"type": "latency", "toxicity": NaN}', "toxicity"),
    ('{"type": "latency", "toxicity": 1e400}', "toxicity"),
    ('{"type": "latency", "attributes": "fast"}', "attributes"),
    ('{"type": "latency", "name": 7}', "name"),
    (json.dumps({"type": "latency", "name": NAME_300}), "name"),
]

BAD_PROXIES = [
    (json.dumps({"name": "x", "upstream": HOST_300 + ":80"}), "upstream"),
    ('{"name": "x", "upstream": "a\\u0000b:80"}', "upstream"),
    ('{"name": "x", "upstream": "127.0.0.1:99999"}', "upstream"),
    ('{"name": "x", "upstream": "127.0.0.1:1e3"}', "upstream"),
    ('{"name": "x", "upstream": 80}', "upstream"),
    ('{"name": "x", "upstream": "127.0.0.1:1", "listen": ["127.0.0.1:0"]}', "listen"),
    ('{"name": "x", "upstream": "127.0.0.1:1", "enabled": "yes"}', "enabled"),
    ('{"name": ["x"], "upstream": "127.0.0.1:1"}', "name"),
    (json.dumps({"name": NAME_300, "upstream": "127.0.0.1:1"}), "name"),
]


def test_bad_toxic_and_proxy_fields_are_400_and_the_emulator_keeps_forwarding(
        wan: tuple[ChildProcess, str]) -> None:
    proc, api = wan
    echo = Echo()
    try:
        status, proxy = call(api, "POST", "/proxies", json.dumps({"name": "link", "upstream": echo.address}))
        assert status == 201
        listen = str(proxy["listen"])
        status, _ = call(api, "POST", "/proxies/link/toxics", '{"name": "lag", "type": "latency", '
                                                              '"attributes": {"latency": 1, "jitter": 1}}')
        assert status == 200
        for body, field in BAD_TOXICS:
            status, reply = call(api, "POST", "/proxies/link/toxics", body)
            assert status == 400 and field in str(reply["error"]), (body[:80], reply)
            # A connection after each refusal: a toxic that slipped through would show here.
            assert round_trip(listen, b"ping") == b"ping"
        for body, field in BAD_TOXICS[:6]:  # updating a toxic checks the same way
            status, reply = call(api, "POST", "/proxies/link/toxics/lag", body)
            assert status == 400 and field in str(reply["error"]), (body[:80], reply)
        for body, field in BAD_PROXIES:
            status, reply = call(api, "POST", "/proxies", body)
            assert status == 400 and field in str(reply["error"]), (body[:80], reply)
        status, reply = call(api, "POST", "/proxies/link", json.dumps({"upstream": HOST_300 + ":1"}))
        assert status == 400 and "upstream" in str(reply["error"])

        assert proc.poll() is None
        status, proxies = call(api, "GET", "/proxies")
        assert status == 200 and set(proxies) == {"link"}
        assert [t["name"] for t in proxies["link"]["toxics"]] == ["lag"]  # type: ignore[index]
        assert round_trip(listen, b"x" * 100_000) == b"x" * 100_000
    finally:
        echo.close()


def _receive_all(sock: socket.socket) -> bytes:
    got = b""
    while chunk := sock.recv(65536):
        got += chunk
    return got


@pytest.mark.parametrize("request_head", [
    b"POST /proxies HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"na",
    b"POST /proxies HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"nam\r\n",
    b"POST /proxies HTTP/1.1\r\nHost: x\r\nContent-Le",
], ids=["body", "chunked body", "headers"])
def test_a_request_that_never_finishes_gets_408_and_is_closed(
        wan: tuple[ChildProcess, str], request_head: bytes) -> None:
    proc, api = wan
    host, port = api.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(request_head)
        reply = _receive_all(sock)  # returns at EOF: the emulator closed the connection
    assert reply.startswith(b"HTTP/1.1 408 "), reply
    assert proc.poll() is None
    assert call(api, "GET", "/version")[0] == 200


def shaping(links: dict[str, dict[str, object]]) -> dict[str, dict[str, object]]:
    """Links as configured, without their byte counts."""
    return {name: {k: v for k, v in link.items() if k != "sent"} for name, link in links.items()}


def test_a_killed_emulator_comes_back_with_its_links_and_status_sees_a_cut_source(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"

    def causeway(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "deploy.cli", *args], capture_output=True, text=True,
                              timeout=180, cwd=REPO)

    up = causeway("up", "examples/two-dc.yaml", "-d", "--state-dir", str(state))
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        doc = json.loads((state / "state.json").read_text())
        api, victim = doc["wan"]["api"], doc["wan"]["pid"]
        before = call(api, "GET", "/proxies")[1]
        links = [f"east-{broker}-to-west" for broker in (1, 2, 3)]  # one proxy per broker of east
        assert set(before) == set(links)
        shared_before = shaping(call(api, "GET", "/links")[1])
        assert set(shared_before) == {"east~west"}  # the one link the three proxies cross

        os.kill(victim, signal.SIGKILL)

        def links_back() -> bool:
            try:
                status, proxies = call(api, "GET", "/proxies")
            except OSError:
                return False
            return status == 200 and proxies == before and shaping(call(api, "GET", "/links")[1]) == shared_before

        wait_until(links_back, what="the restarted emulator to have its proxies and toxics again", timeout_s=60)
        doc = json.loads((state / "state.json").read_text())
        assert doc["wan"]["pid"] != victim and doc["wan"]["restarts"] == 1 and alive(doc["wan"]["pid"])

        # The mirror, reading east through the link, carries on.
        east, west = doc["clusters"]["east"]["bootstrap"], doc["clusters"]["west"]["bootstrap"]
        sent = produce_spread(east, "orders", 30)
        assert read_topic(west, "east.orders", 30) == sent
        wait_until(lambda: status_of(state)["healthy"], what="status to be healthy", timeout_s=60, interval_s=0.5)

        # Cut the link: the mirror cannot reach its source, and status says so.
        for link in links:
            status, _ = call(api, "POST", f"/proxies/{link}", '{"enabled": false}')
            assert status == 200

        def mirror_cut_off() -> bool:
            mirror = status_of(state)["mirrors"]["east-to-west"]
            return not mirror["healthy"] and any("source" in reason for reason in mirror["unhealthy_because"])

        wait_until(mirror_cut_off, what="status to report the mirror cut off from its source", timeout_s=90,
                   interval_s=0.5)
        capsys.readouterr()
        assert main(["status", "--state-dir", str(state)]) == 2  # the command, in this process
        table = capsys.readouterr().out
        assert "link proxy east-1-to-west is disabled" in table
        assert "mirror east-to-west: cannot reach its source" in table
    finally:
        assert main(["down", "--state-dir", str(state)]) == 0
