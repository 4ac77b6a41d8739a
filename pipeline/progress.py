"""Spark's stage progress for a long job, on the job's own progress lines.

A job (export, copy, audit) says how many offsets it planned and, step by step, how many are
done; while one Spark job runs in between, `stage_progress` reports its active stages' tasks
every few seconds from a watcher thread (Spark's status tracker is safe to poll from another
thread), so a long step is seen to move.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["stage_progress"]

INTERVAL_S = 2.0


def _watch(spark: SparkSession, stop: threading.Event, say: Callable[[str], None], label: str,
           interval_s: float) -> None:
    tracker = spark.sparkContext.statusTracker()
    last = ""
    while not stop.wait(interval_s):
        parts = []
        for stage_id in tracker.getActiveStageIds():
            info = tracker.getStageInfo(stage_id)
            if info is not None:
                parts.append(f"stage {stage_id}: {info.numCompletedTasks}/{info.numTasks} tasks")
        line = ", ".join(parts)
        if line and line != last:  # a line only when something moved
            say(f"{label}: {line}")
            last = line


@contextmanager
def stage_progress(spark: SparkSession, say: Callable[[str], None], label: str, *,
                   interval_s: float = INTERVAL_S) -> Iterator[None]:
    """While the body runs, say `label: stage N: done/total tasks` whenever it changes."""
    stop = threading.Event()
    watcher = threading.Thread(target=_watch, args=(spark, stop, say, label, interval_s),
                               name=f"causeway-progress-{label}", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        watcher.join()
