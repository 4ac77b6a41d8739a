"""The broker's Prometheus metrics, and the HTTP endpoint that serves them.

Counters live in prometheus_client's default registry (which also carries the process metrics:
`process_open_fds`, `process_resident_memory_bytes`, ...). The endpoint is off unless
`causeway.metrics.listener=HOST:PORT` is set; it runs in prometheus_client's own daemon thread,
so a scrape never waits for the event loop and the loop never waits for a scrape.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import Counter, Gauge, start_http_server

from broker.address import format_host_port, parse_host_port

__all__ = [
    "MetricsServer",
    "QUARANTINED_BYTES",
    "QUARANTINED_RECORDS",
    "QUARANTINED_SEGMENTS",
    "RECOVERY_CUTS",
    "RETENTION_CHECKS",
    "MISSING_OFFSETS",
    "LOG_TRUNCATIONS",
    "TRUNCATED_RECORDS",
    "serve_metrics",
    "track_open_segment_files",
    "ISR_EXPANDS",
    "ISR_SHRINKS",
    "track_replication",
    "FETCH_SESSION_EVICTIONS",
    "REPLICA_FETCH_REQUESTS",
    "REPLICA_FETCH_PARTITIONS",
    "track_fetch_sessions",
]

log = logging.getLogger(__name__)

QUARANTINED_RECORDS = Counter(
    "causeway_log_recovery_quarantined_records",
    "Records that log recovery cut off a partition and moved to its quarantine directory.",
    ["topic", "partition"],
)
QUARANTINED_BYTES = Counter(
    "causeway_log_recovery_quarantined_bytes",
    "Bytes that log recovery cut off a partition and moved to its quarantine directory.",
    ["topic", "partition"],
)
QUARANTINED_SEGMENTS = Counter(
    "causeway_log_recovery_quarantined_segments",
    "Segment files (whole, or the cut tail of a damaged one) moved to a quarantine directory.",
    ["topic", "partition"],
)
RECOVERY_CUTS = Counter(
    "causeway_log_recovery_cuts",
    "Recovery cuts of a partition log, by kind: torn_tail (a partial last write) or mid_log "
    "(intact batches followed the damage).",
    ["topic", "partition", "kind"],
)
MISSING_OFFSETS = Counter(
    "causeway_log_recovery_missing_offsets",
    "Offsets found missing from the middle of a partition log at start (a segment file gone, or a gap in a "
    "log that is neither compacted nor a copy): reported, and skipped by fetches.",
    ["topic", "partition"],
)
LOG_TRUNCATIONS = Counter(
    "causeway_log_truncations",
    "Truncations of a follower's divergent log tail (KIP-101/279); what they cut is in quarantine.",
    ["topic", "partition"],
)
TRUNCATED_RECORDS = Counter(
    "causeway_log_truncated_records",
    "Records a follower's truncation moved from its log to the partition's quarantine directory.",
    ["topic", "partition"],
)
RETENTION_CHECKS = Counter(
    "causeway_log_retention_checks",
    "Retention checks run over every log of the broker (one each log.retention.check.interval.ms).",
)
OPEN_SEGMENT_FILES = Gauge(
    "causeway_log_open_segment_files",
    "Segment files the broker holds open (bounded by half the open-file limit).",
)


def _track(gauge: Gauge, count: Callable[[], int]) -> None:
    gauge.set_function(lambda: float(count()))


def track_open_segment_files(count: Callable[[], int]) -> None:
    _track(OPEN_SEGMENT_FILES, count)


ISR_SHRINKS = Counter("causeway_isr_shrinks", "ISR shrinks written for partitions this broker leads "
                                              "(Kafka's IsrShrinksPerSec).")
ISR_EXPANDS = Counter("causeway_isr_expands", "ISR expansions written for partitions this broker leads "
                                              "(Kafka's IsrExpandsPerSec).")
UNDER_REPLICATED = Gauge("causeway_under_replicated_partitions", "Partitions this broker leads whose ISR is "
                                                                 "smaller than their replicas (Kafka's "
                                                                 "UnderReplicatedPartitions).")
UNDER_MIN_ISR = Gauge("causeway_under_min_isr_partitions", "Partitions this broker leads whose ISR is below "
                                                           "min.insync.replicas (Kafka's UnderMinIsrPartitionCount).")


def track_replication(under_replicated: Callable[[], int], under_min_isr: Callable[[], int]) -> None:
    _track(UNDER_REPLICATED, under_replicated)
    _track(UNDER_MIN_ISR, under_min_isr)


FETCH_SESSIONS = Gauge(
    "causeway_fetch_sessions",
    "Incremental fetch sessions (KIP-227) this broker keeps (Kafka's NumIncrementalFetchSessions).",
)
FETCH_SESSION_PARTITIONS = Gauge(
    "causeway_fetch_session_partitions_cached",
    "Partitions cached in this broker's fetch sessions (Kafka's NumIncrementalFetchPartitionsCached).",
)
FETCH_SESSION_EVICTIONS = Counter(
    "causeway_fetch_session_evictions",
    "Fetch sessions evicted to make room for another (Kafka's IncrementalFetchSessionEvictionsPerSec).",
)
REPLICA_FETCH_REQUESTS = Counter(
    "causeway_replica_fetch_requests",
    "Fetch requests this broker's followers sent, by kind: full or incremental (KIP-227).",
    ["kind"],
)
REPLICA_FETCH_PARTITIONS = Counter(
    "causeway_replica_fetch_partitions",
    "Partitions named in the fetch requests this broker's followers sent: all they follow in a full one, the "
    "changed ones in an incremental one.",
    ["kind"],
)


def track_fetch_sessions(sessions: Callable[[], int], partitions: Callable[[], int]) -> None:
    _track(FETCH_SESSIONS, sessions)
    _track(FETCH_SESSION_PARTITIONS, partitions)


@dataclass
class MetricsServer:
    host: str
    port: int
    _server: WSGIServer
    _thread: threading.Thread

    @property
    def url(self) -> str:
        return f"http://{format_host_port(self.host, self.port)}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def serve_metrics(listener: str) -> MetricsServer:
    """Bind `HOST:PORT` (port 0: a free port) and serve /metrics from a daemon thread.

    Raises OSError naming the key and address when it cannot bind.
    """
    host, port = parse_host_port(listener)
    try:
        server, thread = start_http_server(port, addr=host or "0.0.0.0")
    except OSError as exc:
        raise OSError(exc.errno, f"causeway.metrics.listener: cannot listen on {listener}: {exc.strerror}") from exc
    bound_host, bound_port = server.server_address[:2]
    return MetricsServer(str(bound_host), int(bound_port), server, thread)
