"""Causeway's trio-native Kafka client, shared by the mirror, the tools, the launcher's health
checks and the tests. It speaks only standard Kafka, so it works against Apache Kafka too.

    async with open_client("127.0.0.1:9092", client_id="tool") as client:
        await admin.create_topics(client, {"events": 3})
        await produce(client, "events", 0, build_batch([Record(b"k", b"v")]))
        fetched = await fetch(client, {TopicPartition("events", 0): 0})

Layers: `connection` (one broker, pipelined requests, version negotiation), `cluster`
(bootstrap, metadata, leaders, reconnect with backoff), and on top `admin`, `groups` (consumer
group administration), `produce`, `fetch`.
"""

from broker.client import admin, groups
from broker.client.cluster import (
    Backoff,
    BrokerInfo,
    Client,
    ClusterMetadata,
    NodeNotReady,
    PartitionMetadata,
    TopicMetadata,
    TopicPartition,
    open_client,
)
from broker.client.connection import (
    BrokerConnection,
    ClientError,
    ConnectionFailed,
    RequestTimeout,
    open_connection,
)
from broker.client.fetch import FetchedPartition, decode_records, fetch, whole_batches
from broker.client.groups import (
    CommittedOffset,
    GroupDescription,
    GroupListing,
    MemberDescription,
    commit_offsets,
    delete_groups,
    delete_offsets,
    describe_groups,
    fetch_offsets,
    find_coordinator,
    list_groups,
)
from broker.client.link import MIRROR_NAME_CONFIG, LinkAppendResult, link_append, supports_link_append
from broker.client.produce import (
    IdempotentProducer,
    ProduceResult,
    init_idempotent_producer,
    produce,
    produce_batches,
)
from broker.protocol.errors import ErrorCode, KafkaError

__all__ = [
    "Backoff",
    "BrokerConnection",
    "BrokerInfo",
    "Client",
    "ClientError",
    "ClusterMetadata",
    "CommittedOffset",
    "ConnectionFailed",
    "ErrorCode",
    "FetchedPartition",
    "GroupDescription",
    "GroupListing",
    "IdempotentProducer",
    "KafkaError",
    "LinkAppendResult",
    "MIRROR_NAME_CONFIG",
    "MemberDescription",
    "NodeNotReady",
    "PartitionMetadata",
    "ProduceResult",
    "RequestTimeout",
    "TopicMetadata",
    "TopicPartition",
    "admin",
    "commit_offsets",
    "decode_records",
    "delete_groups",
    "delete_offsets",
    "describe_groups",
    "groups",
    "fetch",
    "fetch_offsets",
    "find_coordinator",
    "init_idempotent_producer",
    "link_append",
    "list_groups",
    "open_client",
    "open_connection",
    "produce",
    "produce_batches",
    "supports_link_append",
    "whole_batches",
]
