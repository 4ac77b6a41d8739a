"""Kafka's replication matrix, short profile (`make chaos` runs the whole matrix).

Each profile scenario starts a real ZooKeeper node and three broker processes in ZooKeeper mode,
creates a topic with replication factor 3 and min.insync.replicas=2, writes numbered records with
librdkafka's idempotent acks=all producer while it SIGKILLs a partition leader or bounces the
controller (found at fault time from the metadata and /controller), waits until every partition
is led and fully in sync again, then reads every partition back with a librdkafka consumer: no
acknowledged record lost, duplicated, reordered or moved, and writes acknowledged again after
the fault. The checks themselves are tried on logs made up to break each rule.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy.chaos.payload import make_record
from deploy.chaos.replication import (
    PARTITIONS,
    PROFILE,
    ProduceLog,
    ReplicationResult,
    Seen,
    check_result,
    run_scenario,
)

SEED = 1


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(PROFILE)), ids=[s.name for s in PROFILE])
async def test_replication_profile(index: int, tmp_path: Path) -> None:
    scenario = PROFILE[index]
    result = await run_scenario(scenario, seed=SEED + index, work_dir=tmp_path / scenario.name)
    detail = result.describe()
    assert result.error is None, detail
    assert len(result.rounds) == scenario.rounds, detail
    assert all(r.broker in (1, 2, 3) for r in result.rounds), detail
    assert all(r.failover_s is not None for r in result.rounds), f"no write acknowledged after a fault:\n{detail}"
    assert result.plog.acked_count >= scenario.warmup + scenario.tail, detail
    assert result.plog.acked_count == result.plog.sent_count, f"records left unacknowledged:\n{detail}"
    assert result.consumed == result.plog.acked_count, detail
    assert (result.lost, result.count("duplicated"), result.count("reordered"), result.count("corrupted")) \
        == (0, 0, 0, 0), detail
    assert result.moved == [], detail
    assert result.passed, detail


def _made_up(logs: dict[int, list[int]], acked: int = 6) -> ReplicationResult:
    """A result whose producer had `acked` records per partition acknowledged at offsets 0..,
    and whose consumer read, per partition, the records with the given sequence numbers."""
    result = ReplicationResult(PROFILE[0], SEED)
    run = f"{PROFILE[0].name}-{SEED}"
    plog: ProduceLog = result.plog
    consumed: dict[int, list[Seen]] = {}
    for p in range(PARTITIONS):
        records = [make_record(run, p, seq, timestamp_ms=1_000 + seq) for seq in range(acked)]
        plog.sent[p] = {seq: (r, 0.0) for seq, r in enumerate(records)}
        plog.acked[p] = list(range(acked))
        plog.acked_at[p] = [(1.0, seq, seq) for seq in range(acked)]
        consumed[p] = [Seen(offset, records[seq].timestamp or 0, records[seq].key, records[seq].value,
                            tuple(records[seq].headers))
                       for offset, seq in enumerate(logs.get(p, range(acked)))]
    check_result(result, consumed, {p: len(c) for p, c in consumed.items()})
    return result


def test_the_checks_pass_an_intact_log() -> None:
    result = _made_up({})
    assert (result.lost, result.count("duplicated"), result.count("reordered"), result.moved) == (0, 0, 0, [])
    assert result.failures() == []


@pytest.mark.parametrize(("log", "broken"), [
    ([0, 1, 3, 4, 5], "lost"),          # an acknowledged record truncated away
    ([0, 1, 2, 3, 4], "lost"),          # the acknowledged tail gone
    ([0, 1, 2, 2, 3, 4, 5], "duplicated"),  # a retry appended twice
    ([0, 2, 1, 3, 4, 5], "reordered"),
])
def test_the_checks_catch_a_broken_log(log: list[int], broken: str) -> None:
    result = _made_up({1: log})
    failures = "\n".join(result.failures())
    assert f"acknowledged records {broken}" in failures, failures
    assert not result.passed


def test_a_record_read_at_another_offset_than_acknowledged_fails() -> None:
    result = _made_up({})
    result.plog.acked_at[2][3] = (1.0, 3, 7)  # the broker said offset 7; the log holds it at 3
    consumed = {p: [Seen(seq, r.timestamp or 0, r.key, r.value, tuple(r.headers))
                    for seq, (r, _) in sorted(result.plog.sent[p].items())] for p in range(PARTITIONS)}
    check_result(result, consumed, {p: len(c) for p, c in consumed.items()})
    assert result.moved == ["p2 seq 3: acknowledged at 7, read at 3"]
    assert not result.passed
