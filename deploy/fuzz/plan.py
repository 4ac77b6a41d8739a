"""What one fuzzing connection does, decided by (run seed, connection index) alone.

A plan is a handful of frames the broker should answer, then usually one or two that break
parsing (the broker closes the connection there, as Kafka does, so anything behind them would
never be read). How many frames are pipelined at once, and whether the fuzzer hangs up without
reading the answers, are part of the plan too. Because a plan depends only on the two numbers,
`python -m deploy.fuzz --replay INDEX --seed S` sends exactly one connection's frames again.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from deploy.fuzz.mutate import Frame, Mutator

__all__ = ["ConnectionPlan", "make_plan"]


@dataclass(frozen=True, slots=True)
class ConnectionPlan:
    index: int
    frames: tuple[Frame, ...]
    window: int  # frames sent before waiting for an answer
    hang_up: bool  # close right after the last frame is written, without reading the answers
    chunked: bool  # write frames in small pieces, so they arrive split across reads


def make_plan(mutator: Mutator, seed: int, index: int) -> ConnectionPlan:
    rng = random.Random((seed << 40) ^ index)
    # About six frames a connection: each connection costs the broker an accept, a task and a
    # close, so fewer, longer connections leave more of its time to the frames themselves.
    benign = rng.choices((0, 1, 2, 3, 4, 6, 10, 20), (6, 12, 14, 14, 12, 12, 10, 6))[0]
    fatal = rng.choices((0, 1, 2), (12, 80, 8))[0]
    frames: list[Frame] = []
    correlation = rng.randrange(1 << 20)
    for _ in range(benign):
        frames.append(mutator.benign(rng, correlation))
        correlation += 1
    for i in range(fatal):
        frames.append(mutator.fatal(rng, correlation, last=i == fatal - 1))
        correlation += 1
    if not frames:
        frames.append(mutator.benign(rng, correlation))
    window = rng.choice((1, 2, 4, 8, 16))
    return ConnectionPlan(index, tuple(frames), window, hang_up=rng.random() < 0.04, chunked=rng.random() < 0.05)
