"""The ACL change notifications' payloads, as Kafka's LiteralAclChangeStore and
ExtendedAclChangeStore write and read them."""

from __future__ import annotations

import pytest

from broker.server.zk_acl_store import decode_change, encode_change
from security.acl import AclError, PatternType, ResourcePattern, ResourceType


@pytest.mark.parametrize(("pattern", "payload"), [
    (ResourcePattern(ResourceType.TOPIC, "orders", PatternType.LITERAL), b"TOPIC:orders"),
    (ResourcePattern(ResourceType.TRANSACTIONAL_ID, "tx:1", PatternType.LITERAL), b"TRANSACTIONAL_ID:tx:1"),
    (ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL), b"CLUSTER:kafka-cluster"),
    (ResourcePattern(ResourceType.GROUP, "g-", PatternType.PREFIXED),
     b'{"version":1,"resourceType":"GROUP","name":"g-","patternType":"PREFIXED"}'),
])
def test_payloads_are_kafkas_and_read_back(pattern: ResourcePattern, payload: bytes) -> None:
    assert encode_change(pattern) == payload
    assert decode_change(payload, literal=pattern.pattern_type is PatternType.LITERAL) == pattern


def test_older_kafkas_literal_spelling_is_read() -> None:
    assert decode_change(b"Topic:orders", literal=True) == ResourcePattern(ResourceType.TOPIC, "orders",
                                                                           PatternType.LITERAL)


@pytest.mark.parametrize(("payload", "literal"), [
    (b"", True), (b"orders", True), (b"\xff:x", True), (b"ANY:x", True), (b"UNKNOWN:x", True), (b"TOPIC:", True),
    (b"Martian:x", True), (b"TOPIC:a/b", True), (b"GROUP:..", True), (b"[]", False), (b"{", False),
    (b'{"version":1}', False),
    (b'{"version":2,"resourceType":"TOPIC","name":"a","patternType":"PREFIXED"}', False),
    (b'{"version":"1","resourceType":"TOPIC","name":"a","patternType":"PREFIXED"}', False),
    (b'{"version":1,"resourceType":"TOPIC","name":"a","patternType":"MATCH"}', False),
    (b'{"version":1,"resourceType":"TOPIC","name":"a","patternType":"Nope"}', False),
    (b"[" * 100000, False),
])
def test_garbage_is_refused_with_an_acl_error(payload: bytes, literal: bool) -> None:
    with pytest.raises(AclError):
        decode_change(payload, literal=literal)
