"""A client for a whole cluster: bootstrap, metadata, leaders, one lazy connection per broker.

Connections are keyed by address ("host:port"), so the bootstrap addresses and the brokers that
metadata names share one table. Each connection runs in a task of the client's nursery and is
opened on first use. A peer that fails (refused connect, failed handshake, connection lost with
a request in flight) is not tried again before a backoff delay that doubles with every failure
up to a cap, with jitter; a request that succeeds resets it. So a dead peer costs a bounded
number of attempts per unit of time whatever the callers do.

Two ways to send. `request_any` (metadata, bootstrap, descriptions) and a plain `request` keep
trying, with backoff, until the deadline: any broker will do, or the one named is the only one
that can answer. A request routed to a partition's leader (`request(..., fail_fast=True)`:
produce, fetch, list offsets, LinkAppend) makes at most one connect and one send: a leader that
is down, backing off, or drops the connection fails the call at once with `ConnectionFailed`
and marks metadata stale, because its partitions are being taken over by another broker that
only fresh metadata names; the caller's next attempt, after its own backoff, goes there. This is
Apache Kafka's NetworkClient: a disconnect fails the node's in-flight requests
(DisconnectException) and requests a metadata update, a node in reconnect backoff is not sent
to, and the producer and consumer retry against the leader that metadata then names.

Every call has a deadline: the caller's cancel scope (`trio.fail_after`), or the client's request
timeout when no scope sets one. Retries and backoff stop at that deadline with the last real
error (`RequestTimeout` or `ConnectionFailed` naming the broker), never a bare TooSlowError.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Container, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import trio

from broker.address import format_host_port, parse_host_port
from broker.client.connection import (
    DEFAULT_MAX_FRAME_SIZE,
    BrokerConnection,
    ConnectionFailed,
    Message,
    RequestTimeout,
    open_connection,
    unwrap_single_exception,
)
from broker.client.deadline import timeout_error
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.messages import MetadataRequest, MetadataResponse
from broker.retry import Backoff

if TYPE_CHECKING:
    from security.client import ClientSecurity

__all__ = [
    "Backoff",
    "BrokerInfo",
    "LEADER_MOVED",
    "Client",
    "ClientStatistics",
    "ClusterMetadata",
    "NodeNotReady",
    "PartitionMetadata",
    "TopicMetadata",
    "TopicPartition",
    "asked_for",
    "open_client",
    "parse_bootstrap",
]

P = TypeVar("P")

# Fetch v13+ names topics only by id; Causeway's client speaks names.
DEFAULT_VERSION_CAPS: Mapping[int, int] = {ApiKey.FETCH: 12}


# Errors of a login the broker refused: raised to the caller, never retried as a connection failure.
AUTHENTICATION_ERRORS = frozenset({ErrorCode.SASL_AUTHENTICATION_FAILED, ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                                   ErrorCode.ILLEGAL_SASL_STATE})


class TopicPartition(NamedTuple):
    topic: str
    partition: int


# Errors of a produced or appended partition after which its leader may have moved.
LEADER_MOVED: frozenset[int] = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION})


def asked_for(
    answers: Iterable[tuple[str, int, P]], asked: Container[TopicPartition]
) -> Iterator[tuple[TopicPartition, P]]:
    """The (topic, partition, answer) triples of a response that answer a partition in `asked`,
    keyed by partition; an answer for a partition nobody asked about is passed over."""
    for topic, partition, answer in answers:
        tp = TopicPartition(topic, partition)
        if tp in asked:
            yield tp, answer


class NodeNotReady(ConnectionFailed):
    """A request routed to a partition's leader was not sent: the leader could not be connected
    to, is backing off after a failure, or has left the cluster's metadata (Kafka's "node not
    ready"). Sending it again cannot duplicate anything; metadata was marked stale."""


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None

    @property
    def address(self) -> str:
        return format_host_port(self.host, self.port)


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    partition: int
    leader: int  # -1 when there is none
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error: int = ErrorCode.NONE


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    name: str
    partitions: Mapping[int, PartitionMetadata]
    is_internal: bool = False
    error: int = ErrorCode.NONE

    @property
    def partition_count(self) -> int:
        return len(self.partitions)


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    cluster_id: str | None = None
    controller_id: int = -1
    brokers: Mapping[int, BrokerInfo] = field(default_factory=dict)
    topics: Mapping[str, TopicMetadata] = field(default_factory=dict)

    def partition(self, tp: TopicPartition) -> PartitionMetadata | None:
        """`tp`'s metadata, or None when its topic or partition is not known."""
        topic = self.topics.get(tp.topic)
        return topic.partitions.get(tp.partition) if topic is not None else None

    def leader(self, tp: TopicPartition) -> int | None:
        """The leader's node id, or None when unknown or leaderless."""
        part = self.partition(tp)
        if part is None or part.leader < 0:
            return None
        return part.leader

    def leader_epoch(self, tp: TopicPartition) -> int:
        """`tp`'s leader epoch, or -1 when it is not known."""
        part = self.partition(tp)
        return part.leader_epoch if part is not None else -1


@dataclass(frozen=True, slots=True)
class ClientStatistics:
    connect_attempts: int
    open_connections: int
    requests_in_flight: int
    # Connects started to each peer ("host:port"), so a test or an operator can see that a dead
    # broker costs a bounded number of attempts.
    connect_attempts_by_peer: Mapping[str, int] = field(default_factory=dict)
    metadata_requests: int = 0  # Metadata requests sent (every refresh, full or for some topics)


def parse_bootstrap(bootstrap: str | Sequence[str]) -> list[tuple[str, int]]:
    """"host:port,host:port" (or a list of "host:port") as (host, port) pairs.

    Raises ValueError on an entry without a host or a port 0..65535. IPv6 hosts go in brackets.
    """
    items = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
    out: list[tuple[str, int]] = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        host, port = parse_host_port(item, "bootstrap address")
        if not host:
            raise ValueError(f"bootstrap address {item!r} has no host")
        out.append((host, port))
    if not out:
        raise ValueError("empty bootstrap list")
    return out


@dataclass
class _Peer:
    host: str
    port: int
    lock: trio.Lock = field(default_factory=trio.Lock)
    connection: BrokerConnection | None = None
    failures: int = 0
    next_attempt_at: float = float("-inf")
    last_error: Exception | None = None
    counted_loss: BrokerConnection | None = None
    connect_attempts: int = 0


class Client:
    """A cluster client. Build it with `open_client`; safe to share between tasks."""

    def __init__(
        self,
        nursery: trio.Nursery,
        bootstrap: Sequence[tuple[str, int]],
        *,
        client_id: str | None,
        request_timeout_s: float,
        connect_timeout_s: float,
        backoff: Backoff,
        version_caps: Mapping[int, int],
        max_frame_size: int,
        security: ClientSecurity | None = None,
    ) -> None:
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.backoff = backoff
        self._nursery = nursery
        self._bootstrap = [format_host_port(h, p) for h, p in bootstrap]
        self._version_caps = dict(version_caps)
        self._max_frame_size = max_frame_size
        self._security = security
        self._peers: dict[str, _Peer] = {}
        for host, port in bootstrap:
            self._peers.setdefault(format_host_port(host, port), _Peer(host, port))
        self._metadata = ClusterMetadata()
        self._metadata_stale = True  # everything must be fetched again
        self._stale_topics: set[str] = set()  # these topics' leaders must be fetched again
        self._rng = random.Random()
        self._connect_attempts = 0
        self._metadata_requests = 0
        self._closed = False

    # -- metadata ---------------------------------------------------------------------

    @property
    def metadata(self) -> ClusterMetadata:
        """The metadata last fetched (empty before the first refresh)."""
        return self._metadata

    def note_partition_error(self, topic: str, error_code: int, leader_moved: Container[int] = LEADER_MOVED) -> None:
        """Mark `topic`'s metadata stale when a partition's `error_code` is one of `leader_moved`
        (its leader may be another broker now)."""
        if error_code in leader_moved:
            self.invalidate_metadata([topic])

    def invalidate_metadata(self, topics: Iterable[str] | None = None) -> None:
        """Make the next lookups fetch fresh metadata: for `topics` (after NOT_LEADER_OR_FOLLOWER
        from one of their partitions, say), or for everything when None."""
        if topics is None:
            self._metadata_stale = True
        else:
            self._stale_topics.update(topics)

    async def refresh_metadata(self, topics: Iterable[str] | None = None) -> ClusterMetadata:
        """Fetch metadata from any reachable broker and return it.

        `topics` None asks for every topic and replaces the cached view; a list asks for those
        only and merges them into it (their per-topic error codes included, e.g.
        UNKNOWN_TOPIC_OR_PARTITION). Never creates topics.
        Raises ConnectionFailed / RequestTimeout when no broker answers in time.
        """
        names = None if topics is None else list(topics)
        request = MetadataRequest(
            topics=None if names is None else [MetadataRequest.MetadataRequestTopic(name=n) for n in names],
            allow_auto_topic_creation=False,
        )
        self._metadata_requests += 1
        response: MetadataResponse = await self.request_any(request)
        fresh = metadata_from_response(response)
        if names is not None:
            merged = dict(self._metadata.topics)
            merged.update(fresh.topics)
            if self._metadata_stale:
                # Brokers and controller came fresh with this answer; the cached topics it did
                # not cover stay stale one by one, so the whole view is not fetched again and
                # again (a partial refresh never clears the global mark otherwise).
                self._stale_topics.update(t for t in self._metadata.topics if t not in fresh.topics)
                self._metadata_stale = False
            fresh = ClusterMetadata(fresh.cluster_id, fresh.controller_id, fresh.brokers, merged)
        self._metadata = fresh
        if names is None:
            self._metadata_stale = False
            self._stale_topics.clear()
        else:
            self._stale_topics.difference_update(names)
        for broker in fresh.brokers.values():
            self._peers.setdefault(broker.address, _Peer(broker.host, broker.port))
        return fresh

    async def leader_for(self, tp: TopicPartition) -> BrokerInfo:
        """The broker leading `tp`, refreshing metadata when it is unknown or stale.

        Raises KafkaError(UNKNOWN_TOPIC_OR_PARTITION) for a topic or partition the cluster
        does not have, KafkaError(LEADER_NOT_AVAILABLE) when the partition has no leader,
        ConnectionFailed when metadata cannot be fetched in time.
        """
        found = (await self.leaders_for([tp]))[tp]
        if isinstance(found, KafkaError):
            raise found
        return found

    async def leaders_for(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, BrokerInfo | KafkaError]:
        """The leader of each partition, with at most one metadata refresh (for the topics
        whose leaders are unknown, or all of them when metadata is stale). A partition without
        a usable leader maps to the KafkaError saying why. Raises ConnectionFailed when a
        needed refresh fails."""
        wanted = list(dict.fromkeys(tps))
        missing = [
            tp
            for tp in wanted
            if self._metadata_stale or tp.topic in self._stale_topics or self._known_leader(tp) is None
        ]
        if missing:
            await self.refresh_metadata(sorted({tp.topic for tp in missing}))
        out: dict[TopicPartition, BrokerInfo | KafkaError] = {}
        for tp in wanted:
            broker = self._known_leader(tp)
            if broker is not None:
                out[tp] = broker
                continue
            topic = self._metadata.topics.get(tp.topic)
            if topic is None or tp.partition not in topic.partitions:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                if topic is not None and topic.error not in (ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
                    code = ErrorCode(topic.error)
                out[tp] = KafkaError(code, f"{tp.topic}-{tp.partition}")
            else:
                part = topic.partitions[tp.partition]
                code = ErrorCode(part.error) if part.error != ErrorCode.NONE else ErrorCode.LEADER_NOT_AVAILABLE
                out[tp] = KafkaError(code, f"{tp.topic}-{tp.partition}")
        return out

    async def partitions_by_leader(
        self, tps: Iterable[TopicPartition]
    ) -> tuple[dict[int, list[TopicPartition]], dict[TopicPartition, KafkaError]]:
        """`leaders_for`, grouped for one request per broker: the partitions each leader leads
        (by node id), and the partitions without a usable leader with the KafkaError saying why.
        Raises ConnectionFailed when a needed refresh fails."""
        by_leader: dict[int, list[TopicPartition]] = {}
        leaderless: dict[TopicPartition, KafkaError] = {}
        for tp, leader in (await self.leaders_for(tps)).items():
            if isinstance(leader, KafkaError):
                leaderless[tp] = leader
            else:
                by_leader.setdefault(leader.node_id, []).append(tp)
        return by_leader, leaderless

    def _known_leader(self, tp: TopicPartition) -> BrokerInfo | None:
        leader = self._metadata.leader(tp)
        return None if leader is None else self._metadata.brokers.get(leader)

    # -- requests ---------------------------------------------------------------------

    async def request(
        self,
        node_id: int,
        msg: Message,
        *,
        max_version: int | None = None,
        idempotent: bool = True,
        fail_fast: bool = False,
    ) -> Any:
        """Send `msg` to broker `node_id` and return its decoded response.

        `idempotent` says the request may be sent again when its connection fails before the
        answer arrives (reads, metadata, idempotent produce); otherwise that failure is raised.
        Raises KafkaError(BROKER_NOT_AVAILABLE) for a node id metadata does not name,
        ConnectionFailed / RequestTimeout when the deadline passes, KafkaError for
        UNSUPPORTED_VERSION. Error codes inside the response are the caller's.

        `fail_fast`, for a request routed to a partition's leader by metadata: one attempt. A
        node that is backing off after a failure, refuses the connect, or drops the connection
        before answering raises `ConnectionFailed` at once (`NodeNotReady` when the request was
        never sent), and metadata is marked stale, so the caller's next attempt (after its own
        backoff) goes to the leader fresh metadata names. A node id metadata no longer names
        raises `NodeNotReady` too. `idempotent` does not matter then: nothing is resent here.
        """
        with self.deadline(type(msg).__name__):
            broker = self._metadata.brokers.get(node_id)
            if broker is None and fail_fast:
                # Metadata changed since the caller picked this leader: the node left the cluster.
                self._metadata_stale = True
                raise NodeNotReady(f"node {node_id} is no longer in the cluster's metadata")
            if broker is None:
                await self.refresh_metadata()
                broker = self._metadata.brokers.get(node_id)
                if broker is None:
                    raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, f"no broker with node id {node_id} in metadata")
            peer = self._peers.setdefault(broker.address, _Peer(broker.host, broker.port))
            if fail_fast:
                return await self._request_once(peer, msg, max_version)
            return await self._request_peers([peer], msg, max_version, idempotent)

    async def request_any(self, msg: Message, *, max_version: int | None = None, idempotent: bool = True) -> Any:
        """Send `msg` to any reachable broker (connected ones first, then the others that
        metadata names, then the bootstrap list) and return its response. Raises as `request`.
        """
        with self.deadline(type(msg).__name__):
            return await self._request_peers(self._candidates(), msg, max_version, idempotent)

    async def request_controller(self, msg: Message, *, max_version: int | None = None) -> Any:
        """Send `msg` to the controller named by metadata (any broker when none is named, as
        KRaft brokers forward admin requests). Not resent after a failure in flight."""
        with self.deadline(type(msg).__name__):
            if self._metadata_stale or self._metadata.controller_id < 0:
                await self.refresh_metadata()
            controller = self._metadata.brokers.get(self._metadata.controller_id)
            if controller is None:
                return await self._request_peers(self._candidates(), msg, max_version, False)
            peer = self._peers.setdefault(controller.address, _Peer(controller.host, controller.port))
            return await self._request_peers([peer], msg, max_version, False)

    async def connection(self, node_id: int) -> BrokerConnection:
        """The (negotiated) connection to broker `node_id`, opened if need be."""
        broker = self._metadata.brokers.get(node_id)
        if broker is None:
            raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, f"no broker with node id {node_id} in metadata")
        peer = self._peers.setdefault(broker.address, _Peer(broker.host, broker.port))
        with self.deadline(f"connect to node {node_id}"):
            return await self._connect(peer)

    def statistics(self) -> ClientStatistics:
        conns = [p.connection for p in self._peers.values() if p.connection is not None and not p.connection.closed]
        return ClientStatistics(
            connect_attempts=self._connect_attempts,
            open_connections=len(conns),
            requests_in_flight=sum(c.in_flight for c in conns),
            connect_attempts_by_peer={address: p.connect_attempts for address, p in self._peers.items()},
            metadata_requests=self._metadata_requests,
        )

    def close(self) -> None:
        """Close every connection; later requests raise ConnectionFailed."""
        self._closed = True
        for peer in self._peers.values():
            if peer.connection is not None:
                peer.connection.close()

    # -- internals --------------------------------------------------------------------

    def deadline(self, what: str, *, extra_s: float = 0.0) -> AbstractContextManager[trio.CancelScope]:
        """A call's deadline as a cancel scope: the caller's (`trio.fail_after` around the call),
        or the request timeout plus `extra_s` from now when the caller set none. The deadline
        passing where nothing more telling is said raises RequestTimeout naming `what`."""

        def passed(seconds: float) -> RequestTimeout:
            return RequestTimeout(f"{what}: no answer within {seconds:.3g}s; {self._peer_report()}")

        return timeout_error(passed, default_s=self.request_timeout_s + extra_s)

    def _peer_report(self) -> str:
        """Where the client tried and what each peer last answered, for a timeout's message: a
        deadline can pass before any attempt failed (a loaded machine), and the operator still
        needs the addresses."""
        failing = [f"{address}: {peer.last_error}" for address, peer in self._peers.items()
                   if peer.last_error is not None]
        if failing:
            return "last errors: " + "; ".join(failing)
        return "peers: " + ", ".join(self._peers)

    def _candidates(self) -> list[_Peer]:
        known = [self._peers[b.address] for b in self._metadata.brokers.values() if b.address in self._peers]
        bootstrap = [self._peers[a] for a in self._bootstrap]
        ordered: list[_Peer] = []
        for peer in [*known, *bootstrap]:
            if peer not in ordered:
                ordered.append(peer)
        # Live connections first, then peers not backing off, each group in random order.
        self._rng.shuffle(ordered)
        now = trio.current_time()

        def rank(p: _Peer) -> int:
            if p.connection is not None and not p.connection.closed:
                return 0
            return 1 if p.next_attempt_at <= now else 2

        ordered.sort(key=rank)
        return ordered

    async def _request_peers(
        self, peers: Sequence[_Peer], msg: Message, max_version: int | None, idempotent: bool
    ) -> Any:
        deadline = trio.current_effective_deadline()
        last_error: ConnectionFailed | None = None
        # Each pass either makes a request or fails one connect per peer; between passes it
        # sleeps until the earliest backoff expires, so the loop cannot spin. The deadline ends it.
        while True:
            for peer in peers:
                if trio.current_time() >= deadline:
                    break
                try:
                    conn = await self._connect(peer)
                except ConnectionFailed as exc:
                    last_error = exc
                    continue
                try:
                    return await self._send(peer, conn, msg, max_version)
                except ConnectionFailed as exc:
                    self._metadata_stale = True
                    if not idempotent:
                        raise
                    last_error = exc
                    continue
            now = trio.current_time()
            if now >= deadline or self._closed:
                break
            # A peer never marked as failing would make its wake-up lie in the past: never spin.
            wake = max(min(p.next_attempt_at for p in peers), now + self.backoff.initial_s)
            if wake >= deadline:
                break
            await trio.sleep_until(wake)
        if last_error is None:
            last_error = RequestTimeout(f"{type(msg).__name__}: deadline passed before it could be sent")
        raise last_error

    async def _request_once(self, peer: _Peer, msg: Message, max_version: int | None) -> Any:
        """One connect (none while the peer backs off) and one send; see `request(fail_fast=True)`."""
        try:
            conn = await self._connect(peer, wait_for_backoff=False)
        except ConnectionFailed as exc:
            self._metadata_stale = True
            if isinstance(exc, NodeNotReady) or trio.current_time() >= trio.current_effective_deadline():
                raise  # (the caller's deadline passing is its RequestTimeout, not the node's fault)
            raise NodeNotReady(str(exc)) from exc
        try:
            return await self._send(peer, conn, msg, max_version)
        except ConnectionFailed:
            self._metadata_stale = True  # the node may be gone: Kafka asks for a metadata update
            raise

    async def _send(self, peer: _Peer, conn: BrokerConnection, msg: Message, max_version: int | None) -> Any:
        """`msg` on `conn`; a lost connection counts as one failure of `peer`, an answer resets
        its backoff."""
        try:
            response = await conn.request(msg, max_version=max_version)
        except ConnectionFailed as exc:
            if peer.counted_loss is not conn:  # one lost connection is one failure,
                peer.counted_loss = conn  # however many requests it took down with it
                self._record_failure(peer, exc)
            raise
        peer.failures = 0
        peer.next_attempt_at = float("-inf")
        return response

    def _record_failure(self, peer: _Peer, error: Exception) -> None:
        peer.failures += 1
        peer.last_error = error
        peer.next_attempt_at = trio.current_time() + self.backoff.delay(peer.failures, self._rng)

    async def _connect(self, peer: _Peer, *, wait_for_backoff: bool = True) -> BrokerConnection:
        """The peer's live connection, or a new one once its backoff has passed (at once:
        `NodeNotReady` while it lasts, when not `wait_for_backoff`).

        Raises ConnectionFailed when the connect fails or cannot start before the deadline.
        """
        address = format_host_port(peer.host, peer.port)

        def passed(seconds: float) -> RequestTimeout:
            error = RequestTimeout(f"connect to {address}: deadline passed")
            self._record_failure(peer, error)
            return error

        with timeout_error(passed) as scope:
            deadline = scope.deadline
            async with peer.lock:
                if self._closed:
                    raise ConnectionFailed("client closed")
                if peer.connection is not None and not peer.connection.closed:
                    return peer.connection
                if peer.next_attempt_at >= deadline or (
                    not wait_for_backoff and peer.next_attempt_at > trio.current_time()
                ):
                    raise NodeNotReady(
                        f"{address}: backing off after {peer.failures} failure(s); last: {peer.last_error}"
                    )
                await trio.sleep_until(peer.next_attempt_at)
                self._connect_attempts += 1
                peer.connect_attempts += 1
                try:
                    conn: BrokerConnection = await self._nursery.start(self._run_connection, peer.host, peer.port)
                except ConnectionFailed as exc:
                    self._record_failure(peer, exc)
                    raise
                except KafkaError as exc:  # the broker refused the ApiVersions handshake or the login
                    self._record_failure(peer, exc)
                    if exc.code in AUTHENTICATION_ERRORS:
                        # As Kafka's clients: a refused login is not a broker that is away, and
                        # asking again with the same credentials only gets the same answer.
                        raise
                    raise ConnectionFailed(f"{address}: {exc}") from exc
                peer.connection = conn
                return conn

    async def _run_connection(
        self, host: str, port: int, *, task_status: trio.TaskStatus[BrokerConnection] = trio.TASK_STATUS_IGNORED
    ) -> None:
        async with open_connection(
            host,
            port,
            client_id=self.client_id,
            request_timeout_s=self.request_timeout_s,
            connect_timeout_s=self.connect_timeout_s,
            version_caps=self._version_caps,
            max_frame_size=self._max_frame_size,
            security=self._security,
        ) as conn:
            task_status.started(conn)
            await conn.wait_closed()


def metadata_from_response(response: MetadataResponse) -> ClusterMetadata:
    brokers = {b.node_id: BrokerInfo(b.node_id, b.host, b.port, b.rack) for b in response.brokers}
    topics: dict[str, TopicMetadata] = {}
    for t in response.topics:
        if t.name is None:
            continue
        partitions = {
            p.partition_index: PartitionMetadata(
                partition=p.partition_index,
                leader=p.leader_id,
                leader_epoch=p.leader_epoch,
                replicas=tuple(p.replica_nodes),
                isr=tuple(p.isr_nodes),
                error=p.error_code,
            )
            for p in t.partitions
        }
        topics[t.name] = TopicMetadata(t.name, partitions, t.is_internal, t.error_code)
    return ClusterMetadata(response.cluster_id, response.controller_id, brokers, topics)


@asynccontextmanager
async def open_client(
    bootstrap: str | Sequence[str],
    *,
    client_id: str | None = "causeway",
    request_timeout_s: float = 30.0,
    connect_timeout_s: float = 10.0,
    backoff: Backoff | None = None,
    version_caps: Mapping[int, int] | None = None,
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    security: ClientSecurity | None = None,
) -> AsyncIterator[Client]:
    """A cluster client for `bootstrap` ("host:port,host:port"); connections close on exit.
    `security`: TLS and SASL for every connection (``security.client.client_security``).

    Nothing is contacted until the first request: a cluster that is down at start is not an
    error here (a request then fails at its deadline). `version_caps` adds to the built-in cap
    Fetch <= 12.
    Raises ValueError for a malformed bootstrap list.
    """
    peers = parse_bootstrap(bootstrap)
    caps = dict(DEFAULT_VERSION_CAPS)
    for key, cap in (version_caps or {}).items():
        caps[key] = min(cap, caps.get(key, cap))
    with unwrap_single_exception():
        async with trio.open_nursery() as nursery:
            client = Client(
                nursery,
                peers,
                client_id=client_id,
                request_timeout_s=request_timeout_s,
                connect_timeout_s=min(connect_timeout_s, request_timeout_s),
                backoff=backoff or Backoff(),
                version_caps=caps,
                max_frame_size=max_frame_size,
                security=security,
            )
            try:
                yield client
            finally:
                client.close()
