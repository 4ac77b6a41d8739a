"""Incremental fetch sessions (KIP-227): the leader's cache of what each fetcher asked for.

Without sessions every Fetch names every partition it wants and every answer carries all of them,
so a follower of a thousand partitions makes the leader resolve, read and encode a thousand
partitions per round, and the round that carries an acks=all produce's batch (and the next one,
which reports the follower's new offset) costs as much: acks=all latency grows with the number
of partitions. With a session the fetcher names only the partitions whose fetch state changed and
the leader answers only the partitions that have something to say: records, a changed high
watermark or log start, or an error (Kafka's ``CachedPartition.maybeUpdateResponseData``).

The semantics are Kafka's (FetchSession.scala, FetchSessionHandler.java):

- ``session_epoch`` 0 (INITIAL) with ``session_id`` 0 asks for a new session: a full request and a
  full answer, whose ``session_id`` names the new session (0 when the cache has no room: the client
  goes on with full requests). A non-zero ``session_id`` with epoch 0 or -1 (FINAL) closes that
  session first; epoch -1 never creates one.
- An incremental request (epoch > 0) must name a live session (else FETCH_SESSION_ID_NOT_FOUND)
  with the epoch it expects next (else INVALID_FETCH_SESSION_EPOCH); its partitions are added or
  updated, its forgotten topics removed, and the epoch moves on (wrapping to 1 after 2^31 - 1).
- ``max.incremental.fetch.session.cache.slots`` sessions at most (Kafka's default 1000). When the
  cache is full a new session evicts one that was unused for 120 s (Kafka's
  MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS), or else the weakest session older than that, when
  the new one is stronger by (privileged, size): followers' sessions are privileged and may also
  evict a young consumer session. Otherwise the client is answered session id 0.

What differs from Kafka, for the per-request work: Kafka reads every cached partition on every
incremental fetch and drops the unchanged ones from the answer. Here each session keeps the set
of partitions worth reading (``pending``): those the request added or updated, those whose
partition told the session it changed (an append, a high watermark move, a role or epoch change:
the session is a watcher of each cached partition, see ``Partition.watch``), and those whose last
read found records or an error (read again until the client moves on, as Kafka would answer them
again). An incremental fetch reads, answers and waits on that set only; its long poll waits on
the session's own event, not on every partition. A log start moved by DeleteRecords or a
LinkAppend (``Partition.delete_records_before``) or by retention touches the partition too.

Bounds on what a client makes the leader hold: the slots; in a session only partitions this
broker hosts plus at most ``UNKNOWN_MAX`` it does not know (answered with their error every time,
as Kafka does, until forgotten); and a new session is refused when the cache already holds
``TOTAL_PER_BROKER_PARTITION`` entries per partition the broker may host (and a session that
grows past that through incremental fetches is dropped: FETCH_SESSION_ID_NOT_FOUND, then its
client's full fetch gets a session only if it fits).
"""

from __future__ import annotations

import logging
import random
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

import trio

from broker import metrics
from broker.protocol.messages import FetchRequest
from broker.replication.partition import Partition

__all__ = [
    "CachedPartition", "EVICTION_MS", "FINAL_EPOCH", "FetchSession", "FetchSessionCache", "INITIAL_EPOCH",
    "INVALID_SESSION_ID", "Key", "UNKNOWN_MAX", "key_of", "next_epoch",
]

log = logging.getLogger(__name__)

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_EPOCH_MAX = 2**31 - 1
# Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS: a session unused this long may be evicted by
# anyone, and a younger one only by... nobody (it is protected while its client settles in).
EVICTION_MS = 120_000
# Partitions a session may hold that this broker does not host (a consumer whose metadata is ahead
# of the broker's, a topic being created): bounded, since nothing else bounds names from a peer.
UNKNOWN_MAX = 100
# The cache's entries across all sessions, per partition this broker may host
# (max.broker.partitions): room for every follower and many consumers of each partition.
TOTAL_PER_BROKER_PARTITION = 10

# A cached partition by topic name and index; a topic unknown by id has no name and is keyed by
# its id, in a form no topic name can take (names are [a-zA-Z0-9._-]).
Key = tuple[str, int]


def key_of(topic: str, topic_id: uuid.UUID, index: int) -> Key:
    return (topic or f"\0{topic_id}", index)


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch`` (Kafka's FetchMetadata.nextEpoch)."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _EPOCH_MAX else epoch + 1


@dataclass(slots=True, eq=False)
class CachedPartition:
    """One partition of a session: what the client last asked, what it was last answered."""

    topic: str
    topic_id: uuid.UUID
    request: FetchRequest.FetchPartition
    high_watermark: int = -2  # as last answered; -2: never answered
    log_start_offset: int = -2
    last_stable_offset: int = -2
    watched: Partition | None = None  # the hosted partition this session watches


@dataclass(eq=False)
class FetchSession:
    """One client's session: its cached partitions and the ones worth reading next."""

    id: int
    replica_id: int  # the fetching broker, or -1 for a consumer
    created_ms: int
    last_used_ms: int
    epoch: int = 1  # the epoch its next request must carry
    partitions: dict[Key, CachedPartition] = field(default_factory=dict)
    pending: dict[Key, None] = field(default_factory=dict)  # an ordered set: read these next
    names: dict[uuid.UUID, str] = field(default_factory=dict)  # of the cached topics, to forget by id
    _changed: trio.Event | None = None
    unknown: int = 0  # cached partitions not hosted here
    cache: FetchSessionCache | None = None  # counts the partitions of all its sessions

    @property
    def privileged(self) -> bool:
        """A follower's session (Kafka: isFromFollower)."""
        return self.replica_id >= 0

    @property
    def last_fetch_ms(self) -> int:
        """The time of this session's latest request: a follower's session says, with it, that the
        follower still stood at the fetch offset it last sent for each of its partitions."""
        return self.last_used_ms

    def __repr__(self) -> str:
        who = f"replica {self.replica_id}" if self.privileged else "consumer"
        return f"FetchSession({self.id}, {who}, epoch {self.epoch}, {len(self.partitions)} partitions)"

    # -- the partitions' side (Partition's watcher protocol) ------------------------------

    def touched(self, partition: Partition) -> None:
        """``partition`` changed (append, high watermark, role): read it in the next answer."""
        key = (partition.topic, partition.index)
        cached = self.partitions.get(key)
        if cached is not None and cached.watched is partition:
            self.pending[key] = None
            self._set_changed()

    def _set_changed(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    async def wait_changed(self) -> None:
        """Return at the next change of a cached partition (the long poll of an incremental fetch)."""
        if self._changed is None:
            self._changed = trio.Event()
        await self._changed.wait()

    # -- the request's side ---------------------------------------------------------------

    def put(self, cached: CachedPartition, partition: Partition | None, *, pending: bool = True) -> None:
        """Add or update a partition from a request, watching ``partition`` (None: not hosted);
        ``pending``: read it for the next answer."""
        key = key_of(cached.topic, cached.topic_id, cached.request.partition)
        old = self.partitions.get(key)
        if old is not None:
            cached.high_watermark, cached.log_start_offset = old.high_watermark, old.log_start_offset
            cached.last_stable_offset = old.last_stable_offset
            self._drop(old)
        elif self.cache is not None:
            self.cache.cached += 1
        self.partitions[key] = cached
        if cached.topic_id.int and cached.topic:
            self.names[cached.topic_id] = cached.topic
            if len(self.names) > 2 * len(self.partitions) + UNKNOWN_MAX:  # forgotten topics' names
                self.names = {c.topic_id: c.topic for c in self.partitions.values() if c.topic}
        self._attach(cached, partition)
        if pending:
            self.pending[key] = None

    def watch(self, cached: CachedPartition, partition: Partition | None) -> None:
        """Watch ``partition`` for ``cached`` from now on (the hosted partition may have been
        replaced, or be gone: None)."""
        if cached.watched is not partition:
            self._drop(cached)
            self._attach(cached, partition)

    def forget(self, key: Key) -> None:
        cached = self.partitions.pop(key, None)
        self.pending.pop(key, None)
        if cached is not None:
            self._drop(cached)
            if self.cache is not None:
                self.cache.cached -= 1

    def _attach(self, cached: CachedPartition, partition: Partition | None) -> None:
        cached.watched = partition
        if partition is None:
            self.unknown += 1
        else:
            partition.watch(self)

    def _drop(self, cached: CachedPartition) -> None:
        if cached.watched is None:
            self.unknown -= 1
        else:
            cached.watched.unwatch(self)

    def close(self) -> None:
        """Stop watching every partition (the session left the cache)."""
        for cached in self.partitions.values():
            self._drop(cached)
        if self.cache is not None:
            self.cache.cached -= len(self.partitions)
            self.cache = None
        self.partitions.clear()
        self.pending.clear()
        self.unknown = 0
        self._set_changed()  # a long poll on it answers now


class FetchSessionCache:
    """The broker's fetch sessions (Kafka's FetchSessionCache), bounded as the module says.

    ``max_partitions`` bounds the entries of all sessions together at creation; a session's own
    partitions are bounded by the caller (:meth:`FetchSession.put` with ``UNKNOWN_MAX``).
    """

    def __init__(self, slots: int, max_partitions: int, eviction_ms: int = EVICTION_MS) -> None:
        self.slots = slots
        self.max_partitions = max_partitions
        self.eviction_ms = eviction_ms
        self._sessions: dict[int, FetchSession] = {}
        self.cached = 0  # partitions of all sessions
        self._random = random.Random()
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def total_partitions(self) -> int:
        """The partitions of all sessions together (kept as they change: the metrics thread
        reads it too)."""
        return self.cached

    def over_budget(self) -> bool:
        """Whether the sessions hold more partitions than the cache allows (a session grown by
        incremental fetches past it is dropped: its client starts over, full)."""
        return self.cached > self.max_partitions

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def sessions(self) -> Iterable[FetchSession]:
        return self._sessions.values()

    def remove(self, session_id: int) -> FetchSession | None:
        session = self._sessions.pop(session_id, None)
        if session is not None:
            session.close()
        return session

    def create(self, now_ms: int, replica_id: int, size: int) -> FetchSession | None:
        """A new empty session for a full fetch of ``size`` partitions, evicting one if the cache
        is full and it may (see the module); None when there is no room (session id 0)."""
        if self.slots <= 0:
            return None
        privileged = replica_id >= 0
        while len(self._sessions) >= self.slots or self.total_partitions() + size > self.max_partitions:
            if not self._try_evict(privileged, size, now_ms):
                return None
        session_id = self._new_id()
        session = FetchSession(session_id, replica_id, created_ms=now_ms, last_used_ms=now_ms, cache=self)
        self._sessions[session_id] = session
        return session

    def _new_id(self) -> int:
        while True:
            candidate = self._random.randint(1, _EPOCH_MAX)
            if candidate not in self._sessions:
                return candidate

    def _try_evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        """Kafka's tryEvict: the stalest session if unused past the eviction time, else the weakest
        evictable one when the new session is stronger."""
        if not self._sessions:
            return False
        stalest = min(self._sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now_ms - stalest.last_used_ms > self.eviction_ms:
            return self._evict(stalest, f"unused for {now_ms - stalest.last_used_ms} ms")

        def evictable(s: FetchSession) -> bool:
            settled = now_ms - s.created_ms > self.eviction_ms
            return settled or (privileged and not s.privileged)

        candidates = [s for s in self._sessions.values() if evictable(s)]
        if not candidates:
            return False
        weakest = min(candidates, key=lambda s: (s.privileged, len(s.partitions), s.id))
        if (privileged, size, 0) < (weakest.privileged, len(weakest.partitions), weakest.id):
            return False
        return self._evict(weakest, f"weaker than a new {'follower' if privileged else 'consumer'} "
                                    f"session of {size} partitions")

    def _evict(self, session: FetchSession, why: str) -> bool:
        log.info("evicted %r: %s", session, why)
        self.remove(session.id)
        self.evictions += 1
        metrics.FETCH_SESSION_EVICTIONS.inc()
        return True

