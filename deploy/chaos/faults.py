"""Named faults with bounded durations, and a seeded schedule of them.

Link faults act on the WAN link's proxy through the Toxiproxy API (deploy.wan.client), so they
work the same against Causeway's emulator (`causeway wan`) and against a real Toxiproxy:

    latency      latency ± jitter, both directions
    bandwidth    a rate cap (KB/s) on what the source sends back
    down         the proxy disabled: every connection dropped, new ones refused
    reset_peer   every connection reset (TCP RST) on its first data after a delay
    slicer       data cut into small pieces, with a delay between them
    timeout      no data passes; connections closed after a delay (or held open)
    limit_data   connections closed after a number of bytes

Process faults act on the rig's processes:

    mirror-kill      SIGKILL the mirror, restart it after a pause
    source-restart   SIGTERM the source broker, start it again on the same ports
    target-restart   the same for the target broker
    source-kill      SIGKILL the source broker, start it again
    target-kill      the same for the target broker

Every fault lasts `duration_s` and is then healed, also when the run is cancelled. A schedule is
a pure function of its seed: the same seed gives the same faults, parameters and times.
"""

from __future__ import annotations

import functools
import logging
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import trio

__all__ = [
    "FAULTS",
    "LINK_FAULTS",
    "PROCESS_FAULTS",
    "Applied",
    "FaultTarget",
    "Step",
    "call_blocking",
    "inject",
    "make_schedule",
    "run_schedule",
]

log = logging.getLogger(__name__)

LINK_FAULTS = ("latency", "bandwidth", "down", "reset_peer", "slicer", "timeout", "limit_data")
PROCESS_FAULTS = ("mirror-kill", "source-restart", "target-restart", "source-kill", "target-kill")
FAULTS = LINK_FAULTS + PROCESS_FAULTS

API_TIMEOUT_S = 15.0  # one call to the Toxiproxy API
T = TypeVar("T")


class LinkProxy(Protocol):
    """The part of deploy.wan.client.WanProxy (named as toxiproxy-python's Proxy) that faults use."""

    name: str

    def add_toxic(self, *, name: str, type: str, stream: str = ...,  # noqa: A002 - the API's word
                  toxicity: float = ..., attributes: dict[str, Any] | None = ...) -> None: ...
    def destroy_toxic(self, toxic_name: str) -> bool: ...
    def disable(self) -> None: ...
    def enable(self) -> None: ...


class FaultTarget(Protocol):
    """What faults act on: the link's proxy and the processes of a chaos rig."""

    @property
    def link(self) -> LinkProxy: ...

    async def crash_mirror(self) -> None:
        """SIGKILL the mirror and wait until it is gone."""

    async def start_mirror(self) -> None:
        """Start the mirror and wait for its ready line."""

    async def stop_broker(self, side: str, *, hard: bool) -> None:
        """Stop the `side` ("source" or "target") broker: SIGKILL when `hard`, else SIGTERM."""

    async def start_broker(self, side: str) -> None:
        """Start the `side` broker again on its ports and wait for its ready line."""


@dataclass(frozen=True)
class Step:
    """One fault of a schedule: starts `at_s` after the schedule starts, lasts `duration_s`."""

    index: int
    fault: str
    at_s: float
    duration_s: float
    params: Mapping[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        params = ", ".join(f"{k}={v}" for k, v in self.params.items())
        return f"{self.fault}({params}) at {self.at_s:.1f}s for {self.duration_s:.1f}s"


@dataclass
class Applied:
    """What happened when a step ran: times relative to trio's clock."""

    step: Step
    started: float
    healed: float | None = None
    error: str | None = None


def _params(fault: str, rng: random.Random) -> dict[str, Any]:
    if fault == "latency":
        latency = rng.randint(20, 250)
        return {"latency": latency, "jitter": rng.randint(0, latency // 2)}
    if fault == "bandwidth":
        return {"rate": rng.randint(20, 300)}  # KB/s
    if fault == "reset_peer":
        return {"timeout": rng.randint(0, 300), "stream": rng.choice(("downstream", "upstream"))}
    if fault == "slicer":
        size = rng.randint(16, 512)
        return {"average_size": size, "size_variation": rng.randint(0, size // 2), "delay": rng.randint(0, 500)}
    if fault == "timeout":
        return {"timeout": rng.choice((0, rng.randint(200, 2000))), "stream": rng.choice(("downstream", "upstream"))}
    if fault == "limit_data":
        return {"bytes": rng.randint(512, 65536)}
    return {}


def make_schedule(seed: int, faults: Sequence[str], steps: int, window_s: float, *,
                  min_duration_s: float = 0.5, max_duration_s: float = 3.0) -> list[Step]:
    """`steps` faults spread over `window_s` seconds, one after another (never overlapping),
    drawn from `faults` so that each appears before any repeats; parameters and times from
    `random.Random(seed)`. Process faults' durations are their downtime (at most 2 s).

    Raises ValueError for an unknown fault name or a window too short for the steps.
    """
    unknown = [f for f in faults if f not in FAULTS]
    if unknown:
        raise ValueError(f"unknown faults {unknown}; known: {', '.join(FAULTS)}")
    if steps and not faults:
        raise ValueError("a schedule of faults needs at least one fault")
    slot = window_s / steps if steps else window_s
    if steps and slot < min_duration_s * 1.5:
        raise ValueError(f"{steps} faults do not fit in {window_s:.1f}s")
    rng = random.Random(seed)
    order: list[str] = []
    while len(order) < steps:
        order += rng.sample(list(faults), len(faults))
    out = []
    for i, fault in enumerate(order[:steps]):
        longest = min(max_duration_s, slot * 0.7)
        if fault in PROCESS_FAULTS:
            longest = min(longest, 2.0)
        duration = round(rng.uniform(min(min_duration_s, longest), longest), 2)
        at = round(i * slot + rng.uniform(0, slot - duration), 2)
        out.append(Step(i, fault, at, duration, _params(fault, rng)))
    return out


async def call_blocking(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """A WAN API call blocks (one HTTP request): run it in a thread, bounded."""
    with trio.fail_after(API_TIMEOUT_S):
        return await trio.to_thread.run_sync(functools.partial(fn, *args, **kwargs), abandon_on_cancel=True)


async def inject(step: Step, target: FaultTarget) -> Applied:
    """Apply one fault, hold it for its duration, heal it (healing is shielded from
    cancellation, so a cancelled run still leaves the link clean and the processes running).

    Raises what the Toxiproxy API or the rig raise (e.g. trio.TooSlowError after 15 s).
    """
    applied = Applied(step, trio.current_time())
    link = target.link
    p = dict(step.params)
    name = f"chaos{step.index}_{step.fault}"
    heal: list[Callable[[], Any]] = []  # async callables, run in reverse order

    log.info("fault %d: %s", step.index, step.describe())
    try:
        if step.fault == "latency":
            for stream in ("downstream", "upstream"):
                toxic = f"{name}_{stream}"
                await call_blocking(link.add_toxic, name=toxic, type="latency", stream=stream,
                            attributes={"latency": p["latency"], "jitter": p["jitter"]})
                heal.append(functools.partial(call_blocking, link.destroy_toxic, toxic))
        elif step.fault in ("bandwidth", "limit_data", "slicer"):
            attributes = {k: v for k, v in p.items() if k != "stream"}
            await call_blocking(link.add_toxic, name=name, type=step.fault, stream="downstream", attributes=attributes)
            heal.append(functools.partial(call_blocking, link.destroy_toxic, name))
        elif step.fault in ("reset_peer", "timeout"):
            await call_blocking(link.add_toxic, name=name, type=step.fault, stream=p["stream"],
                        attributes={"timeout": p["timeout"]})
            heal.append(functools.partial(call_blocking, link.destroy_toxic, name))
        elif step.fault == "down":
            await call_blocking(link.disable)
            heal.append(functools.partial(call_blocking, link.enable))
        elif step.fault == "mirror-kill":
            await target.crash_mirror()
            heal.append(target.start_mirror)
        elif step.fault in ("source-restart", "target-restart", "source-kill", "target-kill"):
            side, _, how = step.fault.partition("-")
            await target.stop_broker(side, hard=how == "kill")
            heal.append(functools.partial(target.start_broker, side))
        else:
            raise ValueError(f"unknown fault {step.fault!r}")
        await trio.sleep(step.duration_s)  # the fault's duration, not a wait for anything
    finally:
        with trio.CancelScope(shield=True):
            for undo in reversed(heal):
                await undo()
        applied.healed = trio.current_time()
        log.info("fault %d healed after %.1fs", step.index, applied.healed - applied.started)
    return applied


async def run_schedule(schedule: Sequence[Step], target: FaultTarget, applied: list[Applied]) -> None:
    """Run the steps at their times (relative to now), one at a time, appending to `applied`
    as each one heals. Raises the first fault's failure."""
    start = trio.current_time()
    for step in schedule:
        await trio.sleep_until(start + step.at_s)
        applied.append(await inject(step, target))
