"""The Toxiproxy 2.x HTTP API: routes, JSON bodies, status codes.

Replies follow Toxiproxy: 200 with JSON for reads and updates, 201 for a created proxy and for
populate, 204 with no body for deletes and reset; errors are ``{"error": message, "status":
code}`` with 400 (bad body, unknown toxic type, bad attributes), 404 (unknown proxy or toxic),
409 (duplicate name) or 500 (e.g. listen address in use).

Beyond Toxiproxy: ``/links`` (GET, POST) and ``/links/{name}`` (GET, POST/PATCH, DELETE) manage
links (deploy/wan/link.py), and a proxy body may carry ``"link": {"name", "upstream"}`` to put
the proxy's connections on one. A real Toxiproxy answers 404 to ``/links``: its callers fall back
to per-proxy toxics then. ``GET /metrics`` is Prometheus's text format, as Toxiproxy serves it
(deploy/wan/metrics.py).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final
from urllib.parse import unquote, urlsplit

from deploy.wan.errors import ApiError, bad_request
from deploy.wan.http import Request, Response
from deploy.wan.link import parse_link
from deploy.wan.metrics import CONTENT_TYPE, render_metrics
from deploy.wan.proxy import ProxyRegistry, parse_proxy_fields, parse_proxy_link
from deploy.wan.toxics import parse_toxic

__all__ = ["TOXIPROXY_VERSION", "WanApi"]

log = logging.getLogger("causeway.wan.api")

#: The Toxiproxy release whose API this emulator follows, reported by ``GET /version``.
TOXIPROXY_VERSION: Final = "2.12.0"


def _json(status: int, value: object) -> Response:
    return Response(status, json.dumps(value).encode() + b"\n")


def _no_content() -> Response:
    return Response(204)


def _parse_json(body: bytes) -> object:
    if not body.strip():
        raise bad_request("EOF")
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as error:
        raise bad_request(str(error)) from None


class WanApi:
    """Answers API requests against a :class:`ProxyRegistry`."""

    def __init__(self, registry: ProxyRegistry) -> None:
        self.registry = registry

    async def handle(self, request: Request) -> Response:
        """Route one request. Every :class:`ApiError` becomes its error reply here."""
        path = urlsplit(request.target).path
        parts = [unquote(part) for part in path.strip("/").split("/")]
        try:
            async with self.registry.lock:
                return await self._route(request.method, parts, request.body)
        except ApiError as error:
            if error.status >= 500:
                log.warning("%s %s: %s", request.method, path, error.message)
            return _json(error.status, error.to_json())

    async def _route(self, method: str, parts: list[str], body: bytes) -> Response:
        allowed: dict[str, Callable[..., Awaitable[Response]]]
        match parts:
            case ["version"]:
                allowed = {"GET": self._version}
                args: tuple[Any, ...] = ()
            case ["metrics"]:
                allowed = {"GET": self._metrics}
                args = ()
            case ["reset"]:
                allowed = {"POST": self._reset}
                args = ()
            case ["populate"]:
                allowed = {"POST": self._populate}
                args = ()
            case ["links"]:
                allowed = {"GET": self._link_index, "POST": self._link_create}
                args = ()
            case ["links", name]:
                allowed = {"GET": self._link_show, "POST": self._link_update, "PATCH": self._link_update,
                           "DELETE": self._link_delete}
                args = (name,)
            case ["proxies"]:
                allowed = {"GET": self._proxy_index, "POST": self._proxy_create}
                args = ()
            case ["proxies", name]:
                allowed = {
                    "GET": self._proxy_show,
                    "POST": self._proxy_update,
                    "PATCH": self._proxy_update,
                    "DELETE": self._proxy_delete,
                }
                args = (name,)
            case ["proxies", name, "toxics"]:
                allowed = {"GET": self._toxic_index, "POST": self._toxic_create}
                args = (name,)
            case ["proxies", name, "toxics", toxic]:
                allowed = {
                    "GET": self._toxic_show,
                    "POST": self._toxic_update,
                    "PATCH": self._toxic_update,
                    "DELETE": self._toxic_delete,
                }
                args = (name, toxic)
            case _:
                raise ApiError("not found: " + "/" + "/".join(parts), 404)
        route = allowed.get(method)
        if route is None:
            raise ApiError(f"method {method} not allowed (allowed: {', '.join(allowed)})", 405)
        return await route(*args, body=body)

    # -- server --

    async def _version(self, *, body: bytes) -> Response:
        return _json(200, {"version": TOXIPROXY_VERSION})

    async def _metrics(self, *, body: bytes) -> Response:
        return Response(200, render_metrics(self.registry).encode(), content_type=CONTENT_TYPE)

    async def _reset(self, *, body: bytes) -> Response:
        await self.registry.reset()
        return _no_content()

    async def _populate(self, *, body: bytes) -> Response:
        entries = _parse_json(body)
        if not isinstance(entries, list):
            raise bad_request("populate expects a JSON array of proxies")
        proxies = await self.registry.populate(entries)
        return _json(201, {"proxies": [proxy.to_json() for proxy in proxies]})

    # -- proxies --

    async def _proxy_index(self, *, body: bytes) -> Response:
        return _json(200, {name: proxy.to_json() for name, proxy in self.registry.all().items()})

    async def _proxy_create(self, *, body: bytes) -> Response:
        fields = _parse_json(body)
        name, listen, upstream, enabled = parse_proxy_fields(fields)
        assert isinstance(fields, dict)  # parse_proxy_fields refused anything else
        proxy = await self.registry.create(name, listen, upstream, enabled, parse_proxy_link(fields))
        return _json(201, proxy.to_json())

    async def _proxy_show(self, name: str, *, body: bytes) -> Response:
        return _json(200, self.registry.get(name).to_json())

    async def _proxy_update(self, name: str, *, body: bytes) -> Response:
        proxy = self.registry.get(name)
        fields = _parse_json(body)
        if not isinstance(fields, dict):
            raise bad_request("proxy must be a JSON object")
        listen = fields.get("listen") or proxy.listen
        upstream = fields.get("upstream") or proxy.upstream
        enabled = fields.get("enabled", proxy.enabled)
        for field_name, value in (("listen", listen), ("upstream", upstream)):
            if not isinstance(value, str):
                raise bad_request(f"{field_name} must be a string, got {type(value).__name__}")
        if not isinstance(enabled, bool):
            raise bad_request(f"enabled must be true or false, got {type(enabled).__name__}")
        if "link" in fields and fields["link"] != (proxy.link.to_json() if proxy.link else None):
            raise bad_request("a proxy's link is set when it is made: delete the proxy and make it again")
        await self.registry.update(name, listen, upstream, enabled)
        return _json(200, proxy.to_json())

    async def _proxy_delete(self, name: str, *, body: bytes) -> Response:
        await self.registry.remove(name)
        return _no_content()

    # -- links --

    async def _link_index(self, *, body: bytes) -> Response:
        return _json(200, {name: link.to_json() for name, link in self.registry.links().items()})

    async def _link_create(self, *, body: bytes) -> Response:
        return _json(201, self.registry.create_link(parse_link(_parse_json(body))).to_json())

    async def _link_show(self, name: str, *, body: bytes) -> Response:
        return _json(200, self.registry.get_link(name).to_json())

    async def _link_update(self, name: str, *, body: bytes) -> Response:
        return _json(200, self.registry.update_link(name, _parse_json(body)).to_json())

    async def _link_delete(self, name: str, *, body: bytes) -> Response:
        self.registry.remove_link(name)
        return _no_content()

    # -- toxics --

    async def _toxic_index(self, name: str, *, body: bytes) -> Response:
        return _json(200, [toxic.to_json() for toxic in self.registry.get(name).toxics()])

    async def _toxic_create(self, name: str, *, body: bytes) -> Response:
        proxy = self.registry.get(name)
        toxic = parse_toxic(_parse_json(body))
        proxy.add_toxic(toxic)
        return _json(200, toxic.to_json())

    async def _toxic_show(self, name: str, toxic: str, *, body: bytes) -> Response:
        return _json(200, self.registry.get(name).get_toxic(toxic).to_json())

    async def _toxic_update(self, name: str, toxic: str, *, body: bytes) -> Response:
        proxy = self.registry.get(name)
        proxy.get_toxic(toxic)
        return _json(200, proxy.update_toxic(toxic, _parse_json(body)).to_json())

    async def _toxic_delete(self, name: str, toxic: str, *, body: bytes) -> Response:
        self.registry.get(name).remove_toxic(toxic)
        return _no_content()
