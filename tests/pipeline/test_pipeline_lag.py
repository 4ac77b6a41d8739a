"""`causeway pipeline lag` on records written as an mm2 mirror writes them: the source's records
(key, value, headers, timestamp) under `east.<topic>` in the same partition, at a target whose
topic stamps records on append (LogAppendTime), and copies of the source's heartbeats in
`east.heartbeats`. The percentiles per partition, overall and per minute are checked against
values computed directly from what librdkafka reads at both sides; a CreateTime target topic is
named in a note; the command finds the mirror in the launcher's state file and draws the chart."""

from __future__ import annotations

import json
import math
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from deploy.broker_process import BrokerProcess
from deploy.cli import main
from deploy.launcher.state_file import ClusterRecord, LaunchStateFile, MirrorRecord, WanRecord
from mirror.formats import Heartbeat
from pipeline.audit import MirrorSpec
from pipeline.lag import lag
from tests.pipeline.clients import consume_all, create_topic, produce

APPEND = {"message.timestamp.type": "LogAppendTime"}


def percentile(values: list[int], q: float) -> float:
    """Linear interpolation between the closest ranks (Spark's `percentile`, numpy's default)."""
    s = sorted(values)
    pos = q * (len(s) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def expected(pairs: list[tuple[int, int]]) -> dict[str, float]:
    lats = [t - s for s, t in pairs]
    return {"count": len(lats), "p50_ms": percentile(lats, 0.5), "p99_ms": percentile(lats, 0.99),
            "max_ms": float(max(lats))}


def measured(stats: dict[str, object]) -> dict[str, object]:
    return {k: stats[k] for k in ("count", "p50_ms", "p99_ms", "max_ms")}


def test_latency_percentiles_match_the_records_and_heartbeats(
        spark: SparkSession, bootstrap: str, target_broker: BrokerProcess, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    target = target_broker.bootstrap
    topic, remote = "lag-orders", "east.lag-orders"
    create_topic(bootstrap, topic, 2)
    create_topic(target, remote, 2, APPEND)
    now = int(time.time() * 1000)
    # Source records made over the last four minutes, irregularly; some repeat exactly (same key,
    # value, headers), so copies pair with their source records by rank, not by content alone.
    source_records: list[dict[str, object]] = []
    for p in (0, 1):
        for i in range(80):
            record: dict[str, object] = {"partition": p, "timestamp": now - 240_000 + (i * 2_917 + p * 611) % 235_000,
                                         "key": b"k%d" % (i % 30), "value": b"v%d" % (i % 30)}
            if i % 4 == 0:
                record["headers"] = [("h", b"%d" % (i % 30))]
            source_records.append(record)
    produce(bootstrap, topic, source_records)
    # The mirror's copies: the same content in the same partition, stamped by the target on append.
    produce(target, remote, source_records)
    # A target topic that keeps create times: nothing to measure there, and said so.
    create_topic(bootstrap, "lag-plain", 1)
    create_topic(target, "east.lag-plain", 1)
    produce(bootstrap, "lag-plain", [{"partition": 0, "value": b"x", "timestamp": now - 1000}])
    produce(target, "east.lag-plain", [{"partition": 0, "value": b"x", "timestamp": now - 1000}])
    # Heartbeats emitted at the source (by a mirror into east) over the last three minutes, as copied.
    create_topic(target, "east.heartbeats", 1, APPEND)
    beats = [Heartbeat("west", "east", now - 180_000 + i * 7_000) for i in range(25)]
    produce(target, "east.heartbeats", [{"partition": 0, "key": b.key(), "value": b.value()} for b in beats])

    src = consume_all(bootstrap, topic, [0, 1])
    tgt = consume_all(target, remote, [0, 1])
    assert {r.timestamp_type for r in tgt} == {1}
    pairs = {p: [(s.timestamp_ms, t.timestamp_ms) for s, t in zip([r for r in src if r.partition == p],
                                                                   [r for r in tgt if r.partition == p],
                                                                   strict=True)] for p in (0, 1)}
    copied_beats = consume_all(target, "east.heartbeats", [0])
    beat_pairs = [(Heartbeat.decode(r.key, r.value).timestamp_ms, r.timestamp_ms) for r in copied_beats]  # type: ignore[arg-type]

    spec = MirrorSpec(bootstrap, target, mode="mm2", source_alias="east", target_alias="west", name="east-west")
    report = lag(spark, spec, topics_regex="lag-.*", say=lambda _line: None).to_dict()
    rows = {(r["kind"], r["topic"], r["partition"]): r for r in report["partitions"]}
    assert set(rows) == {("records", topic, 0), ("records", topic, 1), ("heartbeats", "heartbeats", 0)}
    for p in (0, 1):
        assert measured(rows[("records", topic, p)]) == expected(pairs[p])
    assert measured(report["overall"]["records"]) == expected(pairs[0] + pairs[1])
    assert measured(rows[("heartbeats", "heartbeats", 0)]) == expected(beat_pairs)
    by_minute: dict[int, list[tuple[int, int]]] = {}
    for s, t in pairs[0] + pairs[1]:
        by_minute.setdefault(s // 60_000 * 60_000, []).append((s, t))
    assert [(w["start_ms"], measured(w)) for w in report["windows"]["records"]] == [
        (start, expected(values)) for start, values in sorted(by_minute.items())]
    assert len(by_minute) >= 4
    plain = "east.lag-plain (partitions 0) keeps the source's create times"
    assert any(note.startswith(plain) for note in report["notes"])

    # The command: the mirror found in the launcher's state file, a table, JSON and an SVG chart.
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    state = LaunchStateFile(name="lag-demo", wan=WanRecord(api="127.0.0.1:1"), clusters={
        "east": ClusterRecord(datacenter="dc-east", bootstrap=bootstrap, brokers=[]),
        "west": ClusterRecord(datacenter="dc-west", bootstrap=target, brokers=[])},
        mirrors={"east-west": MirrorRecord(source="east", target="west", status_file=str(tmp_path / "status.json"))})
    (state_dir / "state.json").write_text(state.to_json())
    chart, out_json = tmp_path / "lag.svg", tmp_path / "lag.json"
    argv = ["pipeline", "lag", "lag-demo", "--mirror", "east-west", "--state-dir", str(state_dir), "--topics", "lag-.*",
            "--chart", str(chart), "--json", str(out_json)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert json.loads(out_json.read_text())["partitions"] == report["partitions"]
    line = next(x for x in out.splitlines() if x.split()[:2] == ["records", f"{topic}-1"])
    stats = expected(pairs[1])
    assert line.split()[3:] == [str(stats["count"]), f"{stats['p50_ms']:.1f}", f"{stats['p99_ms']:.1f}",
                                f"{stats['max_ms']:.0f}"]
    svg = ET.parse(chart).getroot()
    lines = svg.findall("{http://www.w3.org/2000/svg}polyline")
    assert sorted((e.get("data-kind"), e.get("data-q")) for e in lines) == sorted(
        (k, q) for k in ("heartbeats", "records") for q in ("max", "p50", "p99"))
    records_max = next(e for e in lines if (e.get("data-kind"), e.get("data-q")) == ("records", "max"))
    assert len(records_max.get("points", "").split()) == len(by_minute)

    assert main([*argv[:-4], "--chart", str(tmp_path / "lag.png")]) == 2
    assert "--chart writes SVG" in capsys.readouterr().err
    assert main(["pipeline", "lag", "lag-demo", "--mirror", "nope", "--state-dir", str(state_dir)]) == 1
    assert "topology lag-demo has no mirror 'nope'" in capsys.readouterr().err
