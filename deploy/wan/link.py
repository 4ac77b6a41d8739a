"""Links: one shared pipe per direction between two datacenters, that many proxies cross.

Toxiproxy shapes each connection on its own: a bandwidth toxic of 100 Mbit/s gives every
connection 100 Mbit/s, so four connections across a "100 Mbit/s link" carry 400. A link here is
what a WAN link is: a bottleneck of ``bandwidth`` bytes/s per direction, shared by every
connection of every proxy attached to it, then ``latency ± jitter`` of propagation, with
netem's ``loss`` and ``reorder`` as a TCP stream would show them (see :class:`Lane`).

Sharing is fair between connections: a direction sends one quantum (a few ms of its rate) at a
time, and the connections waiting for the link take turns in the order they asked (trio's
``Lock`` hands itself to its waiters first come, first served), so every backlogged connection
gets the same share, whatever its reads' sizes; one connection alone gets all of it.

Bandwidth is spent when data enters the link, propagation is added after: a connection hands a
quantum to its delay line and asks for the next one at once, so a long link stays full (its
bandwidth-delay product in flight), as on a real WAN.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import trio

from deploy.wan.errors import bad_request

__all__ = ["LINK_FIELDS", "Link", "LinkDirection", "LinkSpec", "Lane", "parse_link", "update_link"]

#: A direction releases data in quanta of this much of its rate (bounded below by an Ethernet
#: frame and above by LINK_QUANTUM_MAX): fairness is per quantum, so a few ms keeps the shares
#: even at any time scale a client can see.
LINK_QUANTUM_SECONDS: Final = 0.005
LINK_QUANTUM_MIN: Final = 1500
LINK_QUANTUM_MAX: Final = 64 * 1024
#: After being idle a direction may send this much of its rate at once (timer slack).
LINK_BURST_SECONDS: Final = 0.01
#: TCP's segment size on an Ethernet path: netem drops packets, so the chance that a chunk
#: loses one grows with the number of segments it spans.
SEGMENT_BYTES: Final = 1448
#: Without latency a lost segment still costs the receiver a wait: the retransmission timer's
#: floor is 200 ms on Linux, but fast retransmit (three duplicate acks) usually repairs it within
#: a round trip; one ms is the floor of that round trip here.
MIN_ROUND_TRIP_SECONDS: Final = 0.001
DAY_MS: Final = 86_400_000
#: Every field of a link, as the API shows it (bandwidth in bytes/s, 0: unlimited; latency and
#: jitter in ms, one way; loss and reorder in percent, as netem takes them).
LINK_FIELDS: Final = ("name", "between", "bandwidth", "latency", "jitter", "loss", "reorder")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._~-]{0,254}")


@dataclass(frozen=True, slots=True)
class LinkSpec:
    """A link as configured: the same shaping in both directions."""

    name: str
    between: tuple[str, str]
    bandwidth: int = 0
    latency: int = 0
    jitter: int = 0
    loss: float = 0.0
    reorder: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "between": list(self.between), "bandwidth": self.bandwidth,
                "latency": self.latency, "jitter": self.jitter, "loss": self.loss, "reorder": self.reorder}


def _integer(fields: Mapping[str, Any], key: str, default: int, maximum: int) -> int:
    value = fields.get(key, default)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= maximum:
        raise bad_request(f"link {key} must be an integer between 0 and {maximum}, got {value!r:.40}")
    return value


def _percent(fields: Mapping[str, Any], key: str, default: float) -> float:
    value = fields.get(key, default)
    # NaN fails the range check (every comparison with it is false); 100% loss is a link that is
    # down, which disabling its proxies says better.
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 100:
        raise bad_request(f"link {key} must be a percentage from 0 up to (not including) 100, got {value!r:.40}")
    return float(value)


def _fields(body: object) -> Mapping[str, Any]:
    if not isinstance(body, Mapping):
        raise bad_request("link must be a JSON object")
    unknown = [key for key in body if key not in LINK_FIELDS]
    if unknown:
        raise bad_request(f"unknown link field {unknown[0]!r:.60} (known: {', '.join(LINK_FIELDS)})")
    return body


def _shaping(fields: Mapping[str, Any], base: LinkSpec) -> dict[str, Any]:
    latency = _integer(fields, "latency", base.latency, DAY_MS)
    jitter = _integer(fields, "jitter", base.jitter, DAY_MS)
    if jitter > latency:
        raise bad_request(f"link jitter {jitter} ms is larger than its latency {latency} ms")
    return {"bandwidth": _integer(fields, "bandwidth", base.bandwidth, 2**63 - 1), "latency": latency,
            "jitter": jitter, "loss": _percent(fields, "loss", base.loss),
            "reorder": _percent(fields, "reorder", base.reorder)}


def parse_link(body: object) -> LinkSpec:
    """A link from the body of ``POST /links``: ``name``, ``between`` (two datacenter names) and
    the shaping fields (see LINK_FIELDS), each defaulting to none.

    Error handling: raises ApiError 400 naming the field that is missing, unknown or out of range.
    """
    fields = _fields(body)
    name = fields.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise bad_request(f"link name must be letters, digits, '.', '_', '~' and '-', got {name!r:.60}")
    between = fields.get("between")
    if not isinstance(between, list) or len(between) != 2 or not all(isinstance(b, str) and b for b in between) \
            or between[0] == between[1]:
        raise bad_request(f"link between must be two different datacenter names, got {between!r:.60}")
    return LinkSpec(name, (between[0], between[1]), **_shaping(fields, LinkSpec(name, (between[0], between[1]))))


def update_link(spec: LinkSpec, body: object) -> LinkSpec:
    """Apply ``POST/PATCH /links/{name}``: the shaping fields given replace the current ones;
    name and between stay. Error handling: as parse_link."""
    fields = _fields(body)
    for key in ("name", "between"):
        if key in fields and fields[key] != spec.to_json()[key]:
            raise bad_request(f"a link's {key} cannot change (delete the link and make another)")
    return LinkSpec(spec.name, spec.between, **_shaping(fields, spec))


class LinkDirection:
    """One direction of a link: the bottleneck every connection crossing it shares.

    A token bucket kept as virtual time (``_free_at``: when everything granted so far has left),
    granted one quantum at a time under a fair lock; ``sent`` counts the bytes let through.
    """

    def __init__(self, source: str, dest: str) -> None:
        self.source = source
        self.dest = dest
        self.sent = 0
        self._turns = trio.Lock()
        self._free_at = -math.inf
        self.rate = 0.0
        self.quantum = LINK_QUANTUM_MAX

    def configure(self, bandwidth: int) -> None:
        self.rate = float(bandwidth)
        self.quantum = LINK_QUANTUM_MAX if not bandwidth else \
            int(min(max(bandwidth * LINK_QUANTUM_SECONDS, LINK_QUANTUM_MIN), LINK_QUANTUM_MAX))

    async def send(self, size: int) -> float:
        """Wait for this connection's turn and for ``size`` bytes (at most one quantum) to have
        left; returns the trio time they have."""
        if not self.rate:
            self.sent += size
            return trio.current_time()
        async with self._turns:
            now = trio.current_time()
            self._free_at = max(self._free_at, now - LINK_BURST_SECONDS) + size / self.rate
            await trio.sleep_until(self._free_at)
            self.sent += size
            return self._free_at


class Link:
    """A link between two datacenters: its spec and a direction each way."""

    def __init__(self, spec: LinkSpec) -> None:
        a, b = spec.between
        self.directions = {(a, b): LinkDirection(a, b), (b, a): LinkDirection(b, a)}
        self.spec = spec
        self.configure(spec)

    def configure(self, spec: LinkSpec) -> None:
        """Take new shaping; connections already open follow it from their next quantum."""
        self.spec = spec
        for direction in self.directions.values():
            direction.configure(spec.bandwidth)

    def direction(self, source: str, dest: str) -> LinkDirection:
        return self.directions[(source, dest)]

    def to_json(self) -> dict[str, Any]:
        return {**self.spec.to_json(),
                "sent": {f"{d.source}->{d.dest}": d.sent for d in self.directions.values()}}


class Lane:
    """One connection's way through one link direction: when each piece it sends arrives.

    netem on a TCP stream, as the receiving application sees it (bytes cannot be dropped from a
    stream, and TCP delivers them in order):

    - ``latency ± jitter``: each piece arrives that long after it left the bottleneck, but never
      before the piece sent ahead of it (TCP's receiver holds bytes until the gap before them is
      filled, so jitter shows as bunching, not reordering).
    - ``loss``: netem drops each packet with that chance; a piece spanning n segments loses at
      least one with chance ``1 - (1 - loss)^n``. TCP repairs it by retransmission, usually fast
      retransmit after one round trip (duplicate acks back, the segment out again), so the piece,
      and everything behind it on this connection, arrives a round trip (2 × latency, at least
      MIN_ROUND_TRIP_SECONDS) late. Not modelled: the retransmission timeout (200 ms or more) a
      tail loss can cost, and the sender's congestion window halving.
    - ``reorder``: netem sends that share of packets at once, ahead of the delayed ones. The
      application still gets bytes in order, so a reordered piece arrives together with the piece
      before it, earlier than its own latency would make it.
    """

    def __init__(self, link: Link, direction: LinkDirection, rng: random.Random) -> None:
        self.link = link
        self.direction = direction
        self._rng = rng
        self._last_due = -math.inf

    def due(self, left: float, size: int) -> float:
        """When a piece of ``size`` bytes that left the bottleneck at ``left`` arrives."""
        spec = self.link.spec
        rng = self._rng
        delay = spec.latency / 1000
        if spec.jitter:
            delay = max(0.0, delay + rng.uniform(-spec.jitter, spec.jitter) / 1000)
        if spec.reorder and rng.random() * 100 < spec.reorder:
            delay = 0.0
        if spec.loss:
            segments = max(1, -(-size // SEGMENT_BYTES))
            if rng.random() >= (1 - spec.loss / 100) ** segments:
                delay += max(2 * spec.latency / 1000, MIN_ROUND_TRIP_SECONDS)
        self._last_due = max(left + delay, self._last_due)
        return self._last_due
