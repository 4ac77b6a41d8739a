"""The traffic: many connections at once, frames pipelined on each, answers read as they come.

One thread and one selector drive every connection with non-blocking sockets: the fuzzer shares
two cores with the broker it attacks, and an event loop of its own (rather than trio's) keeps
its cost per frame to a few microseconds. Everything is bounded: connections open at once,
frames per run, wall time, and the wait for any one answer.

Answers are matched to frames by correlation id (the broker answers a connection's requests in
order; frames it does not answer, such as acks=0 produces, are passed over). An answer is
decoded as the response to the API and version its request's header named: a broker that
answers with bytes its own codec cannot read, or with a correlation id nobody sent, is wrong.
A connection the broker closes is expected (that is what a frame that does not parse earns)
and counted.
"""

from __future__ import annotations

import collections
import errno
import selectors
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from broker.protocol.api import API_SPECS
from broker.protocol.errors import ProtocolError
from broker.protocol.primitives import Reader
from broker.server.handlers import HANDLERS
from deploy.fuzz.mutate import Frame, Mutator
from deploy.fuzz.plan import ConnectionPlan, make_plan

__all__ = ["HELD_BY_DESIGN", "Counters", "EngineOptions", "run_engine"]

_DECODE_LIMIT = 1 << 20  # answers larger than this are counted and skipped, not decoded
_SAMPLES = 5  # labels kept per kind of problem, for the report
# JoinGroup and SyncGroup wait for the other members of the group, up to timeouts the request
# itself names (up to 2**31-1 ms for a rebalance), as in Kafka; the broker may keep such a
# connection until then even though its peer has gone. Any other request must let go.
HELD_BY_DESIGN = frozenset({11, 14})


@dataclass
class Counters:
    connections: int = 0
    frames_sent: int = 0
    answered: int = 0
    passed_over: int = 0  # no answer, but a later frame of the connection was answered
    closed_by_broker: int = 0  # connections
    unanswered_at_close: int = 0  # frames in flight on connections the broker closed
    timed_out: int = 0  # connections closed by the fuzzer after reply_timeout without an answer
    hung_up: int = 0  # connections the plan closed without reading the answers
    abandoned_lies: int = 0  # connections left after a frame claiming more bytes than it had
    connect_failures: int = 0
    unmatched: int = 0  # answers with a correlation id nobody sent (desync excluded)
    malformed: int = 0  # answers that do not decode
    bytes_received: int = 0
    sent_by_api: collections.Counter[int] = field(default_factory=collections.Counter)  # by header API key
    # Local port -> (connection index, the frame it still waited on) for every connection the
    # fuzzer closed with a request unanswered: what the broker may still hold, and why.
    left_waiting: dict[int, tuple[int, Frame]] = field(default_factory=dict)
    samples: dict[str, list[str]] = field(default_factory=dict)

    def sample(self, kind: str, text: str) -> None:
        kept = self.samples.setdefault(kind, [])
        if len(kept) < _SAMPLES:
            kept.append(text)


@dataclass(frozen=True)
class EngineOptions:
    address: tuple[str, int]
    seed: int
    frames: int
    connections: int = 128
    time_limit_s: float = 1800.0
    reply_timeout_s: float = 5.0
    lie_grace_s: float = 0.3
    first_index: int = 0
    only_index: int | None = None  # replay: run this one connection's plan only


def reply_problem(frame: Frame, reply: memoryview) -> str | None:
    """Why `reply` is not a well-formed answer to `frame`, or None when it is."""
    key, version = frame.api_key, frame.api_version
    if key is None or version is None:
        return "an answer to a frame too short to name its API"
    handler = HANDLERS.get(key)
    if handler is None:
        return f"an answer to unserved API key {key}"
    if not handler.min_version <= version <= handler.max_version:
        if key != 18:
            return f"an answer to unsupported version {version} of API {key}"
        version = 0  # KIP-511: ApiVersions of an unknown version is answered in v0
    spec = API_SPECS[key]
    try:
        r = Reader(reply)
        r.int32()
        if spec.response_header_version(version) >= 1:
            r.skip_tagged_fields()
        spec.response.decode_from(r, version)
    except ProtocolError as exc:
        return f"does not decode as {spec.name} v{version}: {exc}"
    if r.remaining:
        return f"{r.remaining} bytes after the {spec.name} v{version} answer"
    return None


class _Connection:
    __slots__ = ("plan", "sock", "next_frame", "in_flight", "out", "rx", "skip", "last_progress", "connected",
                 "desync", "lie_sent_at", "writes_done")

    def __init__(self, plan: ConnectionPlan, sock: socket.socket, now: float) -> None:
        self.plan = plan
        self.sock = sock
        self.next_frame = 0
        self.in_flight: collections.deque[Frame] = collections.deque()
        self.out: collections.deque[memoryview] = collections.deque()
        self.rx = bytearray()
        self.skip = 0  # bytes of an oversized answer still to discard
        self.last_progress = now  # the last time bytes went either way
        self.connected = False
        self.desync = False
        self.lie_sent_at: float | None = None
        self.writes_done = False


def _awaited(conn: _Connection) -> int:
    """Frames in flight that will be answered: an acks=0 produce takes no room in the window."""
    return sum(1 for frame in conn.in_flight if not frame.silent)


class _Engine:
    def __init__(self, options: EngineOptions, mutator: Mutator, counters: Counters) -> None:
        self.o = options
        self.mutator = mutator
        self.c = counters
        self.sel = selectors.DefaultSelector()
        self.conns: dict[int, _Connection] = {}
        self.next_index = options.first_index if options.only_index is None else options.only_index
        self.planned = 0

    # -- opening ----------------------------------------------------------------------------

    def _open_more(self, now: float, deadline: float) -> None:
        while len(self.conns) < self.o.connections and self.planned < self.o.frames and now < deadline:
            if self.o.only_index is not None and self.c.connections:
                return
            plan = make_plan(self.mutator, self.o.seed, self.next_index)
            self.next_index += 1
            room = self.o.frames - self.planned
            if len(plan.frames) > room:
                plan = ConnectionPlan(plan.index, plan.frames[:room], plan.window, plan.hang_up, plan.chunked)
            self.planned += len(plan.frames)
            sock = socket.socket(socket.AF_INET6 if ":" in self.o.address[0] else socket.AF_INET, socket.SOCK_STREAM)
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            code = sock.connect_ex(self.o.address)
            if code not in (0, errno.EINPROGRESS):
                sock.close()
                self.planned -= len(plan.frames)
                self.c.connect_failures += 1
                self.c.sample("connect failures", f"connection {plan.index}: {errno.errorcode.get(code, code)}")
                continue
            conn = _Connection(plan, sock, now)
            self.conns[sock.fileno()] = conn
            self.sel.register(sock, selectors.EVENT_READ | selectors.EVENT_WRITE, conn)
            self.c.connections += 1

    # -- writing ----------------------------------------------------------------------------

    def _fill(self, conn: _Connection) -> None:
        """Queue frames up to the plan's window."""
        plan = conn.plan
        while conn.next_frame < len(plan.frames) and _awaited(conn) < plan.window and conn.lie_sent_at is None:
            frame = plan.frames[conn.next_frame]
            conn.next_frame += 1
            data = memoryview(frame.data)
            if plan.chunked:
                rng_step = 1 + (conn.next_frame * 7919 + plan.index) % 61  # deterministic piece sizes
                conn.out.extend(data[i : i + rng_step] for i in range(0, len(data), rng_step))
            else:
                conn.out.append(data)
            conn.in_flight.append(frame)
            self.c.frames_sent += 1
            self.c.sent_by_api[frame.api_key if frame.api_key is not None else -1] += 1
            if frame.desync:
                conn.desync = True
            if frame.lie:
                break

    def _writable(self, conn: _Connection, now: float) -> None:
        if not conn.connected:
            err = conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                self.c.connect_failures += 1
                self.c.sample("connect failures", f"connection {conn.plan.index}: {errno.errorcode.get(err, err)}")
                self._close(conn)
                return
            conn.connected = True
        if not conn.out:
            self._fill(conn)
        try:
            # A chunked plan writes one piece per turn of the loop, so pieces arrive apart.
            while conn.out:
                piece = conn.out[0]
                sent = conn.sock.send(piece)
                if sent < len(piece):
                    conn.out[0] = piece[sent:]
                    return
                conn.out.popleft()
                if conn.plan.chunked:
                    return
        except BlockingIOError:
            return
        except OSError:
            self._broker_closed(conn)
            return
        finally:
            conn.last_progress = now
        last = conn.in_flight[-1] if conn.in_flight else None
        if last is not None and last.lie and conn.lie_sent_at is None:
            conn.lie_sent_at = now
        if conn.next_frame >= len(conn.plan.frames) or conn.lie_sent_at is not None:
            conn.writes_done = True
            if conn.plan.hang_up:
                self.c.hung_up += 1
                self._close(conn, reset=conn.plan.index % 2 == 0)
            elif not conn.in_flight:
                self._close(conn)  # the answers came before the last piece was written: done
            else:
                self.sel.modify(conn.sock, selectors.EVENT_READ, conn)
        elif _awaited(conn) >= conn.plan.window:
            self.sel.modify(conn.sock, selectors.EVENT_READ, conn)

    # -- reading ----------------------------------------------------------------------------

    def _readable(self, conn: _Connection, now: float) -> None:
        try:
            data = conn.sock.recv(262144)
        except BlockingIOError:
            return
        except OSError:
            self._broker_closed(conn)
            return
        if not data:
            self._broker_closed(conn)
            return
        conn.last_progress = now
        self.c.bytes_received += len(data)
        if conn.skip:
            if len(data) <= conn.skip:
                conn.skip -= len(data)
                return
            data = data[conn.skip :]
            conn.skip = 0
        rx = conn.rx
        rx += data
        pos = 0
        while len(rx) - pos >= 8:
            (size,) = struct.unpack_from(">i", rx, pos)
            if size < 4:
                self.c.malformed += 1
                self.c.sample("malformed answers", f"connection {conn.plan.index}: size prefix {size}")
                self._close(conn)
                return
            if size > _DECODE_LIMIT:
                correlation = struct.unpack_from(">i", rx, pos + 4)[0]
                self._answered(conn, correlation, None)
                have = len(rx) - pos - 4
                if have >= size:
                    pos += 4 + size
                    continue
                conn.skip = size - have
                pos = len(rx)
                break
            if len(rx) - pos - 4 < size:
                break
            reply = memoryview(rx)[pos + 4 : pos + 4 + size]
            correlation = struct.unpack_from(">i", rx, pos + 4)[0]
            self._answered(conn, correlation, reply)
            reply.release()
            pos += 4 + size
            if conn.sock.fileno() < 0:
                return
        del rx[:pos]
        if conn.writes_done and not conn.in_flight and not conn.out:
            self._close(conn)  # every answer is in: done
        elif not conn.writes_done and _awaited(conn) < conn.plan.window:
            self.sel.modify(conn.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, conn)

    def _answered(self, conn: _Connection, correlation: int, reply: memoryview | None) -> None:
        in_flight = conn.in_flight
        position = next((i for i, f in enumerate(in_flight) if f.correlation_id == correlation), None)
        if position is None:
            if not conn.desync:
                self.c.unmatched += 1
                self.c.sample("answers nobody asked for",
                              f"connection {conn.plan.index}: correlation id {correlation}")
            return
        for _ in range(position):
            in_flight.popleft()
            self.c.passed_over += 1
        frame = in_flight.popleft()
        self.c.answered += 1
        if reply is not None and not conn.desync:
            problem = reply_problem(frame, reply)
            if problem:
                self.c.malformed += 1
                self.c.sample("malformed answers", f"connection {conn.plan.index}: {frame.label}: {problem}")

    # -- closing ----------------------------------------------------------------------------

    def _broker_closed(self, conn: _Connection) -> None:
        self.c.closed_by_broker += 1
        self.c.unanswered_at_close += len(conn.in_flight)
        self._close(conn)

    def _close(self, conn: _Connection, *, reset: bool = False) -> None:
        if conn.sock.fileno() < 0:
            return
        # Frames the plan never got to send go back to the run's budget.
        self.planned -= len(conn.plan.frames) - conn.next_frame
        waiting = next((f for f in conn.in_flight if not f.silent), None)
        if waiting is not None and conn.connected:
            try:
                self.c.left_waiting[conn.sock.getsockname()[1]] = (conn.plan.index, waiting)
            except OSError:
                pass
        self.conns.pop(conn.sock.fileno(), None)
        self.sel.unregister(conn.sock)
        if reset:  # an abortive close: the broker sees ECONNRESET, not EOF
            conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.sock.close()

    def _expire(self, now: float) -> None:
        for conn in list(self.conns.values()):
            if conn.lie_sent_at is not None and not conn.out and now - conn.lie_sent_at >= self.o.lie_grace_s:
                if all(f.silent or f.lie for f in conn.in_flight):  # only the lie (and no-answer frames) left
                    self.c.abandoned_lies += 1
                    self._close(conn)
                    continue
            idle = now - conn.last_progress
            if (conn.writes_done and not conn.out and conn.in_flight and idle >= self.o.lie_grace_s
                    and all(f.silent for f in conn.in_flight)):
                self.c.passed_over += len(conn.in_flight)  # acks=0 produces at the end: no answer is due
                self._close(conn)
                continue
            if conn.in_flight and idle >= self.o.reply_timeout_s:
                self.c.timed_out += 1
                self.c.sample("no answer in time", f"connection {conn.plan.index}: {conn.in_flight[0].label}")
                self._close(conn)
            elif not conn.connected and idle >= self.o.reply_timeout_s:
                self.c.connect_failures += 1
                self._close(conn)

    # -- the loop ---------------------------------------------------------------------------

    def run(self, tick: Callable[[], bool], tick_every_s: float) -> None:
        start = time.monotonic()
        deadline = start + self.o.time_limit_s
        next_expire = next_tick = start
        try:
            while True:
                now = time.monotonic()
                self._open_more(now, deadline)
                if not self.conns:
                    break
                for key, mask in self.sel.select(timeout=0.05):
                    conn = key.data
                    if mask & selectors.EVENT_READ:
                        self._readable(conn, now)
                    if mask & selectors.EVENT_WRITE and conn.sock.fileno() >= 0:
                        self._writable(conn, now)
                now = time.monotonic()
                if now >= next_expire:
                    self._expire(now)
                    next_expire = now + 0.05
                if now >= next_tick:
                    if not tick():
                        return
                    next_tick = time.monotonic() + tick_every_s
                if now >= deadline:
                    for conn in list(self.conns.values()):
                        self._close(conn)
                    return
        finally:
            for conn in list(self.conns.values()):
                self._close(conn)
            self.sel.close()


def run_engine(options: EngineOptions, mutator: Mutator, counters: Counters, *,
               tick: Callable[[], bool] = lambda: True, tick_every_s: float = 5.0) -> None:
    """Send `options.frames` frames (fewer at the time limit); `tick` runs every `tick_every_s`
    seconds and stops the run by returning False."""
    _Engine(options, mutator, counters).run(tick, tick_every_s)
