"""Proxies: a listener, its connections, and the toxics applied to them.

Structure (every task has an owner that outlives it):

- the :class:`ProxyRegistry` owns a nursery in which each enabled proxy runs one serving task;
- a proxy's serving task owns its listener and a nursery of connections, all under one cancel
  scope: disabling or deleting the proxy cancels it, which closes the listener and every
  connection;
- a connection owns four tasks: per direction, a reader that timestamps what it reads and a
  writer that applies the proxy's toxics for that direction and writes to the other side; a
  proxy on a link (deploy/wan/link.py) has two more per direction, a transmitter taking the
  writer's output through the link's shared bottleneck and a deliverer writing it out once its
  propagation delay has passed.

Toxics live on the proxy. A writer looks at the proxy's toxic list before each chunk (a version
number makes that a single comparison), so adding, changing or removing a toxic acts on
connections already open; a writer waiting for data is woken when the list changes so that a
toxic with a deadline (``timeout``) starts counting at once.

No proxy forwards to a proxy. A proxy whose upstream is its own listen address (or another
proxy's) would open a new connection to itself for every one it accepts, until the process runs
out of file descriptors and the API dies with it. Such a proxy is refused when it is created or
changed (400, naming both proxies), and a connection whose upstream turns out to be one of the
emulator's listeners once connected (a host name, a wildcard listener) is closed at once. Each
proxy also holds at most ``max_connections`` client connections: past it a new one is closed as
soon as it is accepted, as Kafka's broker closes connections past ``max.connections.per.ip``.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import random
import socket
import struct
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Final

import trio

from broker.address import format_host_port as format_hostport
from broker.address import parse_host_port
from broker.retry import worth_reporting
from deploy.wan.errors import PROXY_EXISTS, PROXY_NOT_FOUND, TOXIC_EXISTS, TOXIC_NOT_FOUND, ApiError, bad_request
from deploy.wan.link import Lane, Link, LinkSpec, update_link
from deploy.wan.toxics import (
    MAX_NAME,
    STREAMS,
    Chunk,
    CloseConnection,
    ResetConnection,
    Stage,
    ToxicSpec,
    make_stage,
    update_toxic,
)

__all__ = ["MAX_CONNECTIONS", "Proxy", "ProxyLink", "ProxyRegistry", "format_hostport", "open_listener",
           "split_hostport"]

log = logging.getLogger("causeway.wan")

# One read takes whatever the kernel has, up to this much: large enough that forwarding costs
# a few Python operations per quarter megabyte.
READ_SIZE: Final = 256 * 1024
# How far a direction's reader may run ahead of its writer (data read but not yet written),
# e.g. while latency holds chunks back. Above it the reader stops and TCP pushes back.
BUFFER_LIMIT: Final = 8 * 1024 * 1024
ACCEPT_RETRY_SECONDS: Final = 0.1
#: Client connections one proxy holds at most (each costs two file descriptors, its client's and
#: its upstream's); a WAN link's clients need a few each.
MAX_CONNECTIONS: Final = 1000


# --- addresses --------------------------------------------------------------------------------


def split_hostport(text: str, what: str = "address") -> tuple[str, int]:
    """``"host:port"`` or ``"[v6]:port"`` to ``(host, port)`` (`broker.address.parse_host_port`).

    Error handling: raises :class:`ApiError` (400) when there is no port, it is not 0..65535, or
    the host is one no resolver could take.
    """
    try:
        return parse_host_port(text, what)
    except ValueError as error:
        raise bad_request(str(error)) from None


def _short(text: str) -> str:
    shown = repr(text)
    return shown if len(shown) <= 80 else shown[:77] + "..."


def _canonical_listen(text: str) -> str:
    """The form a listen address is compared in, so that ``localhost:8080`` and
    ``127.0.0.1:8080`` count as the same address."""
    host, port = split_hostport(text, "listen")
    if host == "localhost":
        host = "127.0.0.1"
    try:
        host = str(ipaddress.ip_address(host))
    except ValueError:
        pass
    return format_hostport(host or "0.0.0.0", port)


def _host(text: str) -> str:
    """A host as compared for loops: an IP address in its one spelling, a name in lower case."""
    if text in ("", "localhost"):
        return "0.0.0.0" if not text else "127.0.0.1"
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return text.lower()


_EVERY_ADDRESS = ("0.0.0.0", "::")


def upstream_reaches(upstream: str, listen: str) -> bool:
    """Whether connecting to `upstream` reaches a listener bound to `listen`: the same port on
    the same host, or a loopback or unspecified address and a listener on all addresses (or on
    loopback: connecting to 0.0.0.0 reaches this host). A name other than localhost cannot be
    told from here: such an upstream is checked once connected (Proxy._handle)."""
    up_host, up_port = split_hostport(upstream, "upstream")
    listen_host, listen_port = split_hostport(listen, "listen")
    if up_port != listen_port or listen_port == 0:
        return False
    up, bound = _host(up_host), _host(listen_host)
    if up == bound:
        return True
    try:
        up_address, bound_address = ipaddress.ip_address(up), ipaddress.ip_address(bound)
    except ValueError:
        return False
    if bound in _EVERY_ADDRESS:
        return up_address.is_loopback or up_address.is_unspecified
    return up in _EVERY_ADDRESS and bound_address.is_loopback


async def open_listener(host: str, port: int) -> trio.SocketListener:
    """Bind and listen on the first address ``host`` resolves to (``""``: all IPv4 interfaces).

    Error handling: raises OSError (including socket.gaierror) when the name does not resolve
    or the address cannot be bound.
    """
    infos = await trio.socket.getaddrinfo(host or "0.0.0.0", port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, type_, proto, _, sockaddr = infos[0]
    sock = trio.socket.socket(family, type_, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        await sock.bind(sockaddr)
        sock.listen(socket.SOMAXCONN)
    except BaseException:
        sock.close()
        raise
    return trio.SocketListener(sock)


def _bound_address(listener: trio.SocketListener) -> tuple[str, int]:
    name = listener.socket.getsockname()
    return str(name[0]), int(name[1])


# --- connections ------------------------------------------------------------------------------


Forward = Callable[[Chunk], Awaitable[None]]
ForwardEof = Callable[[], Awaitable[None]]


def _chain(stage: Stage, forward: Forward, forward_eof: ForwardEof) -> tuple[Forward, ForwardEof]:
    async def on_data(chunk: Chunk) -> None:
        await stage.on_data(chunk, forward)

    async def on_eof() -> None:
        await stage.on_eof(forward_eof)

    return on_data, on_eof


class _Pipe:
    """One direction of one connection: bytes read from ``source`` go through the toxics of
    ``stream`` and are written to ``dest``."""

    def __init__(
        self, proxy: Proxy, stream: str, source: trio.SocketStream, dest: trio.SocketStream, rng: random.Random
    ) -> None:
        self.proxy = proxy
        self.stream = stream
        self._source = source
        self._dest = dest
        self._rng = rng
        self._send, self._receive = trio.open_memory_channel[Chunk | None](math.inf)
        # Across a link: the writer queues what its toxics let out at the link's entrance (this
        # connection's queue there, as a fair queueing router keeps one per flow); a transmitter
        # takes it through the link's bottleneck a quantum per turn onto a delay line, which a
        # deliverer writes out when due. So neither the toxics nor the next quantum wait for the
        # data in flight.
        self.lane = proxy.link.lane(stream, rng) if proxy.link is not None else None
        self._queue_send, self._queue_receive = trio.open_memory_channel[bytes | None](math.inf)
        self._line_send, self._line_receive = trio.open_memory_channel[tuple[float, bytes | None]](math.inf)
        self._in_line = 0
        self.queued = 0  # bytes at the link's entrance, not yet through its bottleneck (the metrics' queue)
        self._line_room: trio.Event | None = None
        self._buffered = 0
        self._room: trio.Event | None = None
        self._idle: trio.CancelScope | None = None
        # Toxic -> this connection's state for it (None: spared by the toxicity draw).
        self._stages: dict[ToxicSpec, Stage | None] = {}

    def wake(self) -> None:
        """Make the writer look at the proxy's toxics again if it is waiting for data."""
        if self._idle is not None:
            self._idle.cancel()

    async def read_loop(self) -> None:
        while True:
            while self._buffered >= BUFFER_LIMIT:
                self._room = trio.Event()
                await self._room.wait()
            data = await self._source.receive_some(READ_SIZE)
            if not data:
                self._send.send_nowait(None)
                return
            self._buffered += len(data)
            self.proxy.received[self.stream] += len(data)
            self._send.send_nowait(Chunk(data, trio.current_time()))

    def _current_stages(self) -> list[Stage]:
        stages: dict[ToxicSpec, Stage | None] = {}
        for spec in self.proxy.chain(self.stream):
            stages[spec] = self._stages[spec] if spec in self._stages else make_stage(spec, self._rng)
        self._stages = stages
        return [stage for stage in stages.values() if stage is not None]

    async def _write(self, chunk: Chunk) -> None:
        if self.lane is None:
            await self._dest.send_all(chunk.data)
            self.proxy.sent[self.stream] += len(chunk.data)
            return
        # Data queued or in flight on the link counts against BUFFER_LIMIT too.
        while self._in_line >= BUFFER_LIMIT:
            self._line_room = trio.Event()
            await self._line_room.wait()
        self._in_line += len(chunk.data)
        self.queued += len(chunk.data)
        self._queue_send.send_nowait(chunk.data)

    async def _write_eof(self) -> None:
        if self.lane is None:
            await self._dest.send_eof()
        else:
            self._queue_send.send_nowait(None)

    async def transmit_loop(self) -> None:
        """Across a link: take queued data through the link's bottleneck, one quantum per turn,
        onto the delay line with the time each piece arrives."""
        if self.lane is None:
            return
        lane = self.lane
        while True:
            data = await self._queue_receive.receive()
            if data is None:
                self._line_send.send_nowait((lane.due(trio.current_time(), 0), None))
                return
            quantum = lane.direction.quantum
            for start in range(0, len(data), quantum):
                part = data[start : start + quantum] if len(data) > quantum else data
                left = await lane.direction.send(len(part))
                self.queued -= len(part)
                self._line_send.send_nowait((lane.due(left, len(part)), part))

    async def deliver_loop(self) -> None:
        """Across a link: write each piece when it is due, in order; the end of stream last."""
        if self.lane is None:
            return
        while True:
            due, data = await self._line_receive.receive()
            await trio.sleep_until(due)
            if data is None:
                await self._dest.send_eof()
                return
            await self._dest.send_all(data)
            self.proxy.sent[self.stream] += len(data)
            self._in_line -= len(data)
            if self._line_room is not None and self._in_line < BUFFER_LIMIT:
                self._line_room.set()
                self._line_room = None

    async def write_loop(self) -> None:
        version = -1
        stages: list[Stage] = []
        forward: Forward = self._write
        forward_eof: ForwardEof = self._write_eof
        while True:
            if version != self.proxy.toxics_version:
                version = self.proxy.toxics_version
                stages = self._current_stages()
                forward, forward_eof = self._write, self._write_eof
                for stage in reversed(stages):
                    forward, forward_eof = _chain(stage, forward, forward_eof)
            deadline = min((stage.deadline for stage in stages), default=math.inf)
            with trio.CancelScope(deadline=deadline) as idle:
                self._idle = idle
                item = await self._receive.receive()
            self._idle = None
            if idle.cancelled_caught:
                now = trio.current_time()
                for stage in stages:
                    if stage.deadline <= now:
                        stage.on_deadline()
                continue
            if item is None:
                await forward_eof()
                return
            self._buffered -= len(item.data)
            if self._room is not None and self._buffered < BUFFER_LIMIT:
                self._room.set()
                self._room = None
            await forward(item)


class _Connection:
    """A client connection and its upstream connection, forwarded both ways."""

    def __init__(self, proxy: Proxy, client: trio.SocketStream, upstream: trio.SocketStream) -> None:
        self.proxy = proxy
        self.client = client
        self.upstream = upstream
        rng = proxy.rng
        self.pipes = (
            _Pipe(proxy, "upstream", client, upstream, rng),
            _Pipe(proxy, "downstream", upstream, client, rng),
        )
        self._reset = False

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:

            async def guarded(loop: Callable[[], Awaitable[None]]) -> None:
                try:
                    await loop()
                except ResetConnection:
                    self._reset = True
                    nursery.cancel_scope.cancel()
                except (CloseConnection, trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    nursery.cancel_scope.cancel()

            for pipe in self.pipes:
                nursery.start_soon(guarded, pipe.read_loop)
                nursery.start_soon(guarded, pipe.write_loop)
                nursery.start_soon(guarded, pipe.transmit_loop)
                nursery.start_soon(guarded, pipe.deliver_loop)

    def close(self) -> None:
        """Close both sockets now (synchronous, so it also runs under cancellation)."""
        for stream in (self.client, self.upstream):
            if self._reset:
                # SO_LINGER 0: close() sends RST and drops unsent data, as a reset peer does.
                try:
                    stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                except OSError:
                    pass
            stream.socket.close()


# --- proxies ----------------------------------------------------------------------------------


class ProxyLink:
    """A proxy's place on a link: its upstream (the server) is in datacenter ``upstream``, its
    clients in the link's other datacenter. Its upstream stream crosses the link toward
    ``upstream``, its downstream stream the other way."""

    def __init__(self, link: Link, upstream: str) -> None:
        if upstream not in link.spec.between:
            raise bad_request(f"link upstream must be one of the datacenters of link {link.spec.name!r} "
                              f"({' and '.join(link.spec.between)}), got {upstream!r:.60}")
        self.link = link
        self.upstream = upstream
        self.client_side = next(dc for dc in link.spec.between if dc != upstream)

    def lane(self, stream: str, rng: random.Random) -> Lane:
        source, dest = (self.client_side, self.upstream) if stream == "upstream" else (self.upstream, self.client_side)
        return Lane(self.link, self.link.direction(source, dest), rng)

    def to_json(self) -> dict[str, str]:
        return {"name": self.link.spec.name, "upstream": self.upstream}


class Proxy:
    """A named TCP proxy from ``listen`` to ``upstream`` with its toxics."""

    def __init__(self, name: str, listen: str, upstream: str, nursery: trio.Nursery, *,
                 max_connections: int = MAX_CONNECTIONS,
                 is_listener: Callable[[tuple[str, int], str], bool] = lambda peer, local: False,
                 link: ProxyLink | None = None) -> None:
        split_hostport(listen, "listen")
        split_hostport(upstream, "upstream")
        self.name = name
        # The link its connections cross (shared with other proxies), if any: fixed for the
        # proxy's life, as its connections' pipes are made with it.
        self.link = link
        self.listen = listen
        self.upstream = upstream
        self.enabled = False
        self.rng = random.Random()
        self.max_connections = max_connections
        # Whether a connected address (ip, port), reached from local address `local`, is one of
        # the emulator's own proxy listeners: then forwarding to it is a loop.
        self._is_listener = is_listener
        self._accepted = 0  # client connections being served
        self.refused = 0  # client connections closed at once: over max_connections, or a loop
        # Bytes read from and written to each stream's source and destination, for the whole life
        # of the proxy (Toxiproxy's toxiproxy_proxy_{received,sent}_bytes_total; deploy/wan/metrics.py).
        self.received = dict.fromkeys(STREAMS, 0)
        self.sent = dict.fromkeys(STREAMS, 0)
        self._nursery = nursery
        self._toxics: dict[str, ToxicSpec] = {}
        self._chains: dict[str, tuple[ToxicSpec, ...]] = {stream: () for stream in STREAMS}
        self.toxics_version = 0
        self._connections: set[_Connection] = set()
        self._scope: trio.CancelScope | None = None
        self._stopped: trio.Event | None = None

    def to_json(self) -> dict[str, Any]:
        shown = {
            "name": self.name,
            "listen": self.listen,
            "upstream": self.upstream,
            "enabled": self.enabled,
            "toxics": [toxic.to_json() for toxic in self.toxics()],
        }
        # Only on a proxy that has one: Toxiproxy's own clients see the fields they know.
        if self.link is not None:
            shown["link"] = self.link.to_json()
        return shown

    @property
    def connections(self) -> int:
        """Connections it forwards now."""
        return len(self._connections)

    def queued(self, stream: str) -> int:
        """Bytes of `stream` waiting at its link's entrance, over every connection (0 off a link)."""
        return sum(pipe.queued for connection in self._connections for pipe in connection.pipes
                   if pipe.stream == stream)

    # -- toxics --

    def toxics(self) -> list[ToxicSpec]:
        """All toxics, upstream ones first, each stream in the order added (as Toxiproxy lists)."""
        return [toxic for stream in STREAMS for toxic in self._chains[stream]]

    def chain(self, stream: str) -> tuple[ToxicSpec, ...]:
        return self._chains[stream]

    def get_toxic(self, name: str) -> ToxicSpec:
        try:
            return self._toxics[name]
        except KeyError:
            raise ApiError(TOXIC_NOT_FOUND, 404) from None

    def add_toxic(self, toxic: ToxicSpec) -> None:
        if toxic.name in self._toxics:
            raise ApiError(TOXIC_EXISTS, 409)
        self._toxics[toxic.name] = toxic
        self._toxics_changed()

    def update_toxic(self, name: str, body: object) -> ToxicSpec:
        updated = update_toxic(self.get_toxic(name), body)
        self._toxics[name] = updated
        self._toxics_changed()
        return updated

    def remove_toxic(self, name: str) -> None:
        self.get_toxic(name)
        del self._toxics[name]
        self._toxics_changed()

    def reset_toxics(self) -> None:
        self._toxics.clear()
        self._toxics_changed()

    def _toxics_changed(self) -> None:
        # Order within a stream is the order added; an update keeps the toxic's place because
        # the dict keeps the key's position.
        for stream in STREAMS:
            self._chains[stream] = tuple(t for t in self._toxics.values() if t.stream == stream)
        self.toxics_version += 1
        for connection in self._connections:
            for pipe in connection.pipes:
                pipe.wake()

    # -- lifecycle --

    async def start(self) -> None:
        """Bind the listen address (port 0: a free port, which ``listen`` then shows) and serve.

        Error handling: raises :class:`ApiError` (500, Toxiproxy's status for it) when the
        address cannot be bound, e.g. it is already in use; the proxy stays disabled.
        """
        if self.enabled:
            return
        host, port = split_hostport(self.listen, "listen")
        try:
            listener = await open_listener(host, port)
        except (OSError, UnicodeError) as error:
            reason = (error.strerror if isinstance(error, OSError) else None) or str(error)
            raise ApiError(f"listen tcp {self.listen}: {reason}", 500) from error
        self.listen = format_hostport(*_bound_address(listener))
        self.enabled = True
        self._scope = trio.CancelScope()
        self._stopped = trio.Event()
        self._nursery.start_soon(self._serve, listener, self._scope, self._stopped)
        log.info("proxy %s listening on %s, upstream %s", self.name, self.listen, self.upstream)

    async def stop(self) -> None:
        """Close the listener and every open connection; returns once they are closed."""
        if not self.enabled:
            return
        self.enabled = False
        assert self._scope is not None and self._stopped is not None
        self._scope.cancel()
        await self._stopped.wait()
        log.info("proxy %s stopped", self.name)

    async def update(self, listen: str, upstream: str, enabled: bool) -> None:
        """Apply ``POST/PATCH /proxies/{name}``: a new address restarts the proxy there."""
        split_hostport(listen, "listen")
        split_hostport(upstream, "upstream")
        if _canonical_listen(listen) != _canonical_listen(self.listen) or upstream != self.upstream:
            await self.stop()
            self.listen = listen
            self.upstream = upstream
        if enabled:
            await self.start()
        else:
            await self.stop()

    async def _serve(self, listener: trio.SocketListener, scope: trio.CancelScope, stopped: trio.Event) -> None:
        try:
            with scope:
                async with trio.open_nursery() as connections:
                    while True:
                        try:
                            client = await listener.accept()
                        except OSError as error:
                            # Out of file descriptors or memory: wait and retry, never die.
                            log.warning("proxy %s: accept failed: %s", self.name, error)
                            await trio.sleep(ACCEPT_RETRY_SECONDS)
                            continue
                        if self._accepted >= self.max_connections:
                            self._refuse(client, f"{self._accepted} connections open (max_connections "
                                                 f"{self.max_connections})")
                            continue
                        self._accepted += 1
                        connections.start_soon(self._handle, client)
        finally:
            listener.socket.close()
            stopped.set()

    async def _resolves_to_listener(self, host: str, port: int) -> bool:
        """Whether `host` (a name: addresses were checked when the proxy was made) resolves to a
        proxy listener of this emulator on this host. A name that does not resolve is the
        connect's to report."""
        try:
            infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            return False
        return any(self._is_listener((str(info[4][0]), int(info[4][1])), "") for info in infos)

    def _refuse(self, client: trio.SocketStream, why: str) -> None:
        """Close a client connection at once; logged the first time, then ever more rarely."""
        client.socket.close()
        self.refused += 1
        if worth_reporting(self.refused):
            log.warning("proxy %s: closed a new connection: %s (%d closed so far)", self.name, why, self.refused)

    async def _handle(self, client: trio.SocketStream) -> None:
        upstream: trio.SocketStream | None = None
        try:
            host, port = split_hostport(self.upstream, "upstream")
            if await self._resolves_to_listener(host, port):
                # Refused before connecting: a handler that connected first and then saw the loop
                # would have made one more looped connection, whose handler would do the same,
                # one after another for ever.
                self._refuse(client, f"its upstream {self.upstream} resolves to a listener of this emulator "
                                     "(a proxy loop)")
                return
            try:
                upstream = await trio.open_tcp_stream(host, port)
            except (OSError, UnicodeError) as error:  # UnicodeError: a name the resolver cannot encode
                log.warning("proxy %s: cannot reach upstream %s: %s", self.name, self.upstream, error)
                return
            peer, local = upstream.socket.getpeername(), upstream.socket.getsockname()
            if self._is_listener((str(peer[0]), int(peer[1])), str(local[0])):
                self._refuse(client, f"its upstream {self.upstream} is a listener of this emulator (a proxy loop)")
                return
            connection = _Connection(self, client, upstream)
            self._connections.add(connection)
            try:
                await connection.run()
            finally:
                self._connections.discard(connection)
                connection.close()
        finally:
            self._accepted -= 1
            client.socket.close()
            if upstream is not None:
                upstream.socket.close()


class ProxyRegistry:
    """Every proxy by name. Its methods are what the API calls; they raise :class:`ApiError`."""

    def __init__(self, nursery: trio.Nursery, *, max_connections: int = MAX_CONNECTIONS) -> None:
        self._nursery = nursery
        self._proxies: dict[str, Proxy] = {}
        self.max_connections = max_connections
        self._links: dict[str, Link] = {}
        # One change at a time: starting and stopping proxies awaits.
        self.lock = trio.Lock()

    # -- links --

    def links(self) -> dict[str, Link]:
        return dict(self._links)

    def get_link(self, name: str) -> Link:
        try:
            return self._links[name]
        except KeyError:
            raise ApiError(f"link not found: {name[:60]}", 404) from None

    def create_link(self, spec: LinkSpec) -> Link:
        """Add a link (409 for a name in use)."""
        if spec.name in self._links:
            raise ApiError(f"link already exists: {spec.name}", 409)
        link = self._links[spec.name] = Link(spec)
        return link

    def update_link(self, name: str, body: object) -> Link:
        link = self.get_link(name)
        link.configure(update_link(link.spec, body))
        return link

    def remove_link(self, name: str) -> None:
        """Remove a link no proxy crosses (409 naming the proxies that still do)."""
        self.get_link(name)
        users = sorted(p.name for p in self._proxies.values() if p.link is not None and p.link.link.spec.name == name)
        if users:
            raise ApiError(f"link {name} is crossed by proxies {', '.join(users)[:200]}: delete them first", 409)
        del self._links[name]

    def proxy_link(self, wanted: tuple[str, str] | None) -> ProxyLink | None:
        """A proxy's place on a link from its body's ``link`` (name, upstream datacenter):
        400 for a link that does not exist (it must be made first)."""
        if wanted is None:
            return None
        name, upstream = wanted
        if name not in self._links:
            raise bad_request(f"link {name[:60]!r} does not exist: make it first (POST /links)")
        return ProxyLink(self._links[name], upstream)

    def _addresses(self) -> dict[str, tuple[str, str]]:
        return {name: (proxy.listen, proxy.upstream) for name, proxy in self._proxies.items()}

    def _check_no_loop(self, name: str, listen: str, upstream: str,
                       proxies: Mapping[str, tuple[str, str]] | None = None) -> None:
        """Refuse (400) proxy `name` with these addresses if it would forward to a proxy, itself
        included, or be forwarded to by one; `proxies` (name -> listen, upstream) are the others,
        all of the registry's by default."""
        for other, (other_listen, other_upstream) in (self._addresses() if proxies is None else proxies).items():
            if other == name:
                continue
            if upstream_reaches(upstream, other_listen):
                raise bad_request(f"upstream {upstream} is the listen address of proxy {other!r}: a proxy loop")
            if upstream_reaches(other_upstream, listen):
                raise bad_request(f"listen {listen} is the upstream of proxy {other!r}: a proxy loop")
        if upstream_reaches(upstream, listen):
            raise bad_request(f"upstream {upstream} is the proxy's own listen address: a proxy loop")

    async def _check_bound(self, proxy: Proxy) -> None:
        """Check a started proxy's bound address (port 0 is only known once bound); stop it and
        refuse if it makes a loop."""
        if not proxy.enabled:
            return
        try:
            self._check_no_loop(proxy.name, proxy.listen, proxy.upstream)
        except ApiError:
            await proxy.stop()
            raise

    def is_listener(self, peer: tuple[str, int], local: str) -> bool:
        """Whether a connection to `peer` (ip, port), made from local address `local`, reached a
        proxy of this emulator: its listener's address, or its port on this host for a proxy
        listening on every address."""
        this_host = peer[0] == local or ipaddress.ip_address(peer[0]).is_loopback
        for proxy in self._proxies.values():
            host, port = split_hostport(proxy.listen, "listen")
            bound = _host(host)
            if proxy.enabled and port == peer[1] and (bound == _host(peer[0]) or
                                                      (this_host and bound in _EVERY_ADDRESS)):
                return True
        return False

    def all(self) -> dict[str, Proxy]:
        return dict(self._proxies)

    def get(self, name: str) -> Proxy:
        try:
            return self._proxies[name]
        except KeyError:
            raise ApiError(PROXY_NOT_FOUND, 404) from None

    async def create(self, name: str, listen: str, upstream: str, enabled: bool,
                     link: tuple[str, str] | None = None) -> Proxy:
        """Add a proxy and (if enabled) start it; ``link`` (a link's name, the datacenter of
        the proxy's upstream) puts its connections on that link.

        Error handling: ApiError 409 for a name in use, 400 for bad addresses or an unknown link,
        500 when the listen address cannot be bound (the proxy is then not added).
        """
        if name in self._proxies:
            raise ApiError(PROXY_EXISTS, 409)
        self._check_no_loop(name, listen, upstream)
        proxy = Proxy(name, listen, upstream, self._nursery, max_connections=self.max_connections,
                      is_listener=self.is_listener, link=self.proxy_link(link))
        if enabled:
            await proxy.start()
            await self._check_bound(proxy)
        self._proxies[name] = proxy
        return proxy

    async def update(self, name: str, listen: str, upstream: str, enabled: bool) -> Proxy:
        """Apply ``POST/PATCH /proxies/{name}`` (see Proxy.update). Error handling: as
        `create`, and a change that would make a loop is refused (400) before anything changes."""
        proxy = self.get(name)
        self._check_no_loop(name, listen, upstream)
        await proxy.update(listen, upstream, enabled)
        await self._check_bound(proxy)
        return proxy

    async def remove(self, name: str) -> None:
        proxy = self.get(name)
        await proxy.stop()
        del self._proxies[name]

    async def reset(self) -> None:
        """Enable every proxy and remove every toxic."""
        for proxy in self._proxies.values():
            await proxy.start()
            proxy.reset_toxics()

    async def populate(self, entries: Iterable[Mapping[str, Any]]) -> list[Proxy]:
        """Create or replace proxies from Toxiproxy's populate format (plus an optional
        ``link``), checking every entry before changing anything. A proxy whose listen, upstream
        and link are unchanged is kept as it is (with its toxics and connections)."""
        checked: list[tuple[str, str, str, bool, tuple[str, str] | None]] = []
        names: set[str] = set()
        for index, entry in enumerate(entries, start=1):
            name, listen, upstream, enabled = parse_proxy_fields(entry, where=f" at proxy {index}")
            if name in names:
                raise bad_request(f"duplicate proxy name {name!r}")
            names.add(name)
            link = parse_proxy_link(entry, where=f" at proxy {index}")
            self.proxy_link(link)
            checked.append((name, listen, upstream, enabled, link))
        after = {n: addresses for n, addresses in self._addresses().items() if n not in names}
        after.update({name: (listen, upstream) for name, listen, upstream, _, _ in checked})
        for name, listen, upstream, _, _ in checked:
            self._check_no_loop(name, listen, upstream, after)
        result: list[Proxy] = []
        for name, listen, upstream, enabled, link in checked:
            existing = self._proxies.get(name)
            if existing is not None:
                same = _canonical_listen(listen) == _canonical_listen(existing.listen) \
                    and upstream == existing.upstream and link == _link_of(existing)
                if same:
                    result.append(existing)
                    continue
                await self.remove(name)
            result.append(await self.create(name, listen, upstream, enabled, link))
        return result


def _link_of(proxy: Proxy) -> tuple[str, str] | None:
    return None if proxy.link is None else (proxy.link.link.spec.name, proxy.link.upstream)


def parse_proxy_link(body: Mapping[str, Any], where: str = "") -> tuple[str, str] | None:
    """A proxy body's optional ``link``: ``{"name": <link>, "upstream": <datacenter of the
    proxy's upstream>}`` as (name, upstream). Error handling: ApiError 400 for another shape."""
    link = body.get("link")
    if link is None:
        return None
    if not isinstance(link, Mapping) or not isinstance(link.get("name"), str) \
            or not isinstance(link.get("upstream"), str) or set(link) - {"name", "upstream"}:
        raise bad_request(f"link must be {{\"name\": <link>, \"upstream\": <datacenter>}}{where}, "
                          f"got {_short(repr(link))}")
    return link["name"], link["upstream"]


def parse_proxy_fields(body: object, where: str = "") -> tuple[str, str, str, bool]:
    """``(name, listen, upstream, enabled)`` from a proxy JSON object; ``listen`` defaults to
    ``127.0.0.1:0`` and ``enabled`` to true.

    Error handling: raises ApiError 400 for a missing name or upstream or a wrong type.
    """
    if not isinstance(body, Mapping):
        raise bad_request("proxy must be a JSON object")
    name = body.get("name")
    upstream = body.get("upstream")
    listen = body.get("listen") or "127.0.0.1:0"
    enabled = body.get("enabled", True)
    if not name:
        raise ApiError(f"missing required field: name{where}", 400)
    if not upstream:
        raise ApiError(f"missing required field: upstream{where}", 400)
    for field_name, value in (("name", name), ("listen", listen), ("upstream", upstream)):
        if not isinstance(value, str):
            raise bad_request(f"{field_name} must be a string{where}, got {_short(repr(value))}")
    assert isinstance(name, str) and isinstance(listen, str) and isinstance(upstream, str)
    if len(name) > MAX_NAME:
        raise bad_request(f"name must be at most {MAX_NAME} characters{where}, got {len(name)}")
    if not isinstance(enabled, bool):
        raise bad_request(f"enabled must be true or false{where}, got {_short(repr(enabled))}")
    split_hostport(listen, "listen")
    split_hostport(upstream, "upstream")
    return name, listen, upstream, enabled
