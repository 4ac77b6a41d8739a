"""Where a broker keeps its ACLs, and the standalone broker's store: one file in the data dir
(a ZooKeeper-mode broker's is broker/server/zk_acl_store.py).

A store owns the authorizer's cache (``security.authorizer.Authorizer``): it fills it at start
and keeps it current after every change it makes or (in ZooKeeper mode) hears of, so requests
are decided from memory. ``CreateAcls``/``DeleteAcls`` go through ``create``/``delete``.

The standalone store writes ``__acls.json`` beside ``cluster-metadata.json`` (atomically, off the
event loop): Kafka has no standalone mode, so the format is our own, with Kafka's names in it. A
file that cannot be read stops the start: a broker that lost its ACLs must not serve as if it had
none (with ``allow.everyone.if.no.acl.found`` it would let everyone in).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import trio

from broker.atomic_file import write_atomically
from broker.config import StartupError
from broker.server.startup_file import read_startup_file
from security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclError,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from security.authorizer import Authorizer

__all__ = ["ACL_FILE", "AclStore", "FileAclStore"]

ACL_FILE = "__acls.json"


class AclStore(Protocol):
    @property
    def authorizer(self) -> Authorizer: ...

    async def create(self, bindings: Sequence[AclBinding]) -> None:
        """Add ``bindings`` (each already checked); raises OSError, ZkError or AclError when they
        could not be stored (standalone, none of them is in force then; in ZooKeeper mode, where
        each resource pattern is its own znode, those written before the failure are)."""
        ...

    async def delete(self, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding]]:
        """Remove every ACL each filter matches; the removed ones, per filter."""
        ...


def apply_changes(authorizer: Authorizer, added: Sequence[AclBinding], removed: Sequence[AclBinding]
                  ) -> dict[ResourcePattern, frozenset[AccessControlEntry]]:
    """The new entries of every pattern ``added`` and ``removed`` touch (the cache unchanged)."""
    changed: dict[ResourcePattern, set[AccessControlEntry]] = {}
    for binding in (*added, *removed):
        changed.setdefault(binding.pattern, set(authorizer.entries(binding.pattern)))
    for binding in added:
        changed[binding.pattern].add(binding.entry)
    for binding in removed:
        changed[binding.pattern].discard(binding.entry)
    return {pattern: frozenset(entries) for pattern, entries in changed.items()}


def matched(authorizer: Authorizer, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding]]:
    return [list(authorizer.bindings(f)) for f in filters]


class FileAclStore:
    """A standalone broker's ACLs, in one file."""

    def __init__(self, directory: Path, authorizer: Authorizer) -> None:
        self._path = directory / ACL_FILE
        self._authorizer = authorizer
        self._lock = trio.Lock()  # one change at a time: each rewrites the whole file

    @property
    def authorizer(self) -> Authorizer:
        return self._authorizer

    def load(self) -> None:
        """Fill the authorizer from the file (none yet: no ACLs). Raises StartupError."""
        data = read_startup_file(self._path, "ACLs")
        if data is None:
            return
        try:
            bindings = decode_bindings(data)
        except AclError as exc:
            raise StartupError(f"cannot read the ACLs in {self._path}: {exc} (fix or remove the file; "
                               "the broker does not start without the ACLs it had)") from None
        for pattern, entries in apply_changes(self._authorizer, bindings, ()).items():
            self._authorizer.replace(pattern, entries)

    async def create(self, bindings: Sequence[AclBinding]) -> None:
        async with self._lock:
            await self._write(apply_changes(self._authorizer, bindings, ()))

    async def delete(self, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding]]:
        async with self._lock:
            found = matched(self._authorizer, filters)
            await self._write(apply_changes(self._authorizer, (), [b for f in found for b in f]))
            return found

    async def _write(self, changed: dict[ResourcePattern, frozenset[AccessControlEntry]]) -> None:
        if not changed:
            return
        current: dict[ResourcePattern, set[AccessControlEntry]] = {}
        for binding in self._authorizer.bindings():
            current.setdefault(binding.pattern, set()).add(binding.entry)
        current.update({pattern: set(entries) for pattern, entries in changed.items()})
        data = encode_bindings([AclBinding(p, e) for p, entries in current.items() for e in entries])
        await trio.to_thread.run_sync(write_atomically, self._path, data)
        for pattern, entries in changed.items():  # in force once stored
            self._authorizer.replace(pattern, entries)


def encode_bindings(bindings: Sequence[AclBinding]) -> bytes:
    return json.dumps({"version": 1, "acls": [
        {"resourceType": b.pattern.resource_type.title, "name": b.pattern.name,
         "patternType": b.pattern.pattern_type.name, "principal": b.entry.principal, "host": b.entry.host,
         "operation": b.entry.operation.title, "permissionType": b.entry.permission.title}
        for b in sorted(bindings)]}, indent=1).encode()


def decode_bindings(data: bytes) -> list[AclBinding]:
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise AclError(f"not JSON: {exc}") from None
    if not isinstance(document, dict) or document.get("version") != 1 or not isinstance(document.get("acls"), list):
        raise AclError("not a version 1 ACL file")
    bindings = []
    for number, item in enumerate(document["acls"], 1):
        keys = ("resourceType", "name", "patternType", "principal", "host", "operation", "permissionType")
        if not isinstance(item, dict) or not all(isinstance(item.get(k), str) for k in keys):
            raise AclError(f"ACL {number} lacks one of {', '.join(keys)}")
        try:
            pattern_type = PatternType[item["patternType"]]
        except KeyError:
            raise AclError(f"ACL {number}: unknown pattern type {item['patternType']!r}") from None
        binding = AclBinding(
            ResourcePattern(ResourceType.from_title(item["resourceType"]), item["name"], pattern_type),
            AccessControlEntry(item["principal"], item["host"], Operation.from_title(item["operation"]),
                               Permission.from_title(item["permissionType"])))
        try:
            binding.check()
        except AclError as exc:
            raise AclError(f"ACL {number}: {exc}") from None
        bindings.append(binding)
    return bindings
