"""`causeway pipeline audit` against real brokers: a clean copy is clean (exit 0); a loss, a
duplicate, a reordering and a corruption injected into the target are each found and named with
partition and offsets (exit 1), in both mirror modes: on a real `causeway mirror` process of
each mode (mm2 and link) found through the launcher's state file, as `causeway status` finds it,
with the faults written into the target after the mirror stopped; and on targets written as a
mirror writes them (the same records, key, value, timestamp, headers, in the same partition,
under `<alias>.<topic>` for mm2 or the same name and offsets for link), where each kind of
finding is taken apart further."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import trio
from pyspark.sql import SparkSession

from broker.client import TopicPartition, open_client
from deploy.broker_process import BrokerProcess
from deploy.cli import main
from deploy.launcher.state_file import ClusterRecord, LaunchStateFile, MirrorRecord, WanRecord
from tests.integration.mirror_process import start_mirror
from tests.integration.test_mirror import wait_for_end_offsets
from tests.pipeline.brokers import delete_before
from tests.pipeline.clients import create_topic, produce

pytestmark = pytest.mark.compat

BASE_TS = 1_700_000_000_000


def records(partition: int, n: int) -> list[dict[str, object]]:
    """Source records of one partition: keyed and not, with and without headers."""
    out: list[dict[str, object]] = []
    for i in range(n):
        record: dict[str, object] = {"partition": partition, "timestamp": BASE_TS + partition * 1000 + i,
                                     "key": None if i % 7 == 0 else b"k%d-%d" % (partition, i),
                                     "value": b"value %d of %d" % (i, partition)}
        if i % 3 == 0:
            record["headers"] = [("trace", b"t%d" % i)]
        out.append(record)
    return out


def run_audit(*argv: str, json_file: Path) -> tuple[int, dict[str, Any]]:
    code = main(["pipeline", "audit", *argv, "--json", str(json_file)])
    return code, json.loads(json_file.read_text())


def partitions_of(report: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {p["partition"]: p for p in report["partitions"]}



def write_launch_state(state_dir: Path, name: str, east: str, west: str, mirrors: dict[str, MirrorRecord]) -> Path:
    """The state file as `causeway up` writes it (the clusters' local listeners, the mirrors' configs)."""
    state_dir.mkdir()
    state = LaunchStateFile(name=name, wan=WanRecord(api="127.0.0.1:1"), clusters={
        "east": ClusterRecord(datacenter="dc-east", bootstrap=east, brokers=[]),
        "west": ClusterRecord(datacenter="dc-west", bootstrap=west, brokers=[])}, mirrors=mirrors)
    (state_dir / "state.json").write_text(state.to_json())
    return state_dir

def test_mm2_copy_clean_then_loss_duplicate_reorder_and_corruption_named(
        spark: SparkSession, bootstrap: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Clean: two partitions copied exactly under east.<topic>; the tail not yet copied is lag.
    create_topic(bootstrap, "aud-clean", 2)
    create_topic(bootstrap, "east.aud-clean", 2)
    clean = [r for p in range(2) for r in records(p, 80)]
    produce(bootstrap, "aud-clean", clean)
    produce(bootstrap, "east.aud-clean", [r for r in clean if r["timestamp"] % 1000 < 75])  # type: ignore[operator]
    flags = ["--source-bootstrap", bootstrap, "--target-bootstrap", bootstrap, "--source-alias", "east"]
    code, report = run_audit(*flags, "--topics", "aud-clean", json_file=tmp_path / "clean.json")
    assert code == 0, capsys.readouterr()
    assert report["clean"] is True
    for p in partitions_of(report).values():
        assert (p["source_records"], p["target_records"], p["copied"]) == (80, 75, 75)
        assert p["counts"] == {"behind": 5, "behind_ranges": 1}
        assert p["ranges"] == {"behind": [[75, 79, 5]]}

    create_topic(bootstrap, "aud-mm2", 3)
    create_topic(bootstrap, "east.aud-mm2", 3)
    source = {p: records(p, 120) for p in range(3)}
    produce(bootstrap, "aud-mm2", [r for p in range(3) for r in source[p]])
    target: list[dict[str, Any]] = list(source[0])  # partition 0: a clean copy
    # Partition 1: source offsets 30-32 never copied; offset 60 arrives with another value.
    for i, r in enumerate(source[1]):
        if 30 <= i <= 32:
            continue
        target.append({**r, "value": b"CORRUPT"} if i == 60 else r)
    # Partition 2: a restart copies 70-79 again after 79; 100 and 101 arrive swapped.
    p2 = source[2]
    target += p2[:80] + p2[70:80] + p2[80:100] + [p2[101], p2[100]] + p2[102:]
    produce(bootstrap, "east.aud-mm2", target)

    code, report = run_audit(*flags, "--topics", "aud-mm2", json_file=tmp_path / "mm2.json")
    out = capsys.readouterr().out
    assert code == 1, out
    assert report["clean"] is False
    parts = partitions_of(report)
    assert parts[0]["clean"] is True and parts[0]["counts"] == {}
    assert parts[1]["ranges"] == {"missing": [[30, 32, 3]], "mismatched": [[60, 60, 1, 57, 57]]}
    assert parts[2]["ranges"] == {"duplicated": [[80, 89, 10]], "reordered": [[100, 101, 2]]}
    assert (parts[2]["source_records"], parts[2]["target_records"], parts[2]["copied"]) == (120, 130, 120)
    # The operator's view names partition and offsets.
    assert "aud-mm2-1 -> east.aud-mm2-1: missing 3 record(s) at source offsets 30-32" in out
    assert "aud-mm2-1 -> east.aud-mm2-1: mismatched 1 record(s) at source offsets 60 (target 57)" in out
    assert "aud-mm2-2 -> east.aud-mm2-2: duplicated 10 record(s) at target offsets 80-89" in out
    assert "aud-mm2-2 -> east.aud-mm2-2: reordered 2 record(s) at source offsets 100-101" in out
    assert "NOT CLEAN: missing 3, duplicated 10, reordered 2, mismatched 1" in out


def test_link_mode_aligns_by_offset(spark: SparkSession, bootstrap: str, target_broker: BrokerProcess,
                                   tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target_bootstrap = target_broker.bootstrap
    create_topic(bootstrap, "aud-link", 3)
    create_topic(target_bootstrap, "aud-link", 4)  # a fourth partition the source does not have
    source = {p: records(p, 60) for p in range(3)}
    produce(bootstrap, "aud-link", [r for p in range(3) for r in source[p]])
    # Partition 0 equal; partition 1: offset 10 differs and 0-4 deleted; partition 2: offset 30
    # written twice, so everything after it sits one offset later than at the source.
    target = source[0] + [{**r, "value": b"other"} if i == 10 else r for i, r in enumerate(source[1])]
    target += source[2][:31] + source[2][30:] + [{**r, "partition": 3} for r in source[0][:2]]
    produce(target_bootstrap, "aud-link", target)
    delete_before(target_bootstrap, "aud-link", 1, 5)
    code, report = run_audit("--source-bootstrap", bootstrap, "--target-bootstrap", target_bootstrap,
                             "--mode", "link", "--topics", "aud-link", json_file=tmp_path / "link.json")
    out = capsys.readouterr().out
    assert code == 1, out
    parts = partitions_of(report)
    assert parts[0]["clean"] is True and parts[0]["counts"] == {}
    assert parts[1]["ranges"] == {"missing": [[0, 4, 5]], "mismatched": [[10, 10, 1, 10, 10]]}
    assert parts[2]["ranges"] == {"duplicated": [[31, 31, 1]], "shifted": [[31, 59, 29]]}
    assert (parts[3]["source_records"], parts[3]["target_records"]) == (0, 2)
    assert parts[3]["ranges"] == {"extra": [[0, 1, 2]]}
    assert "aud-link-2 -> aud-link-2: shifted 29 record(s) at source offsets 31-59" in out


def test_a_real_mirror_found_from_the_launcher_state(spark: SparkSession, bootstrap: str,
                                                     target_broker: BrokerProcess, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    target_bootstrap = target_broker.bootstrap
    create_topic(bootstrap, "aud-real", 3)
    produce(bootstrap, "aud-real", [r for p in range(3) for r in records(p, 100)])
    config = tmp_path / "mirrors" / "east-west.yaml"
    config.parent.mkdir()
    config.write_text(json.dumps({
        "name": "east-west", "source": {"alias": "east", "bootstrap": bootstrap},
        "target": {"alias": "west", "bootstrap": target_bootstrap}, "topics": {"include": ["aud-real"]},
        "refresh.topics.interval.seconds": 0.2, "offset.flush.interval.ms": 200}))
    mirror = start_mirror(config, tmp_path / "mirror.log", tmp_path / "status.json")
    try:
        trio.run(wait_for_end_offsets, target_bootstrap, "east.aud-real", {0: 100, 1: 100, 2: 100})
    finally:
        mirror.send_signal(signal.SIGTERM)
        assert mirror.wait(60) == 0
    state_dir = write_launch_state(tmp_path / "state", "audit-demo", bootstrap, target_bootstrap, {
        "east-west": MirrorRecord(source="east", target="west", status_file=str(tmp_path / "status.json"),
                                  config=str(config))})
    history = tmp_path / "history"
    argv = ["audit-demo", "--mirror", "east-west", "--state-dir", str(state_dir), "--parquet", str(history)]
    code, report = run_audit(*argv, json_file=tmp_path / "real.json")
    assert code == 0, capsys.readouterr()
    assert [(p["topic"], p["target_topic"], p["copied"], p["counts"]) for p in report["partitions"]] == [
        ("aud-real", "east.aud-real", 100, {})] * 3

    delete_before(target_bootstrap, "east.aud-real", 1, 10)  # records lost at the target
    code, report = run_audit(*argv, json_file=tmp_path / "lost.json")
    out = capsys.readouterr().out
    assert code == 1, out
    assert partitions_of(report)[1]["ranges"] == {"missing": [[0, 9, 10]]}
    assert "aud-real-1 -> east.aud-real-1: missing 10 record(s) at source offsets 0-9" in out
    runs = pq.read_table(history).to_pylist()
    assert sorted((r["partition"], r["clean"], r["missing"]) for r in runs) == [
        (0, True, 0), (0, True, 0), (1, False, 10), (1, True, 0), (2, True, 0), (2, True, 0)]

    # A mirror the topology does not have, and a state dir nothing was started from: clear refusals.
    assert main(["pipeline", "audit", "audit-demo", "--mirror", "nope", "--state-dir", str(state_dir)]) == 1
    assert "topology audit-demo has no mirror 'nope' (its mirrors: east-west)" in capsys.readouterr().err
    assert main(["pipeline", "audit", "audit-demo", "--mirror", "x", "--state-dir", str(tmp_path / "none")]) == 1
    assert "nothing was started from" in capsys.readouterr().err

    # The mirror stopped, the source goes on, and the target's copy of the new records is written
    # by hand with faults: partition 0 a duplicate, partition 2 a corruption and a reordering.
    more = {p: records(p, 110)[100:] for p in (0, 2)}
    produce(bootstrap, "aud-real", more[0] + more[2])
    injected = more[0] + [more[0][5]] + more[2][:5] + [{**more[2][5], "value": b"CORRUPT"}] + more[2][6:8] + [
        more[2][9], more[2][8]]
    produce(target_bootstrap, "east.aud-real", injected, idempotent=False)
    code, report = run_audit(*argv[:5], json_file=tmp_path / "faults.json")  # not into the history
    out = capsys.readouterr().out
    assert code == 1, out
    parts = partitions_of(report)
    assert parts[0]["ranges"] == {"duplicated": [[110, 110, 1]]}
    assert parts[1]["ranges"] == {"missing": [[0, 9, 10]]}
    assert parts[2]["ranges"] == {"mismatched": [[105, 105, 1, 105, 105]], "reordered": [[108, 109, 2]]}
    assert out.splitlines()[-1] == "NOT CLEAN: missing 10, duplicated 1, reordered 2, mismatched 1"


def link_write(bootstrap: str, topic: str, mirror: str, base: int, writes: dict[int, list[dict[str, object]]],
               *, log_starts: dict[int, int] | None = None) -> None:
    """Append `writes` (partition -> records, from offset `base`) as link-mode mirror `mirror`
    does, through LinkAppend: the records land at the offsets given, as a faulty mirror's would.
    An empty list sends only the partition's log start (`log_starts`)."""
    from broker.client import link_append
    from broker.protocol.records import Record, build_batch

    def batch(recs: list[dict[str, Any]]) -> bytes:
        if not recs:
            return b""
        return build_batch([Record(r.get("key"), r["value"], list(r.get("headers", ())), r["timestamp"])
                            for r in recs], base_offset=base)

    batches = {TopicPartition(topic, p): batch(recs) for p, recs in writes.items()}
    starts = {TopicPartition(topic, p): offset for p, offset in (log_starts or {}).items()}

    async def go() -> None:
        async with open_client(bootstrap) as client:
            with trio.fail_after(30):
                results = await link_append(client, mirror, batches, log_start_offsets=starts)
        assert all(r.error == 0 for r in results.values()), results

    trio.run(go)


def test_a_real_link_mode_mirror_is_clean_then_each_injected_fault_is_found(
        spark: SparkSession, bootstrap: str, target_broker: BrokerProcess, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A `causeway mirror` process in link mode copies a topic between two real brokers: the
    audit (mode read from the launcher's state and the mirror's config) finds it clean. Then,
    the mirror stopped, a faulty mirror is played: LinkAppend, as mirror `dr`, puts a loss (the
    copy's log start moved past records the source holds), a duplicate, a reordering and a
    corruption into the target at the offsets a link copy keeps, one partition each, and each
    is found there. (A promoted topic would not do: its first local write lands one offset past
    the copy, after the promotion marker, so every injected record would also be shifted.)"""
    topic, target = "aud-reallink", target_broker.bootstrap
    create_topic(bootstrap, topic, 4)
    source = {p: records(p, 60) for p in range(4)}
    produce(bootstrap, topic, [r for p in range(4) for r in source[p]])
    config = tmp_path / "mirrors" / "dr.yaml"
    config.parent.mkdir()
    config.write_text(json.dumps({
        "name": "dr", "mode": "link", "source": {"alias": "east", "bootstrap": bootstrap},
        "target": {"alias": "west", "bootstrap": target}, "topics": {"include": [topic]},
        "refresh.topics.interval.seconds": 0.2}))
    status = tmp_path / "status.json"
    mirror = start_mirror(config, tmp_path / "mirror.log", status)
    try:
        trio.run(wait_for_end_offsets, target, topic, {p: 60 for p in range(4)})
    finally:
        mirror.send_signal(signal.SIGTERM)
        assert mirror.wait(60) == 0
    state_dir = write_launch_state(tmp_path / "state", "link-demo", bootstrap, target, {
        "dr": MirrorRecord(source="east", target="west", mode="link", status_file=str(status), config=str(config))})
    argv = ["link-demo", "--mirror", "dr", "--state-dir", str(state_dir)]
    code, report = run_audit(*argv, json_file=tmp_path / "clean.json")
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.splitlines()[0] == f"audit of mirror dr (link): {bootstrap} -> {target}"
    assert [(p["topic"], p["target_topic"], p["copied"], p["counts"]) for p in report["partitions"]] == [
        (topic, topic, 60, {})] * 4

    # The source goes on (the mirror is stopped); a faulty mirror copies it, one fault per
    # partition. Partition 0: the copy's log start moved to 10, so source offsets 0-9 are gone there.
    more = {p: records(p, 70)[60:] for p in range(1, 4)}
    produce(bootstrap, topic, [r for p in range(1, 4) for r in more[p]])
    link_write(target, topic, "dr", 60, {
        0: [],  # only the log start moves
        1: more[1] + [more[1][-1]],  # source offset 69 written twice (target 70)
        2: more[2][:8] + [more[2][9], more[2][8]],  # 68 and 69 swapped
        3: [{**r, "value": b"CORRUPT"} if i == 5 else r for i, r in enumerate(more[3])],  # offset 65
    }, log_starts={0: 10})
    code, report = run_audit(*argv, json_file=tmp_path / "faults.json")
    out = capsys.readouterr().out
    assert code == 1, out
    parts = partitions_of(report)
    assert parts[0]["ranges"] == {"missing": [[0, 9, 10]]}
    assert parts[1]["ranges"] == {"duplicated": [[70, 70, 1]]}
    assert parts[2]["ranges"] == {"reordered": [[68, 69, 2]], "shifted": [[68, 69, 2]]}
    assert parts[3]["ranges"] == {"mismatched": [[65, 65, 1, 65, 65]]}
    assert f"{topic}-0 -> {topic}-0: missing 10 record(s) at source offsets 0-9" in out
    assert f"{topic}-1 -> {topic}-1: duplicated 1 record(s) at target offsets 70" in out
    assert f"{topic}-2 -> {topic}-2: reordered 2 record(s) at source offsets 68-69" in out
    assert f"{topic}-3 -> {topic}-3: mismatched 1 record(s) at source offsets 65 (target 65)" in out
    assert out.splitlines()[-1] == "NOT CLEAN: missing 10, duplicated 1, reordered 2, mismatched 1, shifted 2"


def test_an_unreachable_cluster_or_a_bad_option_is_one_line(bootstrap: str, capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as s:  # bound, not listening: nothing answers there
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
        assert main(["pipeline", "audit", "--source-bootstrap", bootstrap, "--target-bootstrap", dead, "--mode", "link",
                     "--option", "kafka.request.timeout.ms=1500"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"Error: cluster {dead} is unreachable"), err
    assert main(["pipeline", "audit", "--source-bootstrap", bootstrap, "--target-bootstrap", bootstrap,
                 "--mode", "link", "--option", "kafka.request.timeout.ms=soon"]) == 1
    assert capsys.readouterr().err.strip() == (
        "Error: option kafka.request.timeout.ms must be a positive integer, got 'soon'")
