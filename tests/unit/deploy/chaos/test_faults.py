"""Fault schedules (a pure function of the seed) and fault injection against a fake rig: every
fault is applied, then healed, also when the run is cancelled mid-fault."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from deploy.chaos.faults import FAULTS, LINK_FAULTS, PROCESS_FAULTS, Step, inject, make_schedule, run_schedule


class FakeLink:
    name = "east-to-west"

    def __init__(self, events: list[str]) -> None:
        self.events = events
        self.toxics: dict[str, dict[str, Any]] = {}
        self.enabled = True

    def add_toxic(self, **kwargs: Any) -> None:
        self.toxics[kwargs["name"]] = kwargs
        self.events.append(f"add {kwargs['type']} {kwargs['stream']}")

    def destroy_toxic(self, toxic_name: str) -> bool:
        self.events.append(f"remove {self.toxics.pop(toxic_name)['type']}")
        return True

    def disable(self) -> None:
        self.enabled = False
        self.events.append("disable")

    def enable(self) -> None:
        self.enabled = True
        self.events.append("enable")


class FakeRig:
    def __init__(self) -> None:
        self.events: list[str] = []
        self.fake_link = FakeLink(self.events)

    @property
    def link(self) -> FakeLink:
        return self.fake_link

    async def crash_mirror(self) -> None:
        self.events.append("kill mirror")

    async def start_mirror(self) -> None:
        await trio.lowlevel.checkpoint()
        self.events.append("start mirror")

    async def stop_broker(self, side: str, *, hard: bool) -> None:
        self.events.append(f"{'kill' if hard else 'stop'} {side}")

    async def start_broker(self, side: str) -> None:
        self.events.append(f"start {side}")


def test_a_schedule_is_a_function_of_its_seed() -> None:
    a = make_schedule(7, LINK_FAULTS, 7, 14.0)
    assert a == make_schedule(7, LINK_FAULTS, 7, 14.0)
    assert a != make_schedule(8, LINK_FAULTS, 7, 14.0)
    assert sorted(s.fault for s in a) == sorted(LINK_FAULTS)  # each once before any repeats


def test_schedule_steps_fit_their_window_one_after_another() -> None:
    for seed in range(20):
        steps = make_schedule(seed, FAULTS, 12, 24.0)
        ends = 0.0
        for step in steps:
            assert step.at_s >= ends and step.duration_s > 0
            ends = step.at_s + step.duration_s
            if step.fault in PROCESS_FAULTS:
                assert step.duration_s <= 2.0
        assert ends <= 24.0
        assert set(s.fault for s in steps[: len(FAULTS)]) == set(FAULTS)


def test_schedule_refuses_unknown_faults_and_crowded_windows() -> None:
    with pytest.raises(ValueError, match="unknown faults"):
        make_schedule(1, ("latency", "meteor"), 2, 10.0)
    with pytest.raises(ValueError, match="do not fit"):
        make_schedule(1, ("latency",), 10, 2.0)


@pytest.mark.parametrize(("fault", "params", "expected"), [
    ("latency", {"latency": 50, "jitter": 5},
     ["add latency downstream", "add latency upstream", "remove latency", "remove latency"]),
    ("bandwidth", {"rate": 100}, ["add bandwidth downstream", "remove bandwidth"]),
    ("slicer", {"average_size": 64, "size_variation": 8, "delay": 10}, ["add slicer downstream", "remove slicer"]),
    ("limit_data", {"bytes": 1000}, ["add limit_data downstream", "remove limit_data"]),
    ("reset_peer", {"timeout": 10, "stream": "upstream"}, ["add reset_peer upstream", "remove reset_peer"]),
    ("timeout", {"timeout": 0, "stream": "downstream"}, ["add timeout downstream", "remove timeout"]),
    ("down", {}, ["disable", "enable"]),
    ("mirror-kill", {}, ["kill mirror", "start mirror"]),
    ("source-restart", {}, ["stop source", "start source"]),
    ("target-kill", {}, ["kill target", "start target"]),
])
async def test_each_fault_is_applied_then_healed(fault: str, params: dict[str, Any], expected: list[str]) -> None:
    rig = FakeRig()
    applied = await inject(Step(0, fault, 0.0, 0.01, params), rig)
    assert rig.events == expected
    assert applied.healed is not None and not rig.link.toxics and rig.link.enabled


async def test_a_cancelled_run_still_heals() -> None:
    rig = FakeRig()
    applied: list[Any] = []
    schedule = [Step(0, "down", 0.0, 3600.0), Step(1, "latency", 0.0, 1.0, {"latency": 1, "jitter": 0})]
    with trio.move_on_after(0.2):
        await run_schedule(schedule, rig, applied)
    assert rig.events == ["disable", "enable"]
    assert rig.link.enabled and not applied  # the interrupted step never reported
