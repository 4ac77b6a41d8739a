"""The topics a drill writes: the source's topics the mirror copies, once the DR site holds
each of them with as many partitions. A link-mode mirror keeps names, and each copy must be a
mirror topic of that mirror: a topic promoted by an earlier drill is refused, since nothing
would be copied to it. An mm2-mode mirror copies `orders` into the remote topic
`<source alias>.orders` (its naming policy); a DR site that already holds `orders` itself was
promoted by an earlier drill, and is refused the same way."""

from __future__ import annotations

import time

from confluent_kafka.admin import AdminClient, ConfigResource

from broker.protocol.constants import MIRROR_NAME_CONFIG
from deploy.drill.workload import TopicPartition
from mirror.config import INTERNAL_TOPICS, MirrorConfig
from mirror.naming import ReplicationPolicy

__all__ = ["dr_names", "mirrored_topics", "partitions_of"]


def _partition_counts(bootstrap: str) -> dict[str, int]:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    return {name: len(topic.partitions) for name, topic in metadata.topics.items() if topic.error is None}


def _owners(bootstrap: str, topics: list[str]) -> dict[str, str]:
    """Each topic's causeway.mirror.name ("" for a normal topic)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the answers are in
    futures = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics])
    owners = {}
    for resource, future in futures.items():
        entry = future.result(timeout=10).get(MIRROR_NAME_CONFIG)
        owners[resource.name] = entry.value if entry is not None and entry.value else ""
    return owners


def dr_names(config: MirrorConfig, topics: list[str]) -> dict[str, str]:
    """Each source topic's name at the DR site: itself in link mode (and with identity naming),
    the remote topic `<source alias><separator><topic>` in mm2 mode."""
    if config.mode == "link" or config.naming == "identity":
        return {t: t for t in topics}
    policy = ReplicationPolicy(identity=False, separator=config.separator)
    return {t: policy.remote_topic(config.source.alias, t) for t in topics}


def mirrored_topics(source: str, target: str, config: MirrorConfig, mirror: str,
                    timeout_s: float = 60.0) -> dict[str, int]:
    """Each topic (and its partition count) that `mirror` copies from `source`, waiting up to
    `timeout_s` for `target` to hold them all. Raises TimeoutError naming those it lacks, and
    LookupError when the source has no topic the mirror copies or the target holds one that is
    not a mirror topic of `mirror` (promoted already)."""
    wanted = {name: count for name, count in _partition_counts(source).items()
              if config.topics.matches(name, INTERNAL_TOPICS) and not ReplicationPolicy.is_heartbeats(name)}
    if not wanted:
        raise LookupError(f"the source cluster ({source}) has no topic the mirror copies")
    names = dr_names(config, sorted(wanted))
    deadline = time.monotonic() + timeout_s
    while True:
        held = _partition_counts(target)
        missing = sorted(names[name] for name, count in wanted.items() if held.get(names[name]) != count)
        if not missing and config.mode == "mm2":
            local = sorted(name for name in wanted if names[name] != name and name in held)
            if local:
                raise LookupError(f"{', '.join(local)} at the DR site ({target}) exist beside the remote topics of "
                                  f"{mirror} (promoted already?): bring the topology up afresh before a drill")
            return dict(sorted(wanted.items()))
        if not missing:
            owners = _owners(target, sorted(wanted))
            promoted = sorted(name for name, owner in owners.items() if owner != mirror)
            if promoted:
                raise LookupError(f"{', '.join(promoted)} at the DR site ({target}) are not mirror topics of "
                                  f"{mirror} (promoted already?): bring the topology up afresh, or fail back, "
                                  "before a drill")
            return dict(sorted(wanted.items()))
        if time.monotonic() > deadline:
            raise TimeoutError(f"the DR site ({target}) does not hold {', '.join(missing)} with the source's "
                               f"partitions after {timeout_s:.0f} s: is the mirror running (`causeway status`)?")
        time.sleep(0.5)


def partitions_of(topics: dict[str, int]) -> list[TopicPartition]:
    return [(topic, p) for topic, count in topics.items() for p in range(count)]
