"""What every chaos matrix shares: scenarios run one after another, and the one-line-per-scenario
table `python -m deploy.chaos` prints."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol, TypeVar

from broker.tasks import leaves

__all__ = ["Outcome", "RunScenario", "failure_kept", "failure_text", "run_matrix", "table"]


class Outcome(Protocol):
    @property
    def passed(self) -> bool: ...

    @property
    def work_dir(self) -> Path | None: ...


class Named(Protocol):
    @property
    def name(self) -> str: ...


S = TypeVar("S", bound=Named)
S_contra = TypeVar("S_contra", bound=Named, contravariant=True)
R = TypeVar("R", bound=Outcome)
R_co = TypeVar("R_co", bound=Outcome, covariant=True)


class RunScenario(Protocol[S_contra, R_co]):
    """A matrix's `run_scenario`: one scenario in its own directory, never raising for what goes
    wrong inside it (the result says)."""

    def __call__(self, scenario: S_contra, /, *, seed: int, work_dir: Path) -> Awaitable[R_co]: ...


async def run_matrix(scenarios: Sequence[S], run_scenario: RunScenario[S, R], *, seed: int, work_dir: Path,
                     prefix: str = "", keep: bool = False,
                     on_result: Callable[[R], None] | None = None) -> list[R]:
    """`run_scenario` for each scenario in turn (scenario i uses seed + i, its directory
    `<prefix><i>-<name>` under `work_dir`); a passing scenario's directory is removed unless
    `keep`; `on_result` hears of each as it finishes."""
    results = []
    for i, scenario in enumerate(scenarios):
        result = await run_scenario(scenario, seed=seed + i, work_dir=work_dir / f"{prefix}{i:02d}-{scenario.name}")
        results.append(result)
        if result.passed and not keep and result.work_dir is not None:
            shutil.rmtree(result.work_dir, ignore_errors=True)
        if on_result is not None:
            on_result(result)
    return results


def failure_text(exc: BaseException) -> str:
    """A failed scenario's error for its result: each leaf exception (trio's groups unwrapped) as
    `Type: message`, joined by "; "."""
    return "; ".join(f"{type(e).__name__}: {e}" for e in leaves(exc))


class Failable(Protocol):
    error: str | None


@contextmanager
def failure_kept(result: Failable, name: str, log: logging.Logger) -> Iterator[None]:
    """Run a scenario's body: an exception it raises is logged to `log` and kept in
    `result.error`, not raised, as one scenario's failure must not stop a matrix."""
    try:
        yield
    except Exception as exc:
        log.exception("scenario %s failed", name)
        result.error = failure_text(exc)


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell, the first left-aligned, the rest right-aligned, and a
    rule under the header."""
    everything = [tuple(header), *(tuple(r) for r in rows)]
    widths = [max(len(row[i]) for row in everything) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths,
                                                                                                   strict=True)))
             for row in everything]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
