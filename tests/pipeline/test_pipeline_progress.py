"""Long jobs show Spark's stage progress while a step runs (pipeline/progress.py), beside their
own "N of M offsets done" lines (checked in the export and copy tests)."""

from __future__ import annotations

import time
from pathlib import Path

from pyspark.sql import SparkSession

from pipeline.progress import stage_progress


def test_a_running_stage_is_reported_with_its_tasks(spark: SparkSession, tmp_path: Path) -> None:
    # The job's tasks wait (a bounded poll, in the Python workers) until the watcher has said
    # something: the job cannot end before its progress was reported, however slow the machine.
    marker = tmp_path / "said"
    lines: list[str] = []

    def say(line: str) -> None:
        lines.append(line)
        marker.touch()

    def task(i: int) -> bool:
        deadline = time.monotonic() + 60
        while not marker.exists():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    with stage_progress(spark, say, "test job", interval_s=0.05):
        seen = spark.sparkContext.parallelize(range(3), 3).map(task).collect()
    assert seen == [True, True, True], lines
    assert lines[0].startswith("test job: stage ") and lines[0].endswith("/3 tasks"), lines
    # Nothing more once the body is done: the watcher has stopped.
    count = len(lines)
    with stage_progress(spark, say, "idle", interval_s=0.05):
        pass
    assert len(lines) == count
