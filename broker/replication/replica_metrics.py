"""The replica manager's gauges and each hosted partition's log gauges, computed at scrape.

Kafka keeps a gauge object per partition that reads the partition's state when JMX asks; the
same here: nothing is counted on the produce or fetch path, and a scrape walks the hosted
partitions once, reading what the broker maintains anyway (the ISR, the replicas, the log's
segments). The walk runs in the metrics endpoint's thread: it copies the partition table in one
step (atomic under the GIL) and only reads attributes, never changes broker state, so the event
loop goes on meanwhile. A partition being created or deleted during the walk is skipped or read
half-way; the next scrape sees it whole.

The series are rendered as text (``broker.metrics.add_text_source``), not as prometheus_client
samples: at 10,000 partitions the samples cost seconds of interpreter time per scrape and woke
the garbage collector's full collections, which stalled the broker's loop for half a second
(bench/metrics_scrape.py).

Names are the Prometheus JMX exporter's for Kafka's MBeans:
``kafka.server:type=ReplicaManager,name=UnderReplicatedPartitions`` is
``kafka_server_replicamanager_underreplicatedpartitions``, ``kafka.log:type=Log,name=Size,topic=T,
partition=P`` is ``kafka_log_log_size{topic="T",partition="P"}``. The reference is
docs/reference/metrics.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from broker.metrics import add_text_source

if TYPE_CHECKING:
    from broker.replication.partition import Partition

__all__ = ["hosted_partitions", "render", "track_partitions"]

Partitions = Callable[[], Mapping[tuple[str, int], "Partition"]]

# (name, help) of the broker-wide gauges, then of the per-partition ones, in the order rendered.
_TOTALS = (
    ("kafka_server_replicamanager_partitioncount",
     "Partitions with a replica on this broker (Kafka's PartitionCount)."),
    ("kafka_server_replicamanager_leadercount", "Partitions this broker leads (Kafka's LeaderCount)."),
    ("kafka_server_replicamanager_underreplicatedpartitions",
     "Partitions this broker leads whose ISR is smaller than their replicas (Kafka's UnderReplicatedPartitions)."),
    ("kafka_server_replicamanager_underminisrpartitioncount",
     "Partitions this broker leads whose ISR is below min.insync.replicas (Kafka's UnderMinIsrPartitionCount)."),
    ("kafka_server_replicamanager_atminisrpartitioncount",
     "Partitions this broker leads whose ISR is exactly min.insync.replicas (Kafka's AtMinIsrPartitionCount)."),
)
_PER_PARTITION = (
    ("kafka_cluster_partition_underreplicated",
     "1 when this broker leads the partition and its ISR is smaller than its replicas (Kafka's Partition "
     "UnderReplicated)."),
    ("kafka_log_log_size", "Bytes in the partition's log segments here (Kafka's Log Size)."),
    ("kafka_log_log_logendoffset", "The log end offset of the partition's replica here (Kafka's Log LogEndOffset)."),
    ("kafka_log_log_logstartoffset",
     "The log start offset of the partition's replica here (Kafka's Log LogStartOffset)."),
    ("kafka_log_log_numlogsegments", "Segments of the partition's log here (Kafka's Log NumLogSegments)."),
)


# Partitions rendered between two offers of the interpreter to the broker's event loop: a thread
# holding it otherwise keeps it for the whole switch interval (5 ms) each time the loop's thread
# gives it up for a system call, and a request makes many.
_YIELD_EVERY = 200


def _header(name: str, help_text: str) -> str:
    return f"# HELP {name} {help_text}\n# TYPE {name} gauge\n"


class _Source:
    """The partitions of the broker's replica manager (the latest one made in this process:
    tests make several)."""

    partitions: Partitions | None = None
    # The label part of each partition's series by id(partition), kept between scrapes (topic
    # names are Kafka's legal characters, letters, digits, '.', '_' and '-': nothing to escape).
    labels: dict[int, tuple[str, int, str]] = {}


def render() -> str:
    """Every gauge of this module, as text in Prometheus's exposition format."""
    source = _Source.partitions
    # The values only: the table's (topic, partition) keys would be a new tuple each, and
    # thousands of new tracked objects per scrape wake the garbage collector.
    hosted = list(source().values()) if source is not None else []
    known = _Source.labels
    labels: dict[int, tuple[str, int, str]] = {}
    columns: tuple[list[str], ...] = ([], [], [], [], [])
    under_replicated, size, end, start, segments = columns
    n_leaders = n_under = n_under_min = n_at_min = 0
    for i, partition in enumerate(hosted):
        if not i % _YIELD_EVERY:
            time.sleep(0)  # hand the interpreter to the event loop's thread, if it waits for it
        try:
            log = partition.log
            min_isr = log.config.min_insync_replicas
            segs = log.segments
            isr, replicas = len(partition.isr), len(partition.replicas)
            leading = partition.is_leader
            total = sum(s.size for s in segs)
            log_end = segs[-1].next_offset
            log_start = log.log_start_offset
        except (AttributeError, IndexError):  # being created or deleted under the walk
            continue
        topic, index = partition.topic, partition.index
        cached = known.get(id(partition))
        if cached is None or cached[0] != topic or cached[1] != index:  # an id may be reused
            cached = (topic, index, f'{{partition="{index}",topic="{topic}"}} ')
        labels[id(partition)] = cached
        label = cached[2]
        is_under = leading and isr < replicas
        n_leaders += leading
        n_under += is_under
        n_under_min += leading and isr < min_isr
        n_at_min += leading and isr == min_isr
        under_replicated.append(f"kafka_cluster_partition_underreplicated{label}{int(is_under)}\n")
        size.append(f"kafka_log_log_size{label}{total}\n")
        end.append(f"kafka_log_log_logendoffset{label}{log_end}\n")
        start.append(f"kafka_log_log_logstartoffset{label}{log_start}\n")
        segments.append(f"kafka_log_log_numlogsegments{label}{len(segs)}\n")
    _Source.labels = labels  # what went away is forgotten
    parts = [f"{_header(name, help_text)}{name} {value}\n"
             for (name, help_text), value in zip(_TOTALS, (len(hosted), n_leaders, n_under, n_under_min, n_at_min),
                                                 strict=True)]
    for (name, help_text), lines in zip(_PER_PARTITION, columns, strict=True):
        parts.append(_header(name, help_text))
        parts.append("".join(lines))
    return "".join(parts)


add_text_source(render)


def track_partitions(partitions: Partitions) -> None:
    """Report the partitions `partitions()` returns (the replica manager's table, which a scrape
    copies) from now on."""
    _Source.partitions = partitions


def hosted_partitions() -> Mapping[tuple[str, int], Partition]:
    """The replica manager's partition table as a scrape sees it (only read it)."""
    source = _Source.partitions
    return source() if source is not None else {}
