"""MirrorMaker 2's replication policies: what a topic is called at the target, where a remote
topic came from, and the names of the internal topics.

`DefaultReplicationPolicy` prefixes the source alias (`east.orders`), which is what lets a mirror
see that `west.orders` came from `west` and must never be sent back there (loop prevention in an
active-active pair). `IdentityReplicationPolicy` keeps names as they are and can only tell
heartbeats apart, so it suits one-way mirroring.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["HEARTBEATS_TOPIC", "ReplicationPolicy"]

HEARTBEATS_TOPIC = "heartbeats"


@dataclass(frozen=True)
class ReplicationPolicy:
    identity: bool = False
    separator: str = "."

    def remote_topic(self, source_alias: str, topic: str) -> str:
        """The name `topic` of cluster `source_alias` has at the target."""
        if self.identity and not self.is_heartbeats(topic):
            return topic
        return f"{source_alias}{self.separator}{topic}"

    def topic_source(self, topic: str) -> str | None:
        """The alias of the cluster a remote topic came from, None for a local topic."""
        if self.identity:
            return None
        alias, sep, _ = topic.partition(self.separator)
        return alias if sep and alias else None

    def upstream_topic(self, topic: str) -> str | None:
        """The topic's name one hop upstream, None for a local topic."""
        if self.topic_source(topic) is None:
            return None
        return topic.partition(self.separator)[2]

    def is_cycle(self, topic: str, target_alias: str) -> bool:
        """Whether `topic` came (over any number of hops) from `target_alias`: MM2 never
        mirrors such a topic back, which is what stops active-active loops."""
        seen = 0
        while topic and seen < 64:  # a name has finitely many separators; the bound is a guard
            source = self.topic_source(topic)
            if source is None:
                return False
            if source == target_alias:
                return True
            topic = self.upstream_topic(topic) or ""
            seen += 1
        return False

    @staticmethod
    def is_heartbeats(topic: str) -> bool:
        return topic == HEARTBEATS_TOPIC or topic.endswith(f".{HEARTBEATS_TOPIC}")

    @staticmethod
    def is_internal(topic: str) -> bool:
        """Kafka's and MM2's internal topics: never mirrored."""
        return topic.startswith(("__", ".")) or topic.endswith((".internal", "-internal", ".replica"))

    def checkpoints_topic(self, source_alias: str) -> str:
        return f"{source_alias}.checkpoints.internal"

    @staticmethod
    def offset_syncs_topic(other_alias: str) -> str:
        """On the source it names the target (`mm2-offset-syncs.west.internal`); kept on the
        target instead, it names the source."""
        return f"mm2-offset-syncs.{other_alias}.internal"

    @staticmethod
    def positions_topic(source_alias: str) -> str:
        """Where Connect (and so MM2) keeps a source task's positions, on the target."""
        return f"mm2-offsets.{source_alias}.internal"
