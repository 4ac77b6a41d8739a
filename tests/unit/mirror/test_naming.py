"""MirrorMaker 2's replication policies: remote names, sources, loops, internal topics."""

from __future__ import annotations

from mirror.naming import ReplicationPolicy

DEFAULT = ReplicationPolicy()
IDENTITY = ReplicationPolicy(identity=True)


def test_default_policy_prefixes_the_source_alias() -> None:
    assert DEFAULT.remote_topic("east", "orders") == "east.orders"
    assert DEFAULT.topic_source("east.orders") == "east"
    assert DEFAULT.upstream_topic("west.east.orders") == "east.orders"
    assert DEFAULT.topic_source("orders") is None


def test_a_topic_that_came_from_the_target_is_a_cycle_over_any_number_of_hops() -> None:
    assert DEFAULT.is_cycle("west.orders", "west")
    assert DEFAULT.is_cycle("central.west.orders", "west")
    assert not DEFAULT.is_cycle("east.orders", "west")
    assert not DEFAULT.is_cycle("orders", "west")


def test_identity_keeps_names_but_not_for_heartbeats() -> None:
    assert IDENTITY.remote_topic("east", "orders") == "orders"
    assert IDENTITY.remote_topic("east", "heartbeats") == "east.heartbeats"
    assert not IDENTITY.is_cycle("west.orders", "west")


def test_custom_separator() -> None:
    policy = ReplicationPolicy(separator="_")
    assert policy.remote_topic("east", "orders") == "east_orders"
    assert policy.is_cycle("west_orders", "west")


def test_internal_topics() -> None:
    for topic in ("__consumer_offsets", ".hidden", "mm2-offsets.east.internal", "east.checkpoints.internal",
                  "connect-offsets-internal", "x.replica"):
        assert ReplicationPolicy.is_internal(topic), topic
    for topic in ("orders", "heartbeats", "mm2-is-a-fine-prefix"):
        assert not ReplicationPolicy.is_internal(topic), topic


def test_internal_topic_names() -> None:
    assert DEFAULT.checkpoints_topic("east") == "east.checkpoints.internal"
    assert DEFAULT.offset_syncs_topic("west") == "mm2-offset-syncs.west.internal"
    assert DEFAULT.positions_topic("east") == "mm2-offsets.east.internal"
