"""What checks a DR round trip from outside the drill need (tests/integration/
test_drill_round_trip.py runs `drill failback` in process and counts the first failover's losses
with the chaos checker): the plan `causeway drill` makes for a running topology, the primary's
records of a drill at a site by sequence number, and the records the quarantine directories the
truncate-and-restore named hold, read from disk.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from broker.protocol.records import decode_batch, split_batches
from deploy.drill.report import DrillReport
from deploy.drill.run import DrillPlan
from deploy.drill.topics import dr_names, mirrored_topics, partitions_of
from deploy.drill.verify import log_ends, read_logs
from deploy.drill.workload import TopicPartition
from deploy.launcher.control import read_state
from mirror.config import load_mirror_config

__all__ = ["Batch", "drill_plan", "primary_records", "quarantined_records", "record_seq", "replica_batches"]

Batch = tuple[int, int, int]  # base offset, last offset, CRC (as batches.py compares them)


def drill_plan(state_dir: Path, mirror: str, *, disaster: Literal["kill", "partition", "planned"], rate: float,
               duration_s: float, kind: Literal["failover", "failback"] = "failback") -> DrillPlan:
    """The plan `causeway drill KIND` makes for mirror `mirror` of the topology started in `state_dir`."""
    state = read_state(state_dir)
    if state is None:
        raise LookupError(f"{state_dir}: the topology is not running")
    record = state.mirrors[mirror]
    if record.config is None:
        raise LookupError(f"mirror {mirror}: the launcher recorded no config file")
    config = load_mirror_config(Path(record.config))
    source, target = state.clusters[record.source].bootstrap, state.clusters[record.target].bootstrap
    topics = mirrored_topics(source, target, config, mirror)
    return DrillPlan(kind=kind, disaster=disaster, state_dir=state_dir, mirror=mirror, source=record.source,
                     target=record.target, source_bootstrap=source, target_bootstrap=target, topics=list(topics),
                     partitions=partitions_of(topics), config=config, rate=rate, duration_s=duration_s,
                     dr_topics=dr_names(config, list(topics)))


def record_seq(name: str) -> int:
    """The sequence number in a drill record's name, `<run>:<site>:<seq>`."""
    return int(name.rpartition(":")[2])


def primary_records(bootstrap: str, partitions: list[TopicPartition], run: str) -> dict[TopicPartition, dict[int, str]]:
    """The records drill `run`'s producers wrote at the primary that `bootstrap` holds now:
    by partition, offset -> name."""
    logs = read_logs(bootstrap, log_ends(bootstrap, partitions))
    return {tp: {o: n for o, n in records.items() if n.startswith(f"{run}:primary:")} for tp, records in logs.items()}


def quarantined_records(report: DrillReport) -> list[tuple[str, int, int]]:
    """Every record in the quarantine directories the failback command named, by its sequence."""
    assert report.failback is not None
    found = []
    for cut in report.failback.cuts:
        where = Path(cut.quarantine)
        for log in sorted(where.glob("*.log") if where.is_dir() else [where]):
            data = log.read_bytes()
            for position, _ in split_batches(data):
                for record in decode_batch(data, position)[1]:
                    found.append((cut.topic, cut.partition, record_seq((record.value or b"").decode())))
    return found


def replica_batches(state_dir: Path, cluster: str, tp: TopicPartition) -> dict[str, list[Batch]]:
    """Each broker of `cluster`'s replica of `tp`, read from its segment files on disk (not
    through a leader): its whole batches in offset order, promotion markers left out as
    batches.py leaves them out. By the broker's data directory name."""
    found = {}
    for broker in sorted((state_dir / "data").glob(f"{cluster}-broker-*")):
        replica = broker / f"{tp[0]}-{tp[1]}"
        if not replica.is_dir():
            continue
        batches: list[Batch] = []
        for segment in sorted(replica.glob("*.log")):
            for _, header in split_batches(segment.read_bytes(), allow_partial_tail=True):
                if not (header.is_control and not header.has_producer_id):
                    batches.append((header.base_offset, header.last_offset, header.crc))
        found[broker.name] = batches
    return found

