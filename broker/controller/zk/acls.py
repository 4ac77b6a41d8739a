"""Kafka's ACL znodes, as bytes: where they are, updates conditional on their version, and the
change notifications that tell every broker to re-read one.

The layout is Kafka's (ZooKeeper mode, AclAuthorizer's ZkAclStore and ZkAclChangeStore), so
``kafka-acls --authorizer-properties zookeeper.connect=...`` and Causeway read and write the same
ACLs::

    /kafka-acl/<Type>/<name>                       the entries of a literal pattern
    /kafka-acl-extended/prefixed/<Type>/<name>     the entries of a prefixed pattern
    /kafka-acl-changes/acl_changes_<seq>           "a literal pattern changed"
    /kafka-acl-extended-changes/acl_changes_<seq>  "a prefixed pattern changed"

``<Type>`` is Kafka's resource type name (``Topic``, ``Cluster``, ``TransactionalId``, ...). What
the bytes mean (the entries' JSON, the notifications' payloads) is not this module's business:
``broker/server/zk_acl_store.py`` reads and writes them with ``security/acl.py``, which the
controller package does not import.

An update is Kafka's read-modify-write: read the znode and its version, compute the new data,
then set it at that version (create it when absent, delete it when no entry is left); when
another writer got there first (another broker, or ``kafka-acls`` writing ZooKeeper itself) it
reads again and retries, so two writers adding ACLs to one resource at once lose neither.
Notifications older than 15 minutes are removed by whichever broker sees them, as Kafka's
brokers do.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence

import trio

from broker.controller.base import AclZnode
from broker.controller.zk.client import (
    ZkBadVersion,
    ZkClient,
    ZkError,
    ZkNodeExists,
    ZkNoNode,
    ZkSessionExpired,
    ZkUnavailable,
)
from broker.log_limits import limiter
from broker.retry import Backoff, retry, worth_reporting

__all__ = ["ACL_CHANGE_EXPIRY_MS", "ZkAclZnodes"]

log = logging.getLogger(__name__)
_limited = limiter(log)

LITERAL_ROOT = "/kafka-acl"
EXTENDED_ROOT = "/kafka-acl-extended"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
# The pattern types with znodes of their own (Kafka's PatternType.isSpecific).
PATTERN_TYPES = ("LITERAL", "PREFIXED")
# Notifications older than this are removed (Kafka's ZkNodeChangeNotificationListener).
ACL_CHANGE_EXPIRY_MS = 15 * 60 * 1000
# Conflicting writers before an update gives up (Kafka's AclAuthorizer: maxUpdateRetries), and
# the pause between tries (its retryBackoffMs plus a random share of retryBackoffJitterMs).
MAX_UPDATE_RETRIES = 10
_RETRY_BACKOFF_S = 0.1
_RETRY_JITTER_S = 0.05


def _root(pattern_type: str) -> str:
    if pattern_type == "LITERAL":
        return LITERAL_ROOT
    if pattern_type in PATTERN_TYPES:
        return f"{EXTENDED_ROOT}/{pattern_type.lower()}"
    raise ValueError(f"pattern type {pattern_type!r} has no ACL znodes")


def resource_path(node: AclZnode) -> str:
    """The znode of one pattern's entries; ValueError for a name that is not one path element."""
    if not node.name or "/" in node.name or node.name in (".", "..") or "/" in node.resource_type:
        raise ValueError(f"{node.resource_type} {node.name!r} cannot be a znode name")
    return f"{_root(node.pattern_type)}/{node.resource_type}/{node.name}"


def changes_path(pattern_type: str) -> str:
    """Where a change of a pattern of this type is announced (literal ones apart, as Kafka)."""
    return LITERAL_CHANGES if pattern_type == "LITERAL" else EXTENDED_CHANGES


class ConflictingUpdates(ZkError):
    """Other writers kept changing the znode: the update gave up (nothing of it was written)."""


class ZkAclZnodes:
    """The ACL znodes of one cluster, through this broker's ZooKeeper session."""

    def __init__(self, zk: ZkClient, *, rng: random.Random | None = None) -> None:
        self._zk = zk
        self._rng = rng or random.Random()

    async def prepare(self, resource_types: Iterable[str]) -> None:
        """Create the roots, one child per resource type and the two change paths when missing
        (Kafka's createAclPaths; kafka-acls and Kafka's brokers expect them)."""
        types = tuple(resource_types)
        for pattern_type in PATTERN_TYPES:
            for resource_type in types:
                await self._zk.ensure_path(f"{_root(pattern_type)}/{resource_type}")
        for path in (LITERAL_CHANGES, EXTENDED_CHANGES):
            await self._zk.ensure_path(path)

    async def all(self) -> list[AclZnode]:
        """Every pattern with a znode, whatever its resource type's name (the caller skips those
        it does not know, as Kafka does)."""
        found: list[AclZnode] = []
        for pattern_type in PATTERN_TYPES:
            try:
                resource_types = await self._zk.get_children(_root(pattern_type))
            except ZkNoNode:
                continue
            for resource_type in resource_types:
                try:
                    names = await self._zk.get_children(f"{_root(pattern_type)}/{resource_type}")
                except ZkNoNode:
                    continue
                found.extend(AclZnode(pattern_type, resource_type, name) for name in names)
        return found

    async def read(self, node: AclZnode) -> bytes | None:
        """The znode's data; None when it does not exist."""
        try:
            data, _ = await self._zk.get(resource_path(node))
        except ZkNoNode:
            return None
        return data

    async def update(self, node: AclZnode, change: Callable[[bytes | None], bytes | None]
                     ) -> tuple[bytes | None, bytes | None]:
        """Read-modify-write one pattern's znode: ``change`` gets its data (None: absent) and
        returns the new data (None: no entries left, the znode goes; the same bytes: nothing to
        write). Returns (before, after) of the write that won. ``change`` may run several times
        (once per conflicting writer) and may raise to abort. Raises ConflictingUpdates after
        ``MAX_UPDATE_RETRIES`` conflicts, ZkError when ZooKeeper fails, ValueError for a name
        that cannot be a znode."""
        path = resource_path(node)
        for _ in range(MAX_UPDATE_RETRIES + 1):
            try:
                before, stat = await self._zk.get(path)
                current: bytes | None = before
                version = stat.version
            except ZkNoNode:
                current, version = None, -1
            after = change(current)
            if after == current:
                return current, after
            try:
                if after is None:
                    await self._zk.delete(path, version=version)
                elif current is None:
                    await self._zk.create(path, after, make_parents=True)
                else:
                    await self._zk.set(path, after, version=version)
            except (ZkBadVersion, ZkNodeExists, ZkNoNode):
                # Another writer changed it between our read and our write: read again.
                await trio.sleep(_RETRY_BACKOFF_S + self._rng.random() * _RETRY_JITTER_S)
                continue
            return current, after
        raise ConflictingUpdates(f"gave up updating {path} after {MAX_UPDATE_RETRIES} conflicting updates by "
                                 "other writers", path)

    async def announce(self, pattern_type: str, payload: bytes) -> None:
        """Create the change notification that makes every broker re-read a pattern."""
        await self._zk.create(f"{changes_path(pattern_type)}/{CHANGE_PREFIX}", payload, sequence=True)

    async def follow(self, on_notices: Callable[[str, Sequence[bytes]], Awaitable[None]], *,
                     task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Call ``on_notices(changes path, payloads)`` with each batch of new notifications under
        both change paths, the ones there when it starts included (a change announced before the
        watch began is not missed), until cancelled; purge expired ones. Ready once the
        notifications there at the start were handed over."""
        async with trio.open_nursery() as nursery:
            for path in (LITERAL_CHANGES, EXTENDED_CHANGES):
                await nursery.start(self._follow_one, path, on_notices)
            task_status.started()

    async def _follow_one(self, path: str, on_notices: Callable[[str, Sequence[bytes]], Awaitable[None]], *,
                          task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        seen: set[str] = set()
        with self._zk.watch_children(path) as changes:
            async for children in changes:
                names = {c for c in children if c.startswith(CHANGE_PREFIX)}
                fresh = names - seen
                seen = names
                payloads = []
                for child in sorted(fresh):
                    data = await self._read_notice(f"{path}/{child}")
                    if data is not None:
                        payloads.append(data)
                if payloads:
                    await on_notices(path, payloads)
                if fresh:
                    await self._purge(path, sorted(names - fresh))
                task_status.started()
                task_status = trio.TASK_STATUS_IGNORED

    async def _read_notice(self, path: str) -> bytes | None:
        def report(exc: Exception, failures: int) -> None:
            if worth_reporting(failures):
                log.warning("cannot read ACL change notification %s (%s); retrying (failure %d)", path, exc, failures)

        async def attempt() -> bytes | None:
            try:
                data, _ = await self._zk.get(path)
            except ZkNoNode:
                return None  # purged meanwhile: its change was announced more than 15 minutes ago
            return data

        try:
            return await retry(attempt, retriable=(ZkUnavailable, ZkSessionExpired), backoff=Backoff(0.5, 10.0),
                               on_failure=report, deadline=math.inf)
        except ZkError as exc:  # refused (ZooKeeper's own ACLs, say): nothing to hand over
            _limited.error("acl change notification", "cannot read ACL change notification %s: %s", path, exc)
            return None

    async def _purge(self, path: str, children: Sequence[str]) -> None:
        expired_before = time.time() * 1000 - ACL_CHANGE_EXPIRY_MS
        for child in children:
            try:
                stat = await self._zk.exists(f"{path}/{child}")
                if stat is not None and stat.ctime < expired_before:
                    await self._zk.delete(f"{path}/{child}", version=stat.version)
            except ZkError:
                continue  # another broker purged it first, or ZooKeeper is away: next time
