"""`causeway pipeline copy` between two real brokers: every record of 3 partitions arrives
identical (key, value, headers, timestamp) and in order, partition p to partition p, the target
topic created with the source's partition count and configs; a rerun of the same range is
refused naming what it would duplicate; a continuation range copies; a missing topic, an
unreachable cluster and a target with fewer partitions are one-line errors."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator

import pyarrow as pa
import pytest
import trio
from pyspark.sql import SparkSession

from broker.client import admin, open_client
from deploy.broker_process import BrokerProcess
from deploy.cli import main
from tests.pipeline.brokers import delete_before
from tests.pipeline.clients import Rec, consume_all, create_topic, produce

BASE_TS = 1_700_000_000_000
TEN_YEARS_MS = str(10 * 365 * 86_400_000)


def records(partition: int, first: int, n: int) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for i in range(first, first + n):
        # Timestamps out of order within a partition too: a copy must not re-stamp or sort them.
        record: dict[str, object] = {"partition": partition, "timestamp": BASE_TS + partition * 10_000 + (i * 37) % 101,
                                     "key": None if i % 5 == 0 else b"k%d-%d" % (partition, i),
                                     "value": b"v%d-%d" % (partition, i) * (1 + i % 4)}
        if i % 3 == 0:
            record["headers"] = [("trace", b"t%d" % i), ("empty", None)]
        out.append(record)
    return out


def content(recs: list[Rec]) -> list[tuple[object, ...]]:
    """What a copy keeps: per partition, in order (offsets equal too when the target started empty)."""
    return [(r.partition, r.offset, r.key, r.value, r.timestamp_ms, r.headers) for r in recs]


def topic_configs(bootstrap: str, topic: str) -> dict[str, str | None]:
    async def go() -> dict[str, str | None]:
        async with open_client(bootstrap) as client:
            with trio.fail_after(30):
                entries = await admin.describe_configs(client, topic)
        return {e.name: e.value for e in entries.values() if not e.is_default}

    return trio.run(go)


def test_copy_keeps_every_record_and_order_and_refuses_a_rerun(
        spark: SparkSession, bootstrap: str, target_broker: BrokerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    topic = "copy-orders"
    target = target_broker.bootstrap
    # A retention of its own that the copy must carry over, and long enough (ten years) for the
    # records' 2023 timestamps: a shorter one lets the broker's retention check (every 5 minutes)
    # empty the source partitions under the test when it runs late in a long session.
    create_topic(bootstrap, topic, 3, {"retention.ms": TEN_YEARS_MS, "cleanup.policy": "delete"})
    for p, n in ((0, 60), (1, 45), (2, 30)):
        produce(bootstrap, topic, records(p, 0, n))
    argv = ["pipeline", "copy", "--from", bootstrap, "--to", target, "--topic", topic, "--step-records", "25"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"copy {topic} -> {topic}: created {topic} on {target} with 3 partitions"
    assert lines[1].startswith(f"copy {topic} -> {topic}: 135 offsets to copy in 3 partitions")
    assert any(line.startswith(f"copy {topic} -> {topic} step 3: 135 of 135 offsets done (135 records written); ")
               and line.endswith(" offsets/s, ETA 0 s") for line in lines), lines
    assert lines[-1] == f"copy {topic} -> {topic}: done: 135 records in 3 step(s)"
    source = consume_all(bootstrap, topic, [0, 1, 2])
    assert len(source) == 135
    assert content(consume_all(target, topic, [0, 1, 2])) == content(source)
    assert topic_configs(target, topic)["retention.ms"] == TEN_YEARS_MS

    # The same range again: every record would be written twice. Refused, naming how many.
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"Error: copy {topic} -> {topic}: the target already holds 135 of the records of this "
                          f"range ({topic}-0: 60, {topic}-1: 45, {topic}-2: 30)")
    # They are the range's first records (what an interrupted copy leaves): where to go on is said.
    resume = json.dumps({topic: {"0": 60, "1": 45, "2": 30}}, separators=(",", ":"))
    assert f"continue with --starting-offsets '{resume}'" in err
    assert len(consume_all(target, topic, [0, 1, 2])) == 135

    # New records at the source, copied from where the last copy ended: nothing is refused.
    produce(bootstrap, topic, records(1, 45, 10))
    start = json.dumps({topic: {"0": 60, "1": 45, "2": 30}})
    assert main(argv + ["--starting-offsets", start]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"copy {topic} -> {topic}: done: 10 records in 1 step(s)"
    assert content(consume_all(target, topic, [0, 1, 2])) == content(consume_all(bootstrap, topic, [0, 1, 2]))

    # Allowed duplicates: the last 5 of partition 2 once more, said so, and appended in order.
    from pipeline.copy import copy

    said: list[str] = []
    result = copy(spark, bootstrap, target, topic, starting_offsets=json.dumps({topic: {"0": 60, "1": 55, "2": 25}}),
                  allow_duplicates=True, say=said.append)
    assert result.duplicated == {2: 5} and result.copied == 5
    again = [r for r in consume_all(target, topic, [2])]
    assert [r.value for r in again[30:]] == [r.value for r in again[25:30]]


def test_a_copy_run_from_another_thread_writes_with_its_sink(
        spark: SparkSession, bootstrap: str, target_broker: BrokerProcess) -> None:
    """The copy's sink is found from a thread that did not make the session: Spark looks a
    Python data source up for a write in the calling thread's active session, and py4j runs
    this thread's calls on a JVM thread of its own, which has none (DATA_SOURCE_NOT_FOUND)."""
    from pipeline.copy import CopyResult, copy

    topic = "copy-threaded"
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, records(0, 0, 20) + records(1, 0, 10))
    results: list[CopyResult | BaseException] = []

    def run() -> None:
        try:
            results.append(copy(spark, bootstrap, target_broker.bootstrap, topic, say=lambda line: None))
        except BaseException as exc:  # handed to the test's thread, which fails with it
            results.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
    [result] = results
    if isinstance(result, BaseException):
        raise result
    assert result.copied == 30
    target = target_broker.bootstrap
    assert content(consume_all(target, topic, [0, 1])) == content(consume_all(bootstrap, topic, [0, 1]))


def test_copy_errors_are_one_line(bootstrap: str, target_broker: BrokerProcess,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    target = target_broker.bootstrap
    assert main(["pipeline", "copy", "--from", bootstrap, "--to", target, "--topic", "copy-missing"]) == 1
    assert capsys.readouterr().err.strip() == (f"Error: topic 'copy-missing' does not exist on the source "
                                               f"cluster {bootstrap}")

    topic = "copy-narrow"
    create_topic(bootstrap, topic, 3)
    create_topic(target, topic, 2)
    produce(bootstrap, topic, records(2, 0, 3))
    assert main(["pipeline", "copy", "--from", bootstrap, "--to", target, "--topic", topic]) == 1
    assert capsys.readouterr().err.strip().startswith(
        f"Error: target topic '{topic}' on cluster {target} has 2 partitions, fewer than the 3 of '{topic}'")

    with socket.socket() as s:  # bound, not listening: nothing answers there
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
        assert main(["pipeline", "copy", "--from", bootstrap, "--to", dead, "--topic", topic,
                     "--option", "kafka.request.timeout.ms=1500"]) == 1
    assert f"Error: cluster {dead} is unreachable" in capsys.readouterr().err


def test_a_retried_task_skips_what_its_failed_attempt_wrote(target_broker: BrokerProcess) -> None:
    """The executor's writer as Spark runs it: a first attempt that wrote 10 of 30 rows and died,
    then the retried attempt of the same rows: the partition holds each row once, in order."""
    from pipeline.copy import produce_rows

    target, topic = target_broker.bootstrap, "copy-retried"
    create_topic(target, topic, 1)
    schema = pa.schema([("partition", pa.int32()), ("key", pa.binary()), ("value", pa.binary()),
                        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
                        ("ts", pa.int64())])
    rows = [{"partition": 0, "key": b"k%d" % i, "value": b"v%d" % i, "headers": [{"key": "i", "value": b"%d" % i}],
             "ts": BASE_TS + i} for i in range(30)]

    def batches(part: list[dict[str, object]]) -> Iterator[pa.RecordBatch]:
        for i in range(0, len(part), 7):  # several Arrow batches, as Spark hands them over
            yield pa.RecordBatch.from_pylist(part[i:i + 7], schema=schema)

    assert trio.run(produce_rows, batches(rows[:10]), target, topic, 10.0, {0: 0}, False) == 10
    assert trio.run(produce_rows, batches(rows), target, topic, 10.0, {0: 0}, True) == 20
    got = consume_all(target, topic, [0])
    assert [(r.key, r.value, r.timestamp_ms, r.headers) for r in got] == [
        (r["key"], r["value"], r["ts"], (("i", r["key"][1:]),)) for r in rows]  # type: ignore[index]
    # A first attempt writes everything it is given, whatever the log end: it has no earlier try.
    assert trio.run(produce_rows, batches(rows[:3]), target, topic, 10.0, {0: 0}, False) == 3


def test_the_target_is_created_with_the_data_configs_not_the_clock_ones(bootstrap: str,
                                                                        target_broker: BrokerProcess) -> None:
    """A LogAppendTime source: its records' timestamps are kept at the target only if the target
    does not stamp them again, so message.timestamp.type stays behind (as MirrorMaker 2 leaves it)."""
    from pipeline.copy import prepare_target

    topic = "copy-configs"
    create_topic(bootstrap, topic, 4, {"message.timestamp.type": "LogAppendTime", "retention.bytes": "12345678",
                                      "message.timestamp.before.max.ms": "60000"})
    target = target_broker.bootstrap
    prepared = trio.run(prepare_target, bootstrap, target, topic, topic, 4, 10.0)
    assert prepared.created and prepared.logs == {p: (0, 0) for p in range(4)}
    configs = topic_configs(target, topic)
    assert configs.get("retention.bytes") == "12345678"
    assert "message.timestamp.type" not in configs and "message.timestamp.before.max.ms" not in configs


def test_a_range_the_source_no_longer_holds_fails_or_is_reported_and_skipped(
        bootstrap: str, target_broker: BrokerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    topic = "copy-loss"
    target = target_broker.bootstrap
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, records(0, 0, 30))

    delete_before(bootstrap, topic, 0, 10)
    argv = ["pipeline", "copy", "--from", bootstrap, "--to", target, "--topic", topic,
            "--starting-offsets", json.dumps({topic: {"0": 0}})]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"Error: {topic}-0: starting offset 0 is before the log start offset 10 "
                          "(the log holds [10, 30))") and "failOnDataLoss" in err, err
    assert main([*argv, "--option", "failOnDataLoss=false"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (f"copy {topic}: data loss: {topic}-0: starting offset 0 is before the log start offset 10 "
                      "(the log holds [10, 30))")
    assert out[-1] == f"copy {topic} -> {topic}: done: 20 records in 1 step(s)"
    assert [(r.key, r.value, r.timestamp_ms, r.headers) for r in consume_all(target, topic, [0])] == [
        (r.key, r.value, r.timestamp_ms, r.headers) for r in consume_all(bootstrap, topic, [0])]
