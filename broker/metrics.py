"""The broker's Prometheus metrics, and the HTTP endpoint that serves them.

Counters live in prometheus_client's default registry (which also carries the process metrics:
`process_open_fds`, `process_resident_memory_bytes`, ...); series by the partition are rendered
as text by their modules (`add_text_source`). The endpoint is off unless
`causeway.metrics.listener=HOST:PORT` is set; it runs in a daemon thread of its own, so a scrape
never waits for the event loop and the loop never waits for a scrape. Names, and what to alert
on: docs/reference/metrics.md.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.exposition import ThreadingWSGIServer

from broker.address import format_host_port, parse_host_port

if TYPE_CHECKING:
    from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

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
    "add_text_source",
    "escape_label_value",
    "forget_topic",
    "serve_metrics",
    "track_open_segment_files",
    "ISR_EXPANDS",
    "ISR_SHRINKS",
    "FETCH_SESSION_EVICTIONS",
    "REPLICA_FETCH_REQUESTS",
    "REPLICA_FETCH_PARTITIONS",
    "track_fetch_sessions",
    "TXN_VERIFICATIONS",
    "TXN_VERIFICATION_FAILURES",
]

log = logging.getLogger(__name__)

# No `<counter>_created` series beside each counter: the JMX exporter's Kafka metrics have none,
# and they would double the series of every per-topic counter.
disable_created_metrics()  # type: ignore[no-untyped-call]

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


# Kafka's own metrics carry the names the Prometheus JMX exporter's Kafka rules give them
# (kafka.server:type=ReplicaManager,name=IsrShrinksPerSec -> kafka_server_replicamanager_isrshrinks_total),
# so dashboards and alerts written for Kafka read them unchanged. The gauges of the replica manager
# (under-replicated partitions and the like) are computed at scrape: broker/replication/replica_metrics.py.
ISR_SHRINKS = Counter("kafka_server_replicamanager_isrshrinks", "ISR shrinks written for partitions this broker "
                                                                "leads (Kafka's IsrShrinksPerSec).")
ISR_EXPANDS = Counter("kafka_server_replicamanager_isrexpands", "ISR expansions written for partitions this broker "
                                                                "leads (Kafka's IsrExpandsPerSec).")

FETCH_SESSIONS = Gauge(
    "kafka_server_fetchsessioncache_numincrementalfetchsessions",
    "Incremental fetch sessions (KIP-227) this broker keeps (Kafka's NumIncrementalFetchSessions).",
)
FETCH_SESSION_PARTITIONS = Gauge(
    "kafka_server_fetchsessioncache_numincrementalfetchpartitionscached",
    "Partitions cached in this broker's fetch sessions (Kafka's NumIncrementalFetchPartitionsCached).",
)
FETCH_SESSION_EVICTIONS = Counter(
    "kafka_server_fetchsessioncache_incrementalfetchsessionevictions",
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

# KIP-890: a partition leader's questions to transaction coordinators (broker/server/txn_verification.py).
TXN_VERIFICATION_FAILURES = Counter(
    "kafka_server_addpartitionstotxnmanager_verificationfailure",
    "Partitions whose transactional write the coordinator did not verify, or could not be asked about "
    "(Kafka's AddPartitionsToTxnManager VerificationFailureRate).",
)
TXN_VERIFICATIONS = Counter(
    "causeway_txn_verifications",
    "Verifications of a producer's transaction asked by this broker before a first transactional write, by "
    "coordinator: local (this broker) or remote (AddPartitionsToTxn v4+ to another broker).",
    ["coordinator"],
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


# Counters labelled by topic alone (messages and bytes in and out): a deleted topic's series go
# with it, as Kafka removes a topic's metrics, so topics made and deleted do not pile up.
TOPIC_COUNTERS: list[Counter] = []


def forget_topic(topic: str) -> None:
    """Drop the deleted `topic`'s series from every per-topic counter."""
    for counter in TOPIC_COUNTERS:
        counter.remove(topic)


# Text rendered straight in the exposition format, after the registry's metrics: for series by
# the ten thousand (one per partition), where building prometheus_client's sample objects would
# cost seconds of the interpreter's time and wake the garbage collector (strings are not
# tracked by it; sample tuples are). Each returns whole metric families.
TextSource = Callable[[], str]
TEXT_SOURCES: list[TextSource] = []


def add_text_source(render: TextSource) -> None:
    """Serve what `render()` returns (whole families, in the text format) with the default
    registry's metrics. Called from the endpoint's thread: it must only read."""
    TEXT_SOURCES.append(render)


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's name
        """Scrapes come every few seconds: not logged."""


def _metrics_app(registry: CollectorRegistry, texts: list[TextSource]) -> WSGIApplication:
    def app(environ: WSGIEnvironment, start_response: StartResponse) -> list[bytes]:
        body = generate_latest(registry) + "".join(render() for render in texts).encode()
        start_response("200 OK", [("Content-Type", CONTENT_TYPE_LATEST), ("Content-Length", str(len(body)))])
        return [body]

    return app


def escape_label_value(value: str) -> str:
    """`value` as a label value in the text format (a group id is any string a client chose)."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def serve_metrics(listener: str, *, registry: CollectorRegistry = REGISTRY, texts: list[TextSource] | None = None,
                  key: str = "causeway.metrics.listener") -> MetricsServer:
    """Bind `HOST:PORT` (port 0: a free port) and serve `registry` and the text sources `texts`
    (by default, with the default registry, those of `add_text_source`) at /metrics from a
    daemon thread, one more thread per scrape.

    Raises OSError naming the config `key` and address when it cannot bind.
    """
    host, port = parse_host_port(listener)

    class Server(ThreadingWSGIServer):
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

    if texts is None:
        texts = TEXT_SOURCES if registry is REGISTRY else []
    app = _metrics_app(registry, texts)
    try:
        server = make_server(host or "0.0.0.0", port, app, Server, handler_class=_QuietHandler)
    except OSError as exc:
        raise OSError(exc.errno, f"{key}: cannot listen on {listener}: {exc.strerror}") from exc
    thread = threading.Thread(target=server.serve_forever, name="metrics endpoint", daemon=True)
    thread.start()
    bound_host, bound_port = server.server_address[:2]
    return MetricsServer(str(bound_host), int(bound_port), server, thread)
