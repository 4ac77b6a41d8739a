"""Kafka's ACL authorizer: may this principal, from this host, do this operation on this resource?

The decision is Kafka's ``AclAuthorizer``/``StandardAuthorizer`` one:

- a super user (``super.users``) may do everything;
- the ACLs that apply to a resource are the literal ones on its name, the literal ones on ``*``
  and the prefixed ones whose prefix its name starts with;
- when none apply, ``allow.everyone.if.no.acl.found`` decides (false by default: deny);
- a matching Deny (the operation or All, the principal or ``User:*``, the host or ``*``) wins;
- a pattern whose stored ACLs could not be read denies what it covers (``set_unreadable``);
- otherwise a matching Allow is needed; Allow on Read, Write, Delete or Alter implies Describe,
  and Allow on AlterConfigs implies DescribeConfigs.

The ACLs live in memory here, as a cache the stores keep current (``replace``); deciding does no
IO and takes time in the number of ACLs that apply, not in the number stored.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from security.acl import (
    SUPPORTED_OPERATIONS,
    WILDCARD,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)

__all__ = ["OPERATIONS_NOT_REQUESTED", "Authorizer", "parse_super_users"]

_IMPLIED_BY: dict[Operation, tuple[Operation, ...]] = {
    Operation.DESCRIBE: (Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER),
    Operation.DESCRIBE_CONFIGS: (Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS),
}

# The authorized-operations fields' value when the client did not ask for them (Kafka's INT_MIN).
OPERATIONS_NOT_REQUESTED = -(2**31)


def parse_super_users(text: str) -> frozenset[str]:
    """``super.users``: principals separated by semicolons (``User:admin;User:broker``)."""
    return frozenset(p.strip() for p in text.split(";") if p.strip())


class Authorizer:
    def __init__(self, super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        # (resource type, pattern type) -> resource name -> its entries
        self._acls: dict[tuple[ResourceType, PatternType], dict[str, frozenset[AccessControlEntry]]] = {}
        # Patterns whose stored ACLs could not be read (set_unreadable): (type, pattern type) -> names
        self._unreadable: dict[tuple[ResourceType, PatternType], set[str]] = {}

    # -- the cache --------------------------------------------------------------------------------

    def replace(self, pattern: ResourcePattern, entries: Iterable[AccessControlEntry]) -> None:
        """Set the entries of ``pattern`` (none: it has no ACLs any more)."""
        by_name = self._acls.setdefault((pattern.resource_type, pattern.pattern_type), {})
        frozen = frozenset(entries)
        if frozen:
            by_name[pattern.name] = frozen
        else:
            by_name.pop(pattern.name, None)

    def set_unreadable(self, pattern: ResourcePattern, unreadable: bool) -> None:
        """Mark the stored ACLs of ``pattern`` as unreadable (a damaged znode), or readable again.

        This fails closed: an unreadable pattern acts as a Deny of every operation to everyone
        but the super users on whatever it covers, since its entries are unknown and one of them
        may have been a Deny. Leaving it without ACLs alone would fail open wherever something
        else allows: a literal ``*`` or prefixed Allow, or ``allow.everyone.if.no.acl.found``."""
        names = self._unreadable.setdefault((pattern.resource_type, pattern.pattern_type), set())
        if unreadable:
            names.add(pattern.name)
        else:
            names.discard(pattern.name)

    def unreadable(self) -> list[ResourcePattern]:
        return sorted(ResourcePattern(t, name, p) for (t, p), names in self._unreadable.items() for name in names)

    def _covered_by_unreadable(self, resource_type: ResourceType, name: str) -> bool:
        literal = self._unreadable.get((resource_type, PatternType.LITERAL), ())
        if name in literal or WILDCARD in literal:
            return True
        return any(name.startswith(p) for p in self._unreadable.get((resource_type, PatternType.PREFIXED), ()))

    def entries(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]:
        return self._acls.get((pattern.resource_type, pattern.pattern_type), {}).get(pattern.name, frozenset())

    def bindings(self, selected: AclBindingFilter | None = None) -> Iterator[AclBinding]:
        """Every ACL, or those ``selected`` matches, in a stable order."""
        for (resource_type, pattern_type), by_name in sorted(self._acls.items()):
            for name, entries in sorted(by_name.items()):
                pattern = ResourcePattern(resource_type, name, pattern_type)
                for entry in sorted(entries):
                    binding = AclBinding(pattern, entry)
                    if selected is None or selected.matches(binding):
                        yield binding

    # -- deciding ---------------------------------------------------------------------------------

    def authorize(self, principal: str, host: str, operation: Operation, resource_type: ResourceType,
                  name: str) -> bool:
        if principal in self.super_users:
            return True
        if self._unreadable and self._covered_by_unreadable(resource_type, name):
            return False
        applying = list(self._applying(resource_type, name))
        if not applying:
            return self.allow_everyone_if_no_acl_found
        if self._found(applying, principal, host, (operation,), Permission.DENY):
            return False
        return self._found(applying, principal, host, _IMPLIED_BY.get(operation, (operation,)), Permission.ALLOW)

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType, name: str) -> int:
        """The authorized-operations bit field of Metadata, DescribeCluster and DescribeGroups:
        bit ``op`` set for each operation of the resource type the principal may do."""
        bits = 0
        for operation in SUPPORTED_OPERATIONS.get(resource_type, ()):
            if self.authorize(principal, host, operation, resource_type, name):
                bits |= 1 << operation
        return bits

    def authorize_any(self, principal: str, host: str, operation: Operation, resource_type: ResourceType) -> bool:
        """May the principal do ``operation`` on at least one resource of the type (Kafka's
        ``authorizeByResourceType``, KIP-679: how an idempotent producer without IdempotentWrite
        on the cluster is let in when it may write some topic)? An Allow counts unless a Deny on
        the literal ``*``, on the same literal name or on a prefix of it takes it away."""
        if principal in self.super_users:
            return True
        literal = self._acls.get((resource_type, PatternType.LITERAL), {})
        prefixed = self._acls.get((resource_type, PatternType.PREFIXED), {})
        unreadable_literals = self._unreadable.get((resource_type, PatternType.LITERAL), set())
        if WILDCARD in unreadable_literals:
            return False
        if not literal and not prefixed:
            return self.allow_everyone_if_no_acl_found

        def holds(entries: frozenset[AccessControlEntry], permission: Permission) -> bool:
            return self._found(((WILDCARD, entries),), principal, host, (operation,), permission)

        if holds(literal.get(WILDCARD, frozenset()), Permission.DENY):
            return False
        denied_literals = {name for name, entries in literal.items() if holds(entries, Permission.DENY)}
        denied_literals |= unreadable_literals
        denied_prefixes = [name for name, entries in prefixed.items() if holds(entries, Permission.DENY)]
        denied_prefixes += self._unreadable.get((resource_type, PatternType.PREFIXED), ())
        for name, entries in literal.items():
            if (holds(entries, Permission.ALLOW) and name not in denied_literals
                    and (name == WILDCARD or not any(name.startswith(p) for p in denied_prefixes))):
                return True
        return any(holds(entries, Permission.ALLOW) and not any(name.startswith(p) for p in denied_prefixes)
                   for name, entries in prefixed.items())

    def _applying(self, resource_type: ResourceType, name: str) -> Iterator[tuple[str, frozenset[AccessControlEntry]]]:
        literal = self._acls.get((resource_type, PatternType.LITERAL))
        if literal:
            for key in (name, WILDCARD):
                entries = literal.get(key)
                if entries:
                    yield key, entries
        prefixed = self._acls.get((resource_type, PatternType.PREFIXED))
        if prefixed:
            # Look up each prefix of the name, or walk the prefixes stored: whichever is fewer.
            if len(prefixed) <= len(name):
                for prefix, entries in prefixed.items():
                    if name.startswith(prefix):
                        yield prefix, entries
            else:
                for end in range(1, len(name) + 1):
                    entries = prefixed.get(name[:end])
                    if entries:
                        yield name[:end], entries

    @staticmethod
    def _found(applying: Iterable[tuple[str, frozenset[AccessControlEntry]]], principal: str, host: str,
               operations: tuple[Operation, ...], permission: Permission) -> bool:
        for _, entries in applying:
            for entry in entries:
                if (entry.permission is permission and entry.applies_to(principal, host)
                        and (entry.operation in operations or entry.operation is Operation.ALL)):
                    return True
        return False
