"""Kafka's request and per-topic traffic metrics: what requests came, how long they took, and
how many records and bytes went in and out of each topic.

Counted once per request, and per partition of a request, never per record: a batch header
already says how many records it holds (for an append, the offsets it was given), and a fetch
answer's record set is a file slice whose length is known. The call sites are one line each:
the connection loop (:func:`start_request`, :meth:`RequestTimer.done`), Produce and LinkAppend
(:func:`count_appended`), Fetch (:func:`count_fetched`, and :func:`fetch_from`, which counts
and times a fetch under Kafka's FetchFollower or FetchConsumer too, as Kafka does).

Names are the Prometheus JMX exporter's for Kafka's MBeans: ``kafka.network:type=RequestMetrics,
name=RequestsPerSec,request=Produce,version=9`` is ``kafka_network_requestmetrics_requests_total{
request="Produce",version="9"}``; ``kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec,
topic=T`` is ``kafka_server_brokertopicmetrics_messagesin_total{topic="T"}``. Kafka's timers
(RequestQueueTimeMs, TotalTimeMs) are histograms here, in milliseconds as their names say.

Queue time: Causeway has no request queue between network and handler threads; a connection
answers its requests in order. A request's queue time is from its last byte being read to its
handler starting: nearly nothing for a lone request, the wait behind the requests before it for
one a client pipelined. Total time runs on to the last byte of the answer handed to the socket.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol

import trio
from prometheus_client import Counter, Histogram, disable_created_metrics

from broker.metrics import TOPIC_COUNTERS
from broker.protocol.api import ApiKey

if TYPE_CHECKING:
    from broker.replication.append import AppendEntry, LeaderAppend
    from broker.storage.file_slice import FileSlice

__all__ = ["RequestTimer", "count_appended", "count_fetched", "fetch_from", "start_request"]

# As broker/metrics.py: no `_created` series, whichever module is imported first.
disable_created_metrics()  # type: ignore[no-untyped-call]

# Kafka's request names (ApiKeys.name): PRODUCE -> Produce, API_VERSIONS -> ApiVersions.
_NAMES = {int(key): "".join(word.capitalize() for word in key.name.split("_")) for key in ApiKey}
# Milliseconds: from well under Kafka's usual produce time to a long poll's maximum and beyond.
_BUCKETS_MS = (0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0, 30000.0)

REQUESTS = Counter("kafka_network_requestmetrics_requests", "Requests answered (or, acks=0, handled), by API and "
                                                            "version (Kafka's RequestsPerSec).", ["request", "version"])
QUEUE_TIME = Histogram("kafka_network_requestmetrics_requestqueuetimems",
                       "Milliseconds from a request's last byte read to its handler starting (Kafka's "
                       "RequestQueueTimeMs).", ["request"], buckets=_BUCKETS_MS)
TOTAL_TIME = Histogram("kafka_network_requestmetrics_totaltimems",
                       "Milliseconds from a request's last byte read to its answer sent, long polls included "
                       "(Kafka's TotalTimeMs).", ["request"], buckets=_BUCKETS_MS)

MESSAGES_IN = Counter("kafka_server_brokertopicmetrics_messagesin", "Records appended as leader from producers and "
                                                                    "link-mode mirrors (Kafka's MessagesInPerSec).",
                      ["topic"])
BYTES_IN = Counter("kafka_server_brokertopicmetrics_bytesin", "Record batch bytes appended as leader from producers "
                                                              "and link-mode mirrors (Kafka's BytesInPerSec).",
                   ["topic"])
BYTES_OUT = Counter("kafka_server_brokertopicmetrics_bytesout", "Record bytes in fetch answers to consumers (Kafka's "
                                                                "BytesOutPerSec).", ["topic"])
REPLICATION_BYTES_OUT = Counter("kafka_server_brokertopicmetrics_replicationbytesout",
                                "Record bytes in fetch answers to follower replicas (Kafka's "
                                "ReplicationBytesOutPerSec).", ["topic"])

TOPIC_COUNTERS.extend((MESSAGES_IN, BYTES_IN, BYTES_OUT, REPLICATION_BYTES_OUT))


class RequestTimer:
    """One request on its way through the connection: made when its handler starts."""

    __slots__ = ("_also", "_queue_ms", "_received_at", "_request", "_version")

    def __init__(self, request: str, version: int, received_at: float) -> None:
        self._request, self._version, self._received_at = request, version, received_at
        self._queue_ms = (trio.current_time() - received_at) * 1000
        self._also: str | None = None
        _CURRENT.set(self)

    def done(self) -> None:
        """The answer is sent (or, acks=0, none is due)."""
        total_ms = (trio.current_time() - self._received_at) * 1000
        for name in (self._request, self._also):
            if name is not None:
                requests, queue_time, total_time = _series(name, self._version)
                requests.inc()
                queue_time.observe(self._queue_ms)
                total_time.observe(total_ms)


# The labelled series of each (API, version) seen, looked up once: `labels()` takes the metric's
# lock and builds its key on every call, and this runs for every request. APIs and versions are
# a few hundred at most, and their series are never removed.
_SERIES: dict[tuple[str, int], tuple[Any, Any, Any]] = {}


def _series(name: str, version: int) -> tuple[Any, Any, Any]:
    found = _SERIES.get((name, version))
    if found is None:
        found = _SERIES[(name, version)] = (REQUESTS.labels(name, str(version)), QUEUE_TIME.labels(name),
                                            TOTAL_TIME.labels(name))
    return found


# The request the current connection task is handling: the fetch handler names it further.
_CURRENT: ContextVar[RequestTimer | None] = ContextVar("causeway_request_timer", default=None)


def fetch_from(follower: bool) -> None:
    """The fetch being handled is a follower replica's or a consumer's: counted and timed under
    Kafka's FetchFollower or FetchConsumer too, besides Fetch."""
    timer = _CURRENT.get()
    if timer is not None and timer._request == "Fetch":
        timer._also = "FetchFollower" if follower else "FetchConsumer"


class _Untimed:
    __slots__ = ()

    def done(self) -> None:
        pass


_UNTIMED = _Untimed()


def start_request(frame: memoryview, received_at: float) -> RequestTimer | _Untimed:
    """Time the request in `frame` (api key and version are its first four bytes), whose last
    byte was read at `received_at` (trio's clock). A frame naming no API is not counted: the
    dispatcher refuses it and closes the connection."""
    name = _NAMES.get(int.from_bytes(frame[0:2], "big", signed=True)) if len(frame) >= 4 else None
    if name is None:
        return _UNTIMED
    return RequestTimer(name, int.from_bytes(frame[2:4], "big", signed=True), received_at)


def count_appended(entries: Sequence[AppendEntry], appends: Sequence[LeaderAppend]) -> None:
    """Count what an append of one request's partitions wrote (a producer's retry that was all
    duplicates wrote nothing): records by the offsets they were given, bytes by the batches."""
    for entry, appended in zip(entries, appends, strict=True):
        result = appended.result
        if result is None or result.duplicate or entry.records is None:
            continue
        MESSAGES_IN.labels(appended.topic).inc(result.last_offset - result.first_offset + 1)
        BYTES_IN.labels(appended.topic).inc(_size(entry.records))


def _size(records: object) -> int:
    batches = getattr(records, "records", records)  # a link's CopiedBatches holds its bytes in `records`
    return len(batches) if isinstance(batches, bytes | bytearray | memoryview) else 0


class _Read(Protocol):
    topic_name: str
    follower: bool  # a follower replica's fetch


def count_fetched(wanted: Sequence[_Read], slices: Sequence[FileSlice | None]) -> None:
    """Count the record bytes of one fetch answer, by topic (`wanted` and `slices` run in step)."""
    for w, piece in zip(wanted, slices, strict=True):
        if piece is not None and piece.length:
            (REPLICATION_BYTES_OUT if w.follower else BYTES_OUT).labels(w.topic_name).inc(piece.length)
