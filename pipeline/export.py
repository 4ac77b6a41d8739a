"""Export a topic to Parquet, partitioned by date and hour (UTC) of the records' timestamps,
continuing where the last run stopped.

Layout of the output directory:

    DIR/date=2026-11-23/hour=18/<run>-part-....parquet   the data (Spark's file names, run-prefixed)
    DIR/_causeway_export.json                            offsets reached, per partition: the commit
    DIR/_staging/<run>/                                  a run in progress (readers skip "_" dirs)

A run plans each partition's range from the committed offsets (the log start for a partition it
has never seen) to the log end, then works through it in steps of at most `step_records` offsets
per partition. Each step is one Spark job writing into `_staging/<run>/`; then a journal (the
files to move and the offsets reached) is written atomically, the files are renamed into place,
and the offsets file is replaced last. A run killed at any point leaves either a staging dir
without a journal (thrown away by the next run: its records are read again) or a journal (rolled
forward by the next run: renames are idempotent), so the data directory never holds a step's
files without its offsets, nor the offsets without its files: no duplicates, no holes.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from broker.atomic_file import write_atomically
from broker.faults import crash_point
from pipeline.options import PipelineError, parse_read_options
from pipeline.planning import OffsetRange, plan_read
from pipeline.progress import stage_progress
from pipeline.source import FORMAT

__all__ = ["ExportResult", "OFFSETS_FILE", "export_topic"]

OFFSETS_FILE = "_causeway_export.json"
STAGING = "_staging"
JOURNAL = "_journal.json"
DEFAULT_STEP_RECORDS = 1_000_000


@dataclass(frozen=True, slots=True)
class ExportResult:
    planned: int  # offsets between the committed position and the log end when the run started
    exported: int  # records written (offsets minus compacted gaps and control records)
    steps: int
    offsets: dict[int, int]  # the next offset per partition, as committed


def _write_json_atomically(path: Path, data: object) -> None:
    write_atomically(path, json.dumps(data, indent=1, sort_keys=True))


def read_offsets(out_dir: Path, topic: str) -> dict[int, int]:
    """The committed next offset per partition ({} before the first run)."""
    path = out_dir / OFFSETS_FILE
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    if data.get("topic") != topic:
        raise PipelineError(f"{out_dir} holds an export of topic {data.get('topic')!r}, not {topic!r}")
    return {int(p): int(o) for p, o in data["offsets"].items()}


def _roll_forward(out_dir: Path, topic: str, say: Callable[[str], None]) -> None:
    """Finish what a killed run left: apply a journalled step, drop unjournalled staging."""
    staging = out_dir / STAGING
    if not staging.exists():
        return
    for run_dir in sorted(p for p in staging.iterdir() if p.is_dir()):
        journal = run_dir / JOURNAL
        if journal.exists():
            step = json.loads(journal.read_text())
            say(f"export {topic}: completing a step an earlier run journalled ({len(step['files'])} files)")
            _apply(out_dir, run_dir, step, topic)
        else:
            say(f"export {topic}: discarding an unfinished step an earlier run left in {run_dir}")
        shutil.rmtree(run_dir)


def _apply(out_dir: Path, run_dir: Path, step: dict[str, object], topic: str) -> None:
    files = step["files"]
    assert isinstance(files, list)
    for rel in files:
        src, dst = run_dir / "data" / rel, out_dir / rel
        if src.exists():  # else: moved before the kill
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.replace(src, dst)
    crash_point("pipeline-export-files-moved")  # the step's files in place, its offsets not yet
    _write_json_atomically(out_dir / OFFSETS_FILE, {"topic": topic, "offsets": step["offsets"]})


def export_topic(spark: SparkSession, bootstrap: str, topic: str, out_dir: str | Path, *,
                 step_records: int = DEFAULT_STEP_RECORDS, min_partitions: int | None = None,
                 say: Callable[[str], None] = print, options: dict[str, str] | None = None) -> ExportResult:
    """Export `topic` from its committed offsets to the log end into `out_dir` (see the module).

    Raises PipelineError for a missing topic, an unreachable cluster, or data no longer in the
    log (the committed offset below the log start: failOnDataLoss, set false to skip it).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _roll_forward(out, topic, say)
    committed = read_offsets(out, topic)
    base = {"kafka.bootstrap.servers": bootstrap, **(options or {})}
    probe = parse_read_options({**base, "subscribe": topic})
    # Where to start: the committed offsets, or the log start for partitions never exported.
    whole = plan_read(probe)
    starting = {r.partition: committed.get(r.partition, -2) for r in whole.ranges}
    opts = parse_read_options({**base, "subscribe": topic,
                               "startingOffsets": json.dumps({topic: {str(p): o for p, o in starting.items()}})})
    plan = plan_read(opts)
    for message in plan.data_loss:
        say(f"export {topic}: data loss: {message}")
    position = {r.partition: r.start for r in plan.ranges}
    ends = {r.partition: r.end for r in plan.ranges}
    planned = plan.records
    say(f"export {topic}: {planned} offsets to export in {len(plan.ranges)} partitions "
        f"(from {json.dumps(position, sort_keys=True)} to {json.dumps(ends, sort_keys=True)})")
    if planned == 0:
        offsets = {str(p): o for p, o in position.items()}
        _write_json_atomically(out / OFFSETS_FILE, {"topic": topic, "offsets": offsets})
        return ExportResult(0, 0, 0, dict(position))
    zone = spark.conf.get("spark.sql.session.timeZone") or "UTC"
    spark.conf.set("spark.sql.session.timeZone", "UTC")  # date and hour directories are UTC
    try:
        return _run_steps(spark, out, topic, base, position, ends, planned, step_records, min_partitions, say)
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)


def _run_steps(spark: SparkSession, out: Path, topic: str, base: dict[str, str], position: dict[int, int],
               ends: dict[int, int], planned: int, step_records: int, min_partitions: int | None,
               say: Callable[[str], None]) -> ExportResult:
    done_offsets = 0
    exported = 0
    steps = 0
    while any(position[p] < ends[p] for p in position):
        step = {p: OffsetRange(topic, p, position[p], min(ends[p], position[p] + step_records)) for p in position}
        run = f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:8]}"
        run_dir = out / STAGING / run
        label = f"export {topic} step {steps + 1}"
        read = {**base, "subscribe": topic,
                "startingOffsets": json.dumps({topic: {str(p): r.start for p, r in step.items()}}),
                "endingOffsets": json.dumps({topic: {str(p): r.end for p, r in step.items()}})}
        if min_partitions is not None:
            read["minPartitions"] = str(min_partitions)
        df = spark.read.format(FORMAT).options(**read).load()
        df = df.withColumn("date", F.date_format("timestamp", "yyyy-MM-dd")).withColumn(
            "hour", F.date_format("timestamp", "HH"))
        with stage_progress(spark, say, label):
            df.write.partitionBy("date", "hour").parquet(str(run_dir / "data"))
        data_dir = run_dir / "data"
        files = sorted(str(p.relative_to(data_dir)) for p in data_dir.rglob("*.parquet"))
        renamed = []
        for rel in files:  # run-prefixed names, so steps never overwrite each other's files
            path = Path(rel)
            target = path.with_name(f"{run}-{path.name}")
            (data_dir / path).rename(data_dir / target)
            renamed.append(str(target))
        rows = sum(pq.read_metadata(data_dir / rel).num_rows for rel in renamed)
        new_offsets = {str(p): r.end for p, r in step.items()}
        _write_json_atomically(run_dir / JOURNAL, {"files": renamed, "offsets": new_offsets, "records": rows})
        _apply(out, run_dir, {"files": renamed, "offsets": new_offsets}, topic)
        shutil.rmtree(run_dir)
        steps += 1
        exported += rows
        done_offsets += sum(r.size for r in step.values())
        for p, r in step.items():
            position[p] = r.end
        say(f"{label}: {done_offsets} of {planned} offsets done ({exported} records written)")
    return ExportResult(planned, exported, steps, dict(position))
