"""Kafka's access control lists as values: resource patterns, entries, bindings and filters.

The numbers are the wire protocol's (CreateAcls, DescribeAcls, DeleteAcls); the names are the ones
Kafka writes into its ZooKeeper znodes and ``kafka-acls`` prints (``Topic``, ``ClusterAction``,
``Allow``). Nothing here does IO: the authorizer (``security/authorizer.py``) decides with these,
the stores keep them, the handlers translate requests into them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import IntEnum
from typing import Self, TypeVar

__all__ = [
    "CLUSTER_NAME",
    "SUPPORTED_OPERATIONS",
    "WILDCARD",
    "AccessControlEntry",
    "AclBinding",
    "AclBindingFilter",
    "AclError",
    "binding_from_wire",
    "from_wire",
    "Operation",
    "PatternType",
    "Permission",
    "ResourcePattern",
    "ResourceType",
    "decode_entries",
    "encode_entries",
]

CLUSTER_NAME = "kafka-cluster"  # the one cluster resource's name
WILDCARD = "*"  # a literal resource name, principal or host matching every one


class AclError(ValueError):
    """An ACL or filter that cannot be used; the message says why (it goes to the client)."""


class _Titled(IntEnum):
    """An enum Kafka also spells by name (``Topic``, ``ClusterAction``, ``Allow``): in znodes and
    what ``kafka-acls`` prints and takes."""

    @property
    def title(self) -> str:
        """Kafka's name: the znode path element and what ``kafka-acls`` prints."""
        return _title(self)

    @classmethod
    def from_title(cls, text: str) -> Self:
        return _by_title(cls, text)


class ResourceType(_Titled):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(_Titled):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(_Titled):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


def _title(member: IntEnum) -> str:
    """Kafka's spelling of an enum member: CLUSTER_ACTION is ClusterAction."""
    return "".join(word.capitalize() for word in member.name.split("_"))


_E = TypeVar("_E", bound=IntEnum)


def _by_title(cls: type[_E], text: str) -> _E:
    for member in cls:
        if _title(member).lower() == text.replace("_", "").lower():
            return member
    raise AclError(f"unknown {cls.__name__} {text!r}")


# The operations Kafka's authorizer reports in the authorized-operations fields, per resource
# type (Kafka's AclEntry.supportedOperations).
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[Operation, ...]] = {
    ResourceType.TOPIC: (Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DESCRIBE, Operation.DELETE,
                         Operation.ALTER, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS),
    ResourceType.GROUP: (Operation.READ, Operation.DESCRIBE, Operation.DELETE),
    ResourceType.CLUSTER: (Operation.CREATE, Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS,
                           Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE, Operation.ALTER, Operation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (Operation.DESCRIBE, Operation.WRITE),
    ResourceType.DELEGATION_TOKEN: (Operation.DESCRIBE,),
    ResourceType.USER: (Operation.CREATE_TOKENS, Operation.DESCRIBE_TOKENS),
}


@dataclass(frozen=True, slots=True, order=True)
class ResourcePattern:
    """What an ACL is about: one resource (LITERAL; ``*`` means every one of its type) or every
    resource whose name starts with ``name`` (PREFIXED)."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    def check(self) -> None:
        """Raise AclError unless this pattern may be stored (as Kafka's authorizer checks it)."""
        if self.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
            raise AclError(f"an ACL needs a resource type, not {self.resource_type.title}")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise AclError(f"an ACL's pattern type is LITERAL or PREFIXED, not {self.pattern_type.name}")
        if not self.name:
            raise AclError("an ACL needs a resource name")
        if self.resource_type is ResourceType.CLUSTER and (
                self.pattern_type is not PatternType.LITERAL or self.name != CLUSTER_NAME):
            raise AclError(f"the cluster resource is the literal {CLUSTER_NAME!r}")
        if self.pattern_type is PatternType.PREFIXED and self.name == WILDCARD:
            raise AclError("a prefixed pattern cannot be the wildcard '*' (use a literal '*')")
        if "/" in self.name and self.resource_type is not ResourceType.USER:
            # The name is a znode path element in ZooKeeper mode.
            raise AclError(f"resource name {self.name!r} contains '/'")

    def matches(self, name: str) -> bool:
        """Does this pattern cover the resource ``name`` of its type?"""
        if self.pattern_type is PatternType.PREFIXED:
            return name.startswith(self.name)
        return self.name in (name, WILDCARD)


@dataclass(frozen=True, slots=True, order=True)
class AccessControlEntry:
    """Who (principal, host) may or may not (permission) do what (operation)."""

    principal: str
    host: str
    operation: Operation
    permission: Permission

    def check(self) -> None:
        kind, colon, name = self.principal.partition(":")
        if not colon or not kind or not name:
            raise AclError(f"principal {self.principal!r} is not of the form <type>:<name> (e.g. User:alice)")
        if not self.host:
            raise AclError("an ACL needs a host ('*' for every host)")
        if self.operation in (Operation.UNKNOWN, Operation.ANY):
            raise AclError(f"an ACL needs an operation, not {self.operation.title}")
        if self.permission not in (Permission.ALLOW, Permission.DENY):
            raise AclError(f"an ACL's permission is Allow or Deny, not {self.permission.title}")

    def applies_to(self, principal: str, host: str) -> bool:
        return self.principal in (principal, _WILDCARD_PRINCIPAL) and self.host in (host, WILDCARD)


_WILDCARD_PRINCIPAL = "User:*"


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry

    def __str__(self) -> str:
        p, e = self.pattern, self.entry
        return (f"{p.resource_type.title}:{p.pattern_type.name}:{p.name} {e.permission.title} {e.principal} "
                f"{e.operation.title} from {e.host}")

    def check(self) -> None:
        self.pattern.check()
        self.entry.check()
        supported = SUPPORTED_OPERATIONS.get(self.pattern.resource_type, ())
        if self.entry.operation is not Operation.ALL and self.entry.operation not in supported:
            raise AclError(f"operation {self.entry.operation.title} does not apply to resource type "
                           f"{self.pattern.resource_type.title}")


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """What DescribeAcls and DeleteAcls select: None and the ANY values match everything; the
    MATCH pattern type matches every pattern that covers the named resource (Kafka's semantics)."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def check(self) -> None:
        for field, value in (("resource type", self.resource_type), ("pattern type", self.pattern_type),
                             ("operation", self.operation), ("permission", self.permission)):
            if value == 0:
                raise AclError(f"a filter's {field} cannot be UNKNOWN")

    def matches(self, binding: AclBinding) -> bool:
        pattern, entry = binding.pattern, binding.entry
        if self.resource_type is not ResourceType.ANY and self.resource_type is not pattern.resource_type:
            return False
        if self.pattern_type is PatternType.MATCH:
            if self.name is not None and not pattern.matches(self.name):
                return False
        else:
            if self.pattern_type is not PatternType.ANY and self.pattern_type is not pattern.pattern_type:
                return False
            if self.name is not None and self.name != pattern.name:
                return False
        if self.principal is not None and self.principal != entry.principal:
            return False
        if self.host is not None and self.host != entry.host:
            return False
        if self.operation is not Operation.ANY and self.operation is not entry.operation:
            return False
        return self.permission is Permission.ANY or self.permission is entry.permission


def encode_entries(entries: frozenset[AccessControlEntry] | set[AccessControlEntry]) -> bytes:
    """One resource's entries as Kafka's znode JSON (``{"version":1,"acls":[...]}``)."""
    return json.dumps({"version": 1, "acls": [
        {"principal": e.principal, "permissionType": e.permission.title, "operation": e.operation.title,
         "host": e.host} for e in sorted(entries)]}, separators=(",", ":")).encode()


def decode_entries(data: bytes) -> frozenset[AccessControlEntry]:
    """The entries of a Kafka ACL znode; AclError naming what is wrong when it cannot be read
    (anyone with write access to ZooKeeper can write one)."""
    try:
        document = json.loads(data) if data else {"version": 1, "acls": []}
        if not isinstance(document, dict) or document.get("version") != 1 or not isinstance(document.get("acls"), list):
            raise AclError("not a version 1 ACL document")
        entries = set()
        for item in document["acls"]:
            if not isinstance(item, dict) or not all(isinstance(item.get(k), str) for k in
                                                     ("principal", "permissionType", "operation", "host")):
                raise AclError(f"ACL entry {str(item)[:100]!r} lacks principal, permissionType, operation or host")
            entry = AccessControlEntry(item["principal"], item["host"], Operation.from_title(item["operation"]),
                                       Permission.from_title(item["permissionType"]))
            entry.check()
            entries.add(entry)
        return frozenset(entries)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise AclError(f"not JSON: {exc}") from None


_W = TypeVar("_W", ResourceType, PatternType, Operation, Permission)


def from_wire(kind: type[_W], value: int) -> _W:
    """The member of `kind` numbered `value`; UNKNOWN for a number this side does not know
    (a newer peer's), which the checks then refuse or the caller leaves out."""
    try:
        return kind(value)
    except ValueError:
        return kind(0)


def binding_from_wire(resource_type: int, name: str, pattern_type: int, principal: str, host: str,
                      operation: int, permission: int) -> AclBinding:
    """An ACL as CreateAcls, DescribeAcls and DeleteAcls carry it (numbers as they came)."""
    pattern = ResourcePattern(from_wire(ResourceType, resource_type), name, from_wire(PatternType, pattern_type))
    entry = AccessControlEntry(principal, host, from_wire(Operation, operation), from_wire(Permission, permission))
    return AclBinding(pattern, entry)
