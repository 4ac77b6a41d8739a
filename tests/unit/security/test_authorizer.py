"""The authorizer's decisions, case by case as Kafka's AclAuthorizer makes them."""

from __future__ import annotations

import pytest

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
    decode_entries,
    encode_entries,
)
from security.authorizer import Authorizer, parse_super_users

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY


def _with(*acls: tuple[ResourceType, str, PatternType, str, str, Operation, Permission],
          allow_everyone: bool = False) -> Authorizer:
    authorizer = Authorizer(parse_super_users("User:root; User:broker"), allow_everyone)
    grouped: dict[ResourcePattern, set[AccessControlEntry]] = {}
    for resource_type, name, pattern_type, principal, host, operation, permission in acls:
        grouped.setdefault(ResourcePattern(resource_type, name, pattern_type), set()).add(
            AccessControlEntry(principal, host, operation, permission))
    for pattern, entries in grouped.items():
        authorizer.replace(pattern, entries)
    return authorizer


def test_without_acls_the_default_denies_and_allow_everyone_allows_but_super_users_always_may() -> None:
    assert not _with().authorize("User:alice", "1.2.3.4", Operation.READ, TOPIC, "a")
    assert _with(allow_everyone=True).authorize("User:alice", "1.2.3.4", Operation.READ, TOPIC, "a")
    assert _with().authorize("User:broker", "1.2.3.4", Operation.CLUSTER_ACTION, CLUSTER, "kafka-cluster")


def test_an_allow_on_one_topic_does_not_reach_another_and_acls_on_a_resource_turn_off_allow_everyone() -> None:
    authorizer = _with((TOPIC, "a", LITERAL, "User:alice", "*", Operation.READ, ALLOW), allow_everyone=True)
    assert authorizer.authorize("User:alice", "h", Operation.READ, TOPIC, "a")
    assert not authorizer.authorize("User:bob", "h", Operation.READ, TOPIC, "a")  # a has ACLs now
    assert authorizer.authorize("User:bob", "h", Operation.READ, TOPIC, "b")  # b has none


def test_deny_wins_over_allow_and_all_covers_every_operation() -> None:
    authorizer = _with((TOPIC, "*", LITERAL, "User:alice", "*", Operation.ALL, ALLOW),
                       (TOPIC, "secret", LITERAL, "User:alice", "*", Operation.READ, DENY))
    assert authorizer.authorize("User:alice", "h", Operation.WRITE, TOPIC, "secret")
    assert not authorizer.authorize("User:alice", "h", Operation.READ, TOPIC, "secret")
    assert authorizer.authorize("User:alice", "h", Operation.READ, TOPIC, "public")


def test_prefixed_patterns_cover_names_starting_with_them() -> None:
    authorizer = _with((TOPIC, "pay", PREFIXED, "User:alice", "*", Operation.WRITE, ALLOW),
                       (TOPIC, "payroll", PREFIXED, "User:alice", "*", Operation.WRITE, DENY))
    assert authorizer.authorize("User:alice", "h", Operation.WRITE, TOPIC, "payments")
    assert not authorizer.authorize("User:alice", "h", Operation.WRITE, TOPIC, "payroll-2026")
    assert not authorizer.authorize("User:alice", "h", Operation.WRITE, TOPIC, "pa")


def test_principal_wildcard_and_host_filters() -> None:
    authorizer = _with((GROUP, "g", LITERAL, "User:*", "10.0.0.1", Operation.READ, ALLOW))
    assert authorizer.authorize("User:anyone", "10.0.0.1", Operation.READ, GROUP, "g")
    assert not authorizer.authorize("User:anyone", "10.0.0.2", Operation.READ, GROUP, "g")


def test_read_write_delete_alter_imply_describe_and_alter_configs_implies_describe_configs() -> None:
    for operation in (Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER):
        authorizer = _with((TOPIC, "t", LITERAL, "User:a", "*", operation, ALLOW))
        assert authorizer.authorize("User:a", "h", Operation.DESCRIBE, TOPIC, "t")
    authorizer = _with((TOPIC, "t", LITERAL, "User:a", "*", Operation.ALTER_CONFIGS, ALLOW))
    assert authorizer.authorize("User:a", "h", Operation.DESCRIBE_CONFIGS, TOPIC, "t")
    assert not authorizer.authorize("User:a", "h", Operation.DESCRIBE, TOPIC, "t")
    # A deny on Read does not take Describe away.
    authorizer = _with((TOPIC, "t", LITERAL, "User:a", "*", Operation.WRITE, ALLOW),
                       (TOPIC, "t", LITERAL, "User:a", "*", Operation.READ, DENY))
    assert authorizer.authorize("User:a", "h", Operation.DESCRIBE, TOPIC, "t")


def test_authorized_operations_is_a_bit_per_operation_of_the_resource_type() -> None:
    authorizer = _with((GROUP, "g", LITERAL, "User:a", "*", Operation.READ, ALLOW))
    read_and_describe = (1 << Operation.READ) | (1 << Operation.DESCRIBE)
    assert authorizer.authorized_operations("User:a", "h", GROUP, "g") == read_and_describe
    assert authorizer.authorized_operations("User:b", "h", GROUP, "g") == 0


def test_authorize_any_finds_an_allow_not_taken_away_by_a_deny() -> None:
    write = Operation.WRITE
    assert _with((TOPIC, "t", LITERAL, "User:a", "*", write, ALLOW)).authorize_any("User:a", "h", write, TOPIC)
    assert not _with((TOPIC, "t", LITERAL, "User:a", "*", write, ALLOW),
                     (TOPIC, "t", LITERAL, "User:a", "*", write, DENY)).authorize_any("User:a", "h", write, TOPIC)
    assert not _with((TOPIC, "tx", PREFIXED, "User:a", "*", write, ALLOW),
                     (TOPIC, "t", PREFIXED, "User:a", "*", write, DENY)).authorize_any("User:a", "h", write, TOPIC)
    assert not _with((TOPIC, "t", LITERAL, "User:a", "*", write, ALLOW),
                     (TOPIC, "*", LITERAL, "User:*", "*", write, DENY)).authorize_any("User:a", "h", write, TOPIC)
    assert not _with((TOPIC, "t", LITERAL, "User:b", "*", write, ALLOW)).authorize_any("User:a", "h", write, TOPIC)


def test_filters_select_bindings_and_match_finds_every_covering_pattern() -> None:
    authorizer = _with((TOPIC, "orders", LITERAL, "User:a", "*", Operation.READ, ALLOW),
                       (TOPIC, "ord", PREFIXED, "User:b", "*", Operation.READ, ALLOW),
                       (TOPIC, "*", LITERAL, "User:c", "*", Operation.READ, ALLOW),
                       (GROUP, "orders", LITERAL, "User:a", "*", Operation.READ, ALLOW))
    match = AclBindingFilter(TOPIC, "orders", PatternType.MATCH)
    assert sorted(b.entry.principal for b in authorizer.bindings(match)) == ["User:a", "User:b", "User:c"]
    literal = AclBindingFilter(ResourceType.ANY, "orders", LITERAL)
    assert len(list(authorizer.bindings(literal))) == 2
    assert [b.entry.principal for b in authorizer.bindings(AclBindingFilter(principal="User:b"))] == ["User:b"]


@pytest.mark.parametrize(("pattern", "entry", "reason"), [
    (ResourcePattern(CLUSTER, "kafka-cluster", PREFIXED), None, "cluster resource"),
    (ResourcePattern(CLUSTER, "other", LITERAL), None, "cluster resource"),
    (ResourcePattern(TOPIC, "*", PREFIXED), None, "wildcard"),
    (ResourcePattern(TOPIC, "a/b", LITERAL), None, "'/'"),
    (ResourcePattern(TOPIC, "t", PatternType.MATCH), None, "LITERAL or PREFIXED"),
    (None, AccessControlEntry("alice", "*", Operation.READ, ALLOW), "<type>:<name>"),
    (None, AccessControlEntry("User:a", "*", Operation.ANY, ALLOW), "needs an operation"),
    (None, AccessControlEntry("User:a", "*", Operation.CLUSTER_ACTION, ALLOW), "does not apply"),
])
def test_acls_that_cannot_be_stored_are_refused_with_the_reason(
        pattern: ResourcePattern | None, entry: AccessControlEntry | None, reason: str) -> None:
    binding = AclBinding(pattern or ResourcePattern(TOPIC, "t", LITERAL),
                         entry or AccessControlEntry("User:a", "*", Operation.READ, ALLOW))
    with pytest.raises(AclError, match=reason):
        binding.check()


def test_znode_entries_round_trip_in_kafkas_json_and_garbage_is_named() -> None:
    entries = frozenset({AccessControlEntry("User:a", "*", Operation.CLUSTER_ACTION, ALLOW),
                         AccessControlEntry("User:b", "10.0.0.1", Operation.DESCRIBE_CONFIGS, DENY)})
    data = encode_entries(entries)
    assert b'"operation":"ClusterAction"' in data and b'"permissionType":"Deny"' in data
    assert decode_entries(data) == entries
    for garbage in (b"\xff", b"[]", b'{"version":2,"acls":[]}', b'{"version":1,"acls":[{"principal":1}]}',
                    b'{"version":1,"acls":[{"principal":"User:a","permissionType":"Maybe","operation":"Read",'
                    b'"host":"*"}]}', b"[" * 100_000):
        with pytest.raises(AclError):
            decode_entries(garbage)


def test_an_unreadable_pattern_denies_what_it_covers_to_all_but_super_users_until_readable_again() -> None:
    authorizer = _with((TOPIC, "*", LITERAL, "User:*", "*", Operation.ALL, ALLOW), allow_everyone=True)
    for pattern, covered, free in ((ResourcePattern(TOPIC, "orders", LITERAL), "orders", "other"),
                                   (ResourcePattern(TOPIC, "pay-", PREFIXED), "pay-1", "pa"),
                                   (ResourcePattern(GROUP, "*", LITERAL), "g", None)):
        resource_type = pattern.resource_type
        authorizer.set_unreadable(pattern, True)
        assert not authorizer.authorize("User:alice", "h", Operation.READ, resource_type, covered)
        assert authorizer.authorize("User:root", "h", Operation.READ, resource_type, covered)
        if free is not None:
            assert authorizer.authorize("User:alice", "h", Operation.READ, resource_type, free)
        assert authorizer.authorize_any("User:alice", "h", Operation.READ, resource_type) == (free is not None)
        assert authorizer.unreadable() == [pattern]
        authorizer.set_unreadable(pattern, False)
        assert authorizer.authorize("User:alice", "h", Operation.READ, resource_type, covered)
        assert authorizer.unreadable() == []
