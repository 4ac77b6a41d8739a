"""Numbers the Kafka protocol gives a meaning to, named once for the client and the broker.

Each carries the name Kafka's Java code gives it, so a log line or a test reads as Kafka's
would. Error codes are in `broker.protocol.errors`.
"""

from __future__ import annotations

import enum

__all__ = [
    "EARLIEST",
    "EARLIEST_LOCAL",
    "LATEST",
    "LATEST_TIERED",
    "MAX_TIMESTAMP",
    "MIRROR_NAME_CONFIG",
    "MIRROR_PAUSED",
    "MIRROR_PROMOTING",
    "MIRROR_STATE_CONFIG",
    "AlterConfigOp",
    "ConfigResourceType",
    "ConfigSource",
    "CoordinatorType",
]

# ListOffsets: the special timestamps a partition's request may carry instead of a time
# (ListOffsetsRequest's *_TIMESTAMP constants).
LATEST = -1  # the log end (the high watermark, or the last stable offset, for consumers)
EARLIEST = -2  # the log start offset
MAX_TIMESTAMP = -3  # the offset of the record with the largest timestamp (KIP-734)
EARLIEST_LOCAL = -4  # the first offset still on local disk (KIP-405; all of it here)
LATEST_TIERED = -5  # the last offset moved to remote storage (KIP-1005; none here)

# Causeway's own topic config (not Kafka's): set, non-empty, on a topic a link-mode mirror
# created; its value is the mirror's name. Such a *mirror topic* takes records only through
# LinkAppend from that mirror; deleting the config promotes it to a normal writable topic.
MIRROR_NAME_CONFIG = "causeway.mirror.name"
# Causeway's own topic config: a mirror topic's link state where it must survive every restart
# (as Cluster Linking keeps a mirror topic's state at the destination cluster). PAUSED: its mirror
# copies nothing into it (LinkAppend is refused) until `causeway mirror resume` deletes the key;
# PROMOTING: a planned promotion waits for the copy to catch up (copied as ACTIVE); unset or
# ACTIVE: copied. Only a mirror topic (causeway.mirror.name set) may be PAUSED.
MIRROR_STATE_CONFIG = "causeway.mirror.state"
MIRROR_PAUSED = "PAUSED"
MIRROR_PROMOTING = "PROMOTING"


class CoordinatorType(enum.IntEnum):
    """FindCoordinator's key_type: which coordinator a key names."""

    GROUP = 0
    TRANSACTION = 1


class ConfigResourceType(enum.IntEnum):
    """DescribeConfigs / AlterConfigs resource_type (Kafka's ConfigResource.Type ids)."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32  # a consumer group's own configs (KIP-848, Kafka 4.x)


class ConfigSource(enum.IntEnum):
    """DescribeConfigs config_source: where a value comes from (DescribeConfigsResponse's ids)."""

    UNKNOWN = 0
    TOPIC_CONFIG = 1  # a topic's own override (the admin API's DYNAMIC_TOPIC_CONFIG)
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8  # a group's own override (the admin API's DYNAMIC_GROUP_CONFIG, Kafka 4.x)


class AlterConfigOp(enum.IntEnum):
    """IncrementalAlterConfigs config_operation (Kafka's AlterConfigOp.OpType ids)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3
