"""The one client Causeway's own tools use for the Toxiproxy HTTP API (the emulator or a real
Toxiproxy): the launcher makes links with it, `causeway status` reads them, the chaos rig injects
link faults with it, the benchmarks set up their links with it.

Why not toxiproxy-python (which the emulator stays compatible with, see
tests/integration/test_wan_emulator.py): it keeps the API address in class attributes, so one
process can talk to one server only, and its requests carry no timeout. A launcher pointed at an
external Toxiproxy, tests running several emulators, and a tool that must not hang on a silent
API need a client per address with a bound on every call. The methods of `WanProxy` have
toxiproxy-python's names, so code written against its `Proxy` reads the same.

Every call blocks (one HTTP request, at most `timeout_s`): callers on the trio thread run it with
`trio.to_thread.run_sync`.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

__all__ = ["MAX_REPLY_BYTES", "WanApiError", "WanClient", "WanProxy"]

MAX_REPLY_BYTES = 4 * 1024 * 1024  # a proxy list of thousands of links fits; a runaway reply does not


class WanApiError(RuntimeError):
    """The API answered with an error status (the message carries its body)."""

    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        super().__init__(f"WAN API refused {method} {path} ({status}): {body}")
        self.status = status


class WanClient:
    """The Toxiproxy API at `api` (HOST:PORT). Raises WanApiError for an error status and
    OSError when the API cannot be reached or does not answer within `timeout_s`."""

    def __init__(self, api: str, *, timeout_s: float = 30.0) -> None:
        self.api = api
        self.timeout_s = timeout_s

    def request(self, method: str, path: str, body: object = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"http://{self.api}{path}", method=method, data=data,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as reply:  # noqa: S310 - http only
                return json.loads(reply.read(MAX_REPLY_BYTES) or b"null")
        except urllib.error.HTTPError as exc:
            raise WanApiError(method, path, exc.code, exc.read(4096).decode(errors="replace")) from None

    def proxies(self) -> dict[str, Any]:
        """Every proxy by name, as the API describes it (listen, upstream, enabled, toxics)."""
        reply = self.request("GET", "/proxies")
        if not isinstance(reply, dict):
            raise ValueError(f"WAN API at {self.api}: /proxies is not an object")
        return reply

    def create_proxy(self, name: str, listen: str, upstream: str, *, enabled: bool = True,
                     link: dict[str, str] | None = None) -> WanProxy:
        """A proxy; ``link`` ({"name": <link>, "upstream": <datacenter of upstream>}, the
        emulator's own field) puts its connections on a link made with `create_link`."""
        body: dict[str, Any] = {"name": name, "listen": listen, "upstream": upstream, "enabled": enabled}
        if link is not None:
            body["link"] = link
        self.request("POST", "/proxies", body)
        return self.proxy(name)

    def create_link(self, body: dict[str, Any]) -> None:
        """A shared link (deploy/wan/link.py; the emulator's own resource). A real Toxiproxy
        has none: it answers 404, raised as WanApiError."""
        self.request("POST", "/links", body)

    def links(self) -> dict[str, Any]:
        reply = self.request("GET", "/links")
        if not isinstance(reply, dict):
            raise ValueError(f"WAN API at {self.api}: /links is not an object")
        return reply

    def delete_proxy(self, name: str) -> None:
        self.request("DELETE", f"/proxies/{name}")

    def proxy(self, name: str) -> WanProxy:
        return WanProxy(self, name)


class WanProxy:
    """One proxy on the API: toxics added and removed, the proxy disabled and enabled."""

    def __init__(self, client: WanClient, name: str) -> None:
        self.client = client
        self.name = name

    def add_toxic(self, *, name: str, type: str, stream: str = "downstream",  # noqa: A002 - the API's word
                  toxicity: float = 1.0, attributes: dict[str, Any] | None = None) -> None:
        self.client.request("POST", f"/proxies/{self.name}/toxics", {
            "name": name, "type": type, "stream": stream, "toxicity": toxicity, "attributes": attributes or {}})

    def add_toxics(self, toxics: list[dict[str, Any]]) -> None:
        """Toxics as the API's bodies (what `deploy.launcher.launch.link_toxics` makes)."""
        for toxic in toxics:
            self.client.request("POST", f"/proxies/{self.name}/toxics", toxic)

    def destroy_toxic(self, toxic_name: str) -> bool:
        self.client.request("DELETE", f"/proxies/{self.name}/toxics/{toxic_name}")
        return True

    def disable(self) -> None:
        self.client.request("POST", f"/proxies/{self.name}", {"enabled": False})

    def enable(self) -> None:
        self.client.request("POST", f"/proxies/{self.name}", {"enabled": True})
