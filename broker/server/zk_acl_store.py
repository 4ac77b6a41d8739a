"""A ZooKeeper-mode broker's ACLs: Kafka's znodes, shared by every broker and by ``kafka-acls``.

The znodes are Kafka's (broker/controller/zk/acls.py has the layout), their data Kafka's JSON
(``security.acl.encode_entries``), the change notifications Kafka's payloads:

- a literal pattern: ``<RESOURCE_TYPE>:<name>`` in UTF-8 (``TOPIC:orders``; the Java enum's name,
  Kafka's LiteralAclChangeStore; older Kafkas wrote ``Topic:orders``, read as well);
- a prefixed one: ``{"version":1,"resourceType":"TOPIC","name":"pay-","patternType":"PREFIXED"}``
  (Kafka's ExtendedAclChangeEvent).

Each broker loads every ACL before it serves, then follows the notifications and re-reads the
pattern each one names; CreateAcls and DeleteAcls update a pattern's znode by read-modify-write on
its version (retried when another broker or ``kafka-acls`` wrote it meanwhile), put the result in
force here and announce it to the others. The cache is the authorizer's (security/authorizer.py).

What anyone with write access to ZooKeeper may have left there is never trusted: a notification
that names no pattern, a resource type Kafka does not have, or a znode whose data is not Kafka's
JSON is logged (rate-limited, broker/log_limits.py) and skipped, never a crash. A pattern whose
znode cannot be read has no ACLs here (the authorizer is told it is unreadable) until someone
writes it again; see ``Authorizer.set_unreadable`` for why that fails closed.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Sequence

import trio

from broker.controller.base import AclZnode, AclZnodes
from broker.controller.zk.client import ZkError, ZkSessionExpired, ZkUnavailable  # loaded in ZooKeeper mode only
from broker.log_limits import limiter
from broker.retry import Backoff, retry, worth_reporting
from security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclError,
    PatternType,
    ResourcePattern,
    ResourceType,
    decode_entries,
    encode_entries,
)
from security.authorizer import Authorizer

__all__ = ["ZkAclStore", "decode_change", "encode_change"]

log = logging.getLogger(__name__)
_limited = limiter(log)

# The resource types with znodes (Kafka's AclEntry.ResourceTypes: all but ANY and UNKNOWN).
RESOURCE_TYPES = tuple(t for t in ResourceType if t not in (ResourceType.ANY, ResourceType.UNKNOWN))
_STORED_PATTERN_TYPES = (PatternType.LITERAL, PatternType.PREFIXED)
_EXTENDED_CHANGE_VERSION = 1
# ACL znodes read at once while a broker starts (kazoo pipelines them on its one connection).
LOAD_CONCURRENCY = 32
# How long a written change's notification is retried before the client is told it failed.
_ANNOUNCE_RETRY_S = 30.0

# A pattern's new entries from its current ones.
_Change = Callable[[frozenset[AccessControlEntry]], frozenset[AccessControlEntry]]


def encode_change(pattern: ResourcePattern) -> bytes:
    """The notification payload of a change of ``pattern``, as Kafka writes it."""
    if pattern.pattern_type is PatternType.LITERAL:
        return f"{pattern.resource_type.name}:{pattern.name}".encode()
    return json.dumps({"version": _EXTENDED_CHANGE_VERSION, "resourceType": pattern.resource_type.name,
                       "name": pattern.name, "patternType": pattern.pattern_type.name},
                      separators=(",", ":"), ensure_ascii=False).encode()


def decode_change(data: bytes, *, literal: bool) -> ResourcePattern:
    """The pattern a notification names (from the literal or the extended change path); AclError
    saying what is wrong with it."""
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise AclError(f"not UTF-8: {data[:80]!r}") from None
    if literal:
        resource_type, colon, name = text.partition(":")
        if not colon:
            raise AclError(f"expected <ResourceType>:<name>, got {text[:80]!r}")
        return _pattern(resource_type, name, PatternType.LITERAL)
    try:
        event = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise AclError(f"not JSON ({exc}): {text[:80]!r}") from None
    if not isinstance(event, dict) or not all(isinstance(event.get(k), str) for k in
                                               ("resourceType", "name", "patternType")):
        raise AclError(f"lacks resourceType, name or patternType: {text[:80]!r}")
    version = event.get("version")
    if not isinstance(version, int) or not 1 <= version <= _EXTENDED_CHANGE_VERSION:
        raise AclError(f"version {version!r} is not one Causeway reads")
    try:
        pattern_type = PatternType[event["patternType"].upper()]
    except KeyError:
        raise AclError(f"unknown pattern type {event['patternType'][:40]!r}") from None
    return _pattern(event["resourceType"], event["name"], pattern_type)


def _pattern(resource_type: str, name: str, pattern_type: PatternType) -> ResourcePattern:
    kind = ResourceType.from_title(resource_type[:40])
    if kind not in RESOURCE_TYPES or pattern_type not in _STORED_PATTERN_TYPES or not name:
        raise AclError(f"{resource_type[:40]} {pattern_type.name} {name[:80]!r} is not a resource pattern with ACLs")
    if "/" in name or name in (".", ".."):
        raise AclError(f"{name[:80]!r} cannot be a znode name: no ACLs are stored under it")
    return ResourcePattern(kind, name, pattern_type)


def _znode(pattern: ResourcePattern) -> AclZnode:
    return AclZnode(pattern.pattern_type.name, pattern.resource_type.title, pattern.name)


class ZkAclStore:
    """The ACLs of a ZooKeeper-mode cluster; see the module docstring."""

    def __init__(self, znodes: AclZnodes, authorizer: Authorizer) -> None:
        self._znodes = znodes
        self._authorizer = authorizer
        # One change or reload at a time: a reload that read a znode before our write must not
        # put its older data in force after ours.
        self._lock = trio.Lock()

    @property
    def authorizer(self) -> Authorizer:
        return self._authorizer

    async def load(self) -> None:
        """Fill the authorizer with every ACL in ZooKeeper (creating Kafka's ACL paths when
        missing), reading up to ``LOAD_CONCURRENCY`` znodes at once. Raises ZkError when
        ZooKeeper cannot be read (within the connection timeout): the broker does not start."""
        await self._znodes.prepare(t.title for t in RESOURCE_TYPES)
        patterns = []
        for node in await self._znodes.all():
            try:
                pattern = ResourcePattern(ResourceType.from_title(node.resource_type), node.name,
                                          PatternType[node.pattern_type])
                if pattern.resource_type not in RESOURCE_TYPES:
                    raise AclError(f"unknown resource type {node.resource_type!r}")
            except AclError as exc:
                _limited.warning("acl znode type", "ignoring ACL znode %s/%s: %s", node.resource_type, node.name, exc)
                continue
            patterns.append(pattern)
        limiter = trio.CapacityLimiter(LOAD_CONCURRENCY)

        async def load_one(pattern: ResourcePattern) -> None:
            async with limiter:
                await self._read_and_apply(pattern, wait_for_zookeeper=False)

        # Nothing else runs yet (no follow task, no requests): no lock needed.
        async with trio.open_nursery() as nursery:
            for pattern in patterns:
                nursery.start_soon(load_one, pattern)

    async def follow(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Re-read each pattern a change notification names, until cancelled. Ready once the
        notifications there at the start were applied."""
        await self._znodes.follow(self._on_notices, task_status=task_status)

    async def _on_notices(self, path: str, payloads: Sequence[bytes]) -> None:
        patterns: set[ResourcePattern] = set()
        for payload in payloads:
            try:
                patterns.add(decode_change(payload, literal=not path.startswith("/kafka-acl-extended")))
            except AclError as exc:
                # Anyone with write access to ZooKeeper can create these: one line per window.
                _limited.error("acl change notification", "ignoring ACL change notification under %s: %s", path, exc)
        for pattern in sorted(patterns):
            await self._reload(pattern)

    async def _reload(self, pattern: ResourcePattern) -> None:
        async with self._lock:
            await self._read_and_apply(pattern, wait_for_zookeeper=True)

    async def _read_and_apply(self, pattern: ResourcePattern, *, wait_for_zookeeper: bool) -> None:
        """Read the pattern's znode and put what it holds in force. ``wait_for_zookeeper``: retry
        while ZooKeeper is away (a running broker must not go on with ACLs it knows are stale);
        otherwise that raises ZkUnavailable or ZkSessionExpired."""
        def report(exc: Exception, failures: int) -> None:
            if worth_reporting(failures):
                log.warning("cannot read the ACLs of %s from ZooKeeper (%s); retrying (failure %d)",
                            _describe(pattern), exc, failures)

        unavailable = (ZkUnavailable, ZkSessionExpired)
        try:
            data = await retry(lambda: self._znodes.read(_znode(pattern)),
                               retriable=unavailable if wait_for_zookeeper else (), backoff=Backoff(0.5, 10.0),
                               on_failure=report, deadline=math.inf)
        except unavailable:
            raise
        except ValueError as exc:  # a name that cannot be a znode has none
            _limited.error("acl znode name", "no ACL znode for %s: %s", _describe(pattern), exc)
            return
        except ZkError as exc:  # refused (ZooKeeper's own ACLs, say): unknown entries
            self._fail_closed(pattern, str(exc))
            return
        self._put_in_force(pattern, data)

    def _fail_closed(self, pattern: ResourcePattern, reason: str) -> None:
        _limited.error("acl znode", "the ACL znode of %s cannot be read (%s): no ACLs of it are in force, and "
                       "every resource it covers is denied to all but super users until it is written again",
                       _describe(pattern), reason)
        self._authorizer.replace(pattern, ())
        self._authorizer.set_unreadable(pattern, True)

    def _put_in_force(self, pattern: ResourcePattern, data: bytes | None) -> None:
        try:
            entries = decode_entries(data) if data is not None else frozenset()
        except AclError as exc:
            self._fail_closed(pattern, str(exc))
            return
        self._authorizer.set_unreadable(pattern, False)
        self._authorizer.replace(pattern, entries)

    async def create(self, bindings: Sequence[AclBinding]) -> None:
        """Add each binding to its pattern's znode; raises ZkError or AclError (a znode that
        cannot be read is not overwritten) for the first pattern that could not be written (the
        patterns written before it stay written and in force)."""
        adding: dict[ResourcePattern, set[AccessControlEntry]] = {}
        for binding in bindings:
            adding.setdefault(binding.pattern, set()).add(binding.entry)
        for pattern, entries in sorted(adding.items()):
            await self._update(pattern, frozenset(entries).union)

    async def delete(self, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding]]:
        """Remove what each filter matches from the znodes, as Kafka's AclAuthorizer: the
        candidates are the patterns this broker knows of plus those a filter names exactly, and
        the filters are applied to each znode's data as it is when written. Each removed binding
        is reported under the first filter that matched it."""
        candidates = {b.pattern for b in self._authorizer.bindings() if any(f.matches(b) for f in filters)}
        for f in filters:
            if f.name is not None and f.resource_type in RESOURCE_TYPES and f.pattern_type in _STORED_PATTERN_TYPES:
                candidates.add(ResourcePattern(f.resource_type, f.name, f.pattern_type))
        removed: list[list[AclBinding]] = [[] for _ in filters]
        for pattern in sorted(candidates):
            found: list[tuple[int, AclBinding]] = []

            def without_matches(current: frozenset[AccessControlEntry], pattern: ResourcePattern = pattern,
                                found: list[tuple[int, AclBinding]] = found) -> frozenset[AccessControlEntry]:
                found.clear()  # computed again on each try
                kept = set()
                for entry in current:
                    binding = AclBinding(pattern, entry)
                    index = next((i for i, f in enumerate(filters) if f.matches(binding)), None)
                    if index is None:
                        kept.add(entry)
                    else:
                        found.append((index, binding))
                return frozenset(kept)

            await self._update(pattern, without_matches)
            for index, binding in sorted(found):
                removed[index].append(binding)
        return removed

    async def _update(self, pattern: ResourcePattern, change: _Change) -> None:
        def on_data(data: bytes | None) -> bytes | None:
            try:
                current = decode_entries(data) if data is not None else frozenset()
            except AclError as exc:
                raise AclError(f"the ACL znode of {_describe(pattern)} cannot be read ({exc}); fix or delete it "
                               "first") from None
            new = change(current)
            if new == current:
                return data
            return encode_entries(new) if new else None

        async with self._lock:
            before, after = await self._znodes.update(_znode(pattern), on_data)
            self._put_in_force(pattern, after)
        if before != after:
            await self._announce(pattern)

    async def _announce(self, pattern: ResourcePattern) -> None:
        """Retried a while (a notification sent twice only makes the brokers read twice); then
        the error goes to the client: the ACL is written, but other brokers may not know yet."""
        def report(exc: Exception, failures: int) -> None:
            log.warning("the ACLs of %s are written, but announcing the change failed (%s); retrying",
                        _describe(pattern), exc)

        await retry(lambda: self._znodes.announce(pattern.pattern_type.name, encode_change(pattern)),
                    retriable=(ZkUnavailable, ZkSessionExpired), backoff=Backoff(0.2, 5.0),
                    on_failure=report, deadline=trio.current_time() + _ANNOUNCE_RETRY_S)


def _describe(pattern: ResourcePattern) -> str:
    return f"{pattern.resource_type.title}:{pattern.pattern_type.name}:{pattern.name}"

