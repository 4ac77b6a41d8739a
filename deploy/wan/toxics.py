"""Toxics: what the API accepts (specs) and what a connection runs (stages).

A :class:`ToxicSpec` is the validated, immutable description held by a proxy and shown by the
API, with Toxiproxy's names and units. A :class:`Stage` is the per-connection, per-direction state
that applies one toxic to the bytes flowing through; stages are chained, each handing its output
to the next, and the last hands bytes to the socket.

Units are Toxiproxy's: latency and jitter in milliseconds, bandwidth ``rate`` in KB/s (1 KB =
1000 bytes), ``slow_close.delay`` and the ``timeout`` of ``timeout`` and ``reset_peer`` in
milliseconds, ``slicer.delay`` in microseconds, ``limit_data.bytes`` in bytes.
"""

from __future__ import annotations

import math
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import trio

from deploy.wan.errors import INVALID_STREAM, INVALID_TOXIC_TYPE, ApiError, bad_request

__all__ = [
    "ATTRIBUTES",
    "MAXIMUMS",
    "MAX_NAME",
    "STREAMS",
    "Chunk",
    "CloseConnection",
    "ResetConnection",
    "Stage",
    "ToxicSpec",
    "make_stage",
    "parse_toxic",
    "update_toxic",
]

STREAMS: Final = ("upstream", "downstream")
#: Longest proxy or toxic name accepted: names are shown in every listing.
MAX_NAME: Final = 255

# Every toxic type with its attributes (all integers, defaulting to 0 as in Toxiproxy) and the
# smallest value each accepts.
ATTRIBUTES: Final[Mapping[str, Mapping[str, int]]] = {
    "latency": {"latency": 0, "jitter": 0},
    "bandwidth": {"rate": 0},
    "slow_close": {"delay": 0},
    "timeout": {"timeout": 0},
    "reset_peer": {"timeout": 0},
    # average_size 0 would slice forever.
    "slicer": {"average_size": 1, "size_variation": 0, "delay": 0},
    "limit_data": {"bytes": 0},
}

# The largest value each attribute accepts. Toxiproxy's attributes are Go int64s, so nothing
# above 2**63 - 1 is a valid value there either; durations are bounded further, to a day, so that
# every deadline the stages compute stays a finite float (a latency of 10**400 ms once raised
# OverflowError on the next connection and took the emulator down).
INT64_MAX: Final = 2**63 - 1
DAY_MS: Final = 86_400_000
MAXIMUMS: Final[Mapping[str, Mapping[str, int]]] = {
    "latency": {"latency": DAY_MS, "jitter": DAY_MS},
    "bandwidth": {"rate": INT64_MAX},
    "slow_close": {"delay": DAY_MS},
    "timeout": {"timeout": DAY_MS},
    "reset_peer": {"timeout": DAY_MS},
    "slicer": {"average_size": INT64_MAX, "size_variation": INT64_MAX, "delay": DAY_MS * 1000},  # delay in µs
    "limit_data": {"bytes": INT64_MAX},
}

# A bandwidth bucket may run this far ahead of its rate after being idle: small enough that a
# transfer of N bytes at rate R still takes about N/R, large enough to absorb timer slack.
BANDWIDTH_BURST_SECONDS: Final = 0.01
# Bandwidth releases data in slices of at most this much time at the configured rate, so a large
# read does not leave as one late burst.
BANDWIDTH_SLICE_SECONDS: Final = 0.05


@dataclass(frozen=True, slots=True, eq=False)
class ToxicSpec:
    """One toxic as configured on a proxy. Compared by identity: an update makes a new spec,
    which every open connection then treats as a new toxic (new state, new toxicity draw)."""

    name: str
    type: str
    stream: str
    toxicity: float
    attributes: Mapping[str, int]

    def to_json(self) -> dict[str, Any]:
        return {
            "attributes": dict(self.attributes),
            "name": self.name,
            "type": self.type,
            "stream": self.stream,
            "toxicity": self.toxicity,
        }


def _require_object(body: object, what: str) -> Mapping[str, Any]:
    if not isinstance(body, Mapping):
        raise bad_request(f"{what} must be a JSON object")
    return body


def _parse_toxicity(value: object) -> float:
    # NaN fails the range check too (every comparison with it is false).
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise bad_request(f"toxicity must be a number between 0 and 1, got {_show(value)}")
    if not 0.0 <= float(value) <= 1.0:
        raise bad_request(f"toxicity must be between 0 and 1, got {_show(value)}")
    return float(value)


def _show(value: object) -> str:
    """A value as an error message quotes it: short, whatever a client sent."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _parse_attributes(toxic_type: str, given: object, base: Mapping[str, int]) -> dict[str, int]:
    """Merge ``given`` over ``base``, checking names, types and bounds.

    Every value must be an integer (a float with an integral value counts, as JSON has one
    number type) within the attribute's bounds: never NaN, infinite, negative or beyond what the
    stages can compute with. The error names the attribute.
    """
    if given is None:
        given = {}
    if not isinstance(given, Mapping):
        raise bad_request(f"attributes must be a JSON object, got {_show(given)}")
    minimums, maximums = ATTRIBUTES[toxic_type], MAXIMUMS[toxic_type]
    merged = dict(base)
    for key, value in given.items():
        if key not in minimums:
            known = ", ".join(minimums)
            raise bad_request(f"unknown attribute {key!r} for toxic type {toxic_type!r} (known: {known})")
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad_request(f"attribute {key!r} must be an integer, got {_show(value)}")
        merged[key] = value
    # What the client sent first, so the error names the field it got wrong; then the defaults.
    for key in [*given, *(k for k in minimums if k not in given)]:
        if merged[key] < minimums[key]:
            raise bad_request(f"attribute {key!r} of a {toxic_type} toxic must be >= {minimums[key]}, "
                              f"got {merged[key]}")
        if merged[key] > maximums[key]:
            raise bad_request(f"attribute {key!r} of a {toxic_type} toxic must be <= {maximums[key]}, "
                              f"got {_show(merged[key])}")
    return merged


def parse_toxic(body: object) -> ToxicSpec:
    """Build a spec from the body of ``POST /proxies/{name}/toxics``.

    Error handling: raises :class:`ApiError` with status 400 for a body that is not an object,
    an unknown type or stream, a toxicity outside 0..1, or attributes that are unknown, not
    integers or out of range.
    """
    fields = _require_object(body, "toxic")
    toxic_type = fields.get("type")
    if not isinstance(toxic_type, str) or toxic_type not in ATTRIBUTES:
        known = ", ".join(ATTRIBUTES)
        raise ApiError(f"{INVALID_TOXIC_TYPE}: {toxic_type!r} (known: {known})", 400)
    stream = fields.get("stream", "downstream")
    if not isinstance(stream, str) or stream.lower() not in STREAMS:
        raise ApiError(INVALID_STREAM, 400)
    stream = stream.lower()
    name = fields.get("name") or f"{toxic_type}_{stream}"
    if not isinstance(name, str):
        raise bad_request(f"name must be a string, got {_show(name)}")
    if len(name) > MAX_NAME:
        raise bad_request(f"name must be at most {MAX_NAME} characters, got {len(name)}")
    toxicity = _parse_toxicity(fields.get("toxicity", 1.0))
    zeros = {key: 0 for key in ATTRIBUTES[toxic_type]}
    attributes = _parse_attributes(toxic_type, fields.get("attributes"), zeros)
    return ToxicSpec(name=name, type=toxic_type, stream=stream, toxicity=toxicity, attributes=attributes)


def update_toxic(spec: ToxicSpec, body: object) -> ToxicSpec:
    """Apply the body of ``POST/PATCH /proxies/{name}/toxics/{toxic}``: attributes given are
    merged over the current ones, ``toxicity`` replaces the current one; name, type and stream
    stay (as in Toxiproxy).

    Error handling: raises :class:`ApiError` (400) as :func:`parse_toxic` does.
    """
    fields = _require_object(body, "toxic")
    toxicity = _parse_toxicity(fields["toxicity"]) if "toxicity" in fields else spec.toxicity
    attributes = _parse_attributes(spec.type, fields.get("attributes"), spec.attributes)
    return ToxicSpec(name=spec.name, type=spec.type, stream=spec.stream, toxicity=toxicity, attributes=attributes)


# --- what a connection runs -------------------------------------------------------------------


class CloseConnection(Exception):
    """A toxic ends the whole connection (both sockets, orderly close)."""


class ResetConnection(CloseConnection):
    """A toxic ends the whole connection with a TCP RST (SO_LINGER 0)."""


class Chunk:
    """Bytes read from one side, with the trio time they were read at."""

    __slots__ = ("arrival", "data")

    def __init__(self, data: bytes, arrival: float) -> None:
        self.data = data
        self.arrival = arrival


Forward = Callable[[Chunk], Awaitable[None]]
ForwardEof = Callable[[], Awaitable[None]]


class Stage:
    """One toxic applied to one direction of one connection. The default passes all through."""

    #: trio time at which :meth:`on_deadline` must run even if no data flows (inf: never).
    deadline: float = math.inf

    async def on_data(self, chunk: Chunk, forward: Forward) -> None:
        await forward(chunk)

    async def on_eof(self, forward_eof: ForwardEof) -> None:
        await forward_eof()

    def on_deadline(self) -> None:
        raise CloseConnection


class LatencyStage(Stage):
    """Holds each chunk until it was read ``latency ± jitter`` ms ago, keeping order.

    Chunks are timed from when they were read, not from when the previous one left, so a long
    link stays full: many chunks are in flight at once, as on a real WAN.
    """

    def __init__(self, latency_ms: int, jitter_ms: int, rng: random.Random) -> None:
        self._latency = latency_ms / 1000
        self._jitter = jitter_ms / 1000
        self._rng = rng
        self._last_due = -math.inf

    def delay(self) -> float:
        if self._jitter:
            return max(0.0, self._latency + self._rng.uniform(-self._jitter, self._jitter))
        return self._latency

    async def on_data(self, chunk: Chunk, forward: Forward) -> None:
        # Jitter never reorders bytes on a TCP stream: a chunk leaves no earlier than the last.
        due = max(chunk.arrival + self.delay(), self._last_due)
        self._last_due = due
        await trio.sleep_until(due)
        # Later latency toxics in the chain add to this one.
        chunk.arrival = due
        await forward(chunk)


class TokenBucket:
    """A bucket filled at ``rate`` bytes/s holding at most ``burst`` seconds' worth.

    Kept as virtual time: ``_free_at`` is when everything granted so far has drained.
    """

    def __init__(self, rate: float, burst: float) -> None:
        self.rate = rate
        self.burst = burst
        self._free_at = -math.inf

    def reserve(self, size: int, now: float) -> float:
        """Grant ``size`` bytes and return the time at which they may be sent."""
        self._free_at = max(self._free_at, now - self.burst) + size / self.rate
        return self._free_at


class BandwidthStage(Stage):
    """Limits the direction to ``rate`` KB/s with a token bucket."""

    def __init__(self, rate_kb: int) -> None:
        rate = rate_kb * 1000
        self._bucket = TokenBucket(rate, BANDWIDTH_BURST_SECONDS)
        self._slice = max(1, int(rate * BANDWIDTH_SLICE_SECONDS))

    async def on_data(self, chunk: Chunk, forward: Forward) -> None:
        data = chunk.data
        for start in range(0, len(data), self._slice):
            part = data[start : start + self._slice] if len(data) > self._slice else data
            await trio.sleep_until(self._bucket.reserve(len(part), trio.current_time()))
            await forward(Chunk(part, chunk.arrival))


class SlowCloseStage(Stage):
    """Delays passing on the end of stream by ``delay`` ms."""

    def __init__(self, delay_ms: int) -> None:
        self._delay = delay_ms / 1000

    async def on_eof(self, forward_eof: ForwardEof) -> None:
        await trio.sleep(self._delay)
        await forward_eof()


class TimeoutStage(Stage):
    """Lets no data through; closes the connection ``timeout`` ms after taking effect
    (0: never, the connection just hangs)."""

    def __init__(self, timeout_ms: int) -> None:
        if timeout_ms > 0:
            self.deadline = trio.current_time() + timeout_ms / 1000

    async def on_data(self, chunk: Chunk, forward: Forward) -> None:
        return None


class ResetPeerStage(Stage):
    """On the first data (or end of stream), waits ``timeout`` ms and resets the connection."""

    def __init__(self, timeout_ms: int) -> None:
        self._timeout = timeout_ms / 1000

    async def on_data(self, chunk: Chunk, forward: Forward) -> None:
        await trio.sleep(self._timeout)
        raise ResetConnection

    async def on_eof(self, forward_eof: ForwardEof) -> None:
        await trio.sleep(self._timeout)
        raise ResetConnection


def slice_sizes(total: int, average: int, variation: int, rng: random.Random) -> list[int]:
    """Sizes of the slices ``total`` bytes are cut into: ``average ± variation``, each >= 1,
    summing to ``total``."""
    sizes: list[int] = []
    left = total
    while left > 0:
        size = average + rng.randint(-variation, variation) if variation else average
        size = min(max(1, size), left)
        sizes.append(size)
        left -= size
    return sizes


class SlicerStage(Stage):
    """Cuts data into small pieces sent ``delay`` µs apart."""

    def __init__(self, average_size: int, size_variation: int, delay_us: int, rng: random.Random) -> None:
        self._average = average_size
        self._variation = size_variation
        self._delay = delay_us / 1_000_000
        self._rng = rng

    async def on_data(self, chunk: Chunk, forward: Forward) -> None:
        data = memoryview(chunk.data)
        start = 0
        for size in slice_sizes(len(data), self._average, self._variation, self._rng):
            if start and self._delay:
                await trio.sleep(self._delay)
            await forward(Chunk(bytes(data[start : start + size]), chunk.arrival))
            start += size


class LimitDataStage(Stage):
    """Passes at most ``bytes`` bytes, then closes the connection."""

    def __init__(self, limit: int) -> None:
        self._remaining = limit

    async def on_data(self, chunk: Chunk, forward: Forward) -> None:
        if self._remaining <= 0:
            raise CloseConnection
        if len(chunk.data) > self._remaining:
            chunk.data = chunk.data[: self._remaining]
        self._remaining -= len(chunk.data)
        await forward(chunk)
        if self._remaining <= 0:
            raise CloseConnection


def make_stage(spec: ToxicSpec, rng: random.Random) -> Stage | None:
    """The stage running ``spec`` on a new connection, or None when the toxicity draw says this
    connection is spared (each connection draws once per toxic, as in Toxiproxy)."""
    if rng.random() >= spec.toxicity:
        return None
    a = spec.attributes
    match spec.type:
        case "latency":
            return LatencyStage(a["latency"], a["jitter"], rng)
        case "bandwidth":
            # Toxiproxy passes data unthrottled at rate 0.
            return BandwidthStage(a["rate"]) if a["rate"] > 0 else Stage()
        case "slow_close":
            return SlowCloseStage(a["delay"])
        case "timeout":
            return TimeoutStage(a["timeout"])
        case "reset_peer":
            return ResetPeerStage(a["timeout"])
        case "slicer":
            return SlicerStage(a["average_size"], a["size_variation"], a["delay"], rng)
        case "limit_data":
            return LimitDataStage(a["bytes"])
    raise AssertionError(f"unhandled toxic type {spec.type}")
