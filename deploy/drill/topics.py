"""The topics a drill writes: the source's topics the mirror copies, once the DR site holds
each of them under the same name with as many partitions (a link-mode mirror keeps names)."""

from __future__ import annotations

import time

from confluent_kafka.admin import AdminClient

from deploy.drill.workload import TopicPartition
from mirror.config import INTERNAL_TOPICS, MirrorConfig
from mirror.naming import ReplicationPolicy

__all__ = ["mirrored_topics", "partitions_of"]


def _partition_counts(bootstrap: str) -> dict[str, int]:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    return {name: len(topic.partitions) for name, topic in metadata.topics.items() if topic.error is None}


def mirrored_topics(source: str, target: str, config: MirrorConfig, timeout_s: float = 60.0) -> dict[str, int]:
    """Each topic (and its partition count) that the mirror copies from `source`, waiting up to
    `timeout_s` for `target` to hold them all. Raises TimeoutError naming those it lacks, and
    LookupError when the source has no topic the mirror copies."""
    wanted = {name: count for name, count in _partition_counts(source).items()
              if config.topics.matches(name, INTERNAL_TOPICS) and not ReplicationPolicy.is_heartbeats(name)}
    if not wanted:
        raise LookupError(f"the source cluster ({source}) has no topic the mirror copies")
    deadline = time.monotonic() + timeout_s
    while True:
        held = _partition_counts(target)
        missing = sorted(name for name, count in wanted.items() if held.get(name) != count)
        if not missing:
            return dict(sorted(wanted.items()))
        if time.monotonic() > deadline:
            raise TimeoutError(f"the DR site ({target}) does not hold {', '.join(missing)} with the source's "
                               f"partitions after {timeout_s:.0f} s: is the mirror running (`causeway status`)?")
        time.sleep(0.5)


def partitions_of(topics: dict[str, int]) -> list[TopicPartition]:
    return [(topic, p) for topic, count in topics.items() for p in range(count)]
