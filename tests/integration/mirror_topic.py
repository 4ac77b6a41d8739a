"""The mirror topic of the ZooKeeper-mode link tests: `copy`, one partition replicated on all three
brokers of the cluster, written by the link `east-to-west` until it is promoted."""

from __future__ import annotations

from broker.client import MIRROR_NAME_CONFIG, TopicPartition, admin, open_client
from broker.client.admin import NewTopic
from tests.support.cluster import ZkCluster

__all__ = ["LINK", "TP", "create_mirror_topic"]

LINK = "east-to-west"
TP = TopicPartition("copy", 0)


async def create_mirror_topic(cluster: ZkCluster, *, timeout_s: float) -> None:
    """Create `copy` on `cluster` as the link's mirror topic, replication factor 3."""
    async with open_client(cluster.bootstrap(), request_timeout_s=timeout_s) as client:
        await admin.create_topics(client, {TP.topic: NewTopic(1, replication_factor=3,
                                                              configs={MIRROR_NAME_CONFIG: LINK})})
