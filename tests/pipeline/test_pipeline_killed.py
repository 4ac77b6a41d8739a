"""A pipeline job killed midway (SIGKILL, at an exact point: `broker.faults.crash_point`, armed by
CAUSEWAY_CRASH_AT in a `causeway pipeline ...` process of its own) leaves nothing that looks
complete and is not, and the next run ends with exactly the records, once each:

- export, killed after a step's files were moved into place and before its offsets were
  written: every visible Parquet file is whole, and the next run completes the step from its
  journal instead of exporting it again;
- copy, its executor killed after its first batch: the target holds the start of the range, a
  rerun is refused saying where to go on, and going on from there gives an exact copy;
- audit, killed between writing its Parquet history file and renaming it into place: the
  history shows no run (the temporary file is hidden from Spark and pyarrow), and the next
  audit removes that file (its process is gone), saying so, and its run reads back whole.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
from pathlib import Path

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from deploy.broker_process import BrokerProcess
from deploy.cli import main
from pipeline.export import OFFSETS_FILE, export_topic
from tests.pipeline.cli import causeway_pipeline
from tests.pipeline.clients import Rec, consume_all, create_topic, produce

pytestmark = pytest.mark.compat

BASE_TS = 1_767_308_400_000  # 2026-01-01 23:00 UTC


def killed_at(point: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """`causeway pipeline ARGV` in a process (and a Spark JVM) of its own, with the crash point
    armed; the whole process group is gone when this returns."""
    return causeway_pipeline(*argv, env={"CAUSEWAY_CRASH_AT": point}, timeout_s=240)


def test_an_export_killed_after_moving_a_steps_files_is_completed_not_repeated(
        spark: SparkSession, bootstrap: str, tmp_path: Path) -> None:
    topic = "killed-export"
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, [{"partition": i % 2, "key": b"k%d" % i, "value": b"v%d" % i,
                                "timestamp": BASE_TS + i * 60_000} for i in range(120)])
    out = tmp_path / "out"
    run = killed_at("pipeline-export-files-moved", "export", "--bootstrap", bootstrap, "--topic", topic,
                    "--to", str(out), "--step-records", "20")
    assert run.returncode == -signal.SIGKILL, run.stdout + run.stderr
    assert "step 1: 40 of 120 offsets done" not in run.stdout  # killed inside step 1
    # What a reader sees now: whole Parquet files only (each one opens and has rows), and no
    # offsets committed for them yet; the step's journal waits for the next run.
    assert not (out / OFFSETS_FILE).exists()
    visible = [p for p in out.rglob("*.parquet") if not any(part.startswith("_") for part in p.relative_to(out).parts)]
    assert visible, "the kill came after the step's files were moved into place"
    assert sum(pq.read_metadata(p).num_rows for p in visible) == 40
    assert len(list((out / "_staging").glob("*/_journal.json"))) == 1

    said: list[str] = []
    result = export_topic(spark, bootstrap, topic, out, step_records=1000, say=said.append)
    assert any("completing a step an earlier run journalled" in line for line in said), said
    assert (result.planned, result.exported) == (80, 80)  # the killed step was not read again
    assert list((out / "_staging").iterdir()) == []  # the dead run's staging, completed, is gone
    rows = ds.dataset(out, format="parquet", partitioning="hive").to_table().select(
        ["partition", "offset", "value"]).to_pylist()
    got = sorted((r["partition"], r["offset"], r["value"]) for r in rows)
    assert got == [(r.partition, r.offset, r.value) for r in consume_all(bootstrap, topic, [0, 1])]
    assert json.loads((out / OFFSETS_FILE).read_text())["offsets"] == {"0": 60, "1": 60}


def content(recs: list[Rec]) -> list[tuple[object, ...]]:
    return [(r.partition, r.offset, r.key, r.value, r.timestamp_ms, r.headers) for r in recs]


def test_a_copy_whose_executor_is_killed_midway_is_refused_then_continued_exactly(
        spark: SparkSession, bootstrap: str, target_broker: BrokerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    topic = "killed-copy"
    target = target_broker.bootstrap
    create_topic(bootstrap, topic, 3)
    # 4 KiB values, 200 per partition: two produce batches (512 KiB each at most) per partition.
    produce(bootstrap, topic, [{"partition": i % 3, "key": b"k%d" % i, "value": bytes([i % 251]) * 4096,
                                "timestamp": BASE_TS + i, "headers": [("i", b"%d" % i)]} for i in range(600)],
            batch_size=65536)
    run = killed_at("pipeline-copy-batch-written", "copy", "--from", bootstrap, "--to", target, "--topic", topic)
    assert run.returncode == 1, run.stdout + run.stderr
    # Spark logs the task's failure at length; the command's own word is one line saying what happened.
    errors = [line for line in run.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and re.fullmatch(r"Error: a Spark task failed \(task \d\.0 of stage 0\.0\): "
                                             r"Python worker exited unexpectedly \(crashed\)", errors[0]), run.stderr
    partial = consume_all(target, topic, [0, 1, 2])
    assert 0 < len(partial) < 600, "the executor died after its first batch, before the range's end"
    source = consume_all(bootstrap, topic, [0, 1, 2])
    # What the target holds is the start of each partition's range, as the source has it.
    for p in range(3):
        held = [r for r in partial if r.partition == p]
        assert content(held) == content([r for r in source if r.partition == p][:len(held)])

    argv = ["pipeline", "copy", "--from", bootstrap, "--to", target, "--topic", topic]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert f"the target already holds {len(partial)} of the records of this range" in err
    found = re.search(r"continue with --starting-offsets '([^']+)'", err)
    assert found is not None, err
    assert main([*argv, "--starting-offsets", found.group(1)]) == 0
    capsys.readouterr()
    assert content(consume_all(target, topic, [0, 1, 2])) == content(source)


def test_an_audit_killed_before_renaming_its_history_file_leaves_no_run(
        spark: SparkSession, bootstrap: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    create_topic(bootstrap, "killed-audit", 2)
    create_topic(bootstrap, "east.killed-audit", 2)
    recs = [{"partition": i % 2, "value": b"v%d" % i, "timestamp": BASE_TS + i} for i in range(40)]
    produce(bootstrap, "killed-audit", recs)
    produce(bootstrap, "east.killed-audit", recs)
    history = tmp_path / "history"
    argv = ["audit", "--source-bootstrap", bootstrap, "--target-bootstrap", bootstrap, "--source-alias", "east",
            "--topics", "killed-audit", "--parquet", str(history)]
    run = killed_at("pipeline-audit-before-rename", *argv)
    assert run.returncode == -signal.SIGKILL, run.stdout + run.stderr
    left = list(history.iterdir())
    assert left and all(p.name.startswith("_") for p in left), left  # the torn run is hidden
    assert pq.read_table(history).num_rows == 0

    assert main(["pipeline", *argv]) == 0, capsys.readouterr()
    # The killed run's temporary file (its process is gone) is removed, and said so in one line.
    err = capsys.readouterr().err
    assert f"audit history {history}: removed 1 unfinished file(s) that killed runs left: {left[0].name}" in err
    assert [re.fullmatch(r"audit-\d+-[0-9a-f]+\.parquet", p.name) is not None for p in history.iterdir()] == [True]
    runs = spark.read.parquet(str(history)).collect()
    assert sorted((r.partition, r.clean, r.copied) for r in runs) == [(0, True, 20), (1, True, 20)]
    assert len({r.run_id for r in runs}) == 1 and pq.read_table(history).num_rows == 2  # the second run only
