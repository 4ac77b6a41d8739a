"""Replica assignment as Kafka's (AdminUtils.assignReplicasToBrokers, rack-unaware).

Brokers are sorted by id. Partition ``p``'s first replica (its preferred leader) is the broker at
``(p + start) % n``, so leaders go round-robin from a random start; each further replica is
shifted from the first by ``1 + (shift + j) % (n - 1)``, and the shift grows by one every ``n``
partitions, so followers spread too. A random start and shift (as Kafka) keep many small topics
from all leading on the lowest broker id.

Explicit assignments (CreateTopics and CreatePartitions with assignments) are validated with
Kafka's rules and messages: every partition the same number of replicas, no broker twice in a
partition, only brokers that are registered.

Every way a cluster grows (CreateTopics, CreatePartitions, auto-creation, a reassignment's new
replicas), in either mode, passes :func:`check_partition_limits`: KIP-578's ``max.broker.partitions``
(replicas on one broker) and ``max.partitions`` (partitions in the cluster).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from broker.config import BrokerConfig
from broker.protocol.errors import ErrorCode, KafkaError

__all__ = ["assign_replicas", "validate_assignment", "start_index_for_growth", "check_partition_limits",
           "replicas_per_broker"]


def assign_replicas(
    brokers: Iterable[int],
    num_partitions: int,
    replication_factor: int,
    *,
    start_index: int = -1,
    start_partition: int = 0,
    rng: random.Random | None = None,
) -> dict[int, list[int]]:
    """Partition id -> replicas (preferred leader first) for ``num_partitions`` partitions
    numbered from ``start_partition``.

    ``start_index`` -1 picks the start (and the follower shift) at random, as Kafka does for a
    new topic; growth passes the index of partition 0's first replica so new partitions continue
    the existing pattern. Raises KafkaError INVALID_PARTITIONS / INVALID_REPLICATION_FACTOR with
    Kafka's messages.
    """
    ids = sorted(set(brokers))
    if num_partitions <= 0:
        raise KafkaError(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
    if replication_factor > len(ids):
        raise KafkaError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Replication factor: {replication_factor} larger than available brokers: {len(ids)}.",
        )
    n = len(ids)
    chooser = rng or random
    start = start_index if start_index >= 0 else chooser.randrange(n)
    shift = start_index if start_index >= 0 else chooser.randrange(n)
    out: dict[int, list[int]] = {}
    partition = max(0, start_partition)
    for _ in range(num_partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start) % n
        replicas = [ids[first]]
        for j in range(replication_factor - 1):
            replicas.append(ids[(first + 1 + (shift + j) % (n - 1)) % n])
        out[partition] = replicas
        partition += 1
    return out


def start_index_for_growth(brokers: Iterable[int], partition0_replicas: Sequence[int]) -> int:
    """Where new partitions of an existing topic start: the index of the first broker whose id
    is at least partition 0's preferred leader (AdminZkClient.createPartitions)."""
    ids = sorted(set(brokers))
    if not partition0_replicas:
        return 0
    for index, broker in enumerate(ids):
        if broker >= partition0_replicas[0]:
            return index
    return 0


def validate_assignment(
    assignment: Mapping[int, Sequence[int]],
    live_brokers: Iterable[int],
    *,
    expected_replication: int | None = None,
    first_partition: int = 0,
) -> None:
    """Check an explicit assignment; raises KafkaError(INVALID_REPLICA_ASSIGNMENT) with Kafka's
    message. Partitions must be numbered ``first_partition``, ``first_partition + 1``, ...;
    ``expected_replication`` (growth) is the existing partitions' replica count."""
    if not assignment:
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Replica assignment is empty.")
    sizes = {len(replicas) for replicas in assignment.values()}
    if len(sizes) != 1:
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                         "All partitions should have the same number of replicas")
    size = sizes.pop()
    if size == 0:
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                         "Replica assignment lists no broker for a partition.")
    if expected_replication is not None and size != expected_replication:
        raise KafkaError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"Inconsistent replication factor between partitions, existing partitions have "
            f"{expected_replication} replicas while the new ones have {size}.",
        )
    for replicas in assignment.values():
        if len(set(replicas)) != len(replicas):
            shown = {p: list(r) for p, r in sorted(assignment.items())}
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Duplicate replica assignment found: {shown}")
    wanted = list(range(first_partition, first_partition + len(assignment)))
    if sorted(assignment) != wanted:
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                         "partitions should be a consecutive 0-based integer sequence")
    known = set(live_brokers)
    unknown = sorted({b for replicas in assignment.values() for b in replicas} - known)
    if unknown:
        raise KafkaError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"Unknown broker(s) in replica assignment: {', '.join(map(str, unknown))}.",
        )


def replicas_per_broker(assignments: Iterable[Sequence[int]]) -> Counter[int]:
    """How many of the partitions ``assignments`` (one replica list each) each broker holds."""
    counts: Counter[int] = Counter()
    for replicas in assignments:
        counts.update(set(replicas))
    return counts


def check_partition_limits(config: BrokerConfig, held: Mapping[int, int], held_partitions: int,
                           adding: Mapping[int, int], new_partitions: int) -> None:
    """Refuse growth past KIP-578's limits, before anything is built: KafkaError(POLICY_VIOLATION)
    when a broker that gets replicas (``adding``: broker -> new replicas; ``held``: what each holds
    now) would hold more than ``max.broker.partitions``, or the cluster (``held_partitions`` now)
    more than ``max.partitions`` partitions. Only the brokers that get new replicas count, as KIP-578
    says: a broker already past a limit lowered since does not block growth elsewhere. The wording
    is that of KIP-578's proposal (Kafka never shipped it), plus what to do about it."""
    limit = config.max_broker_partitions
    over = sorted(b for b, n in adding.items() if n > 0 and held.get(b, 0) + n > limit)
    if over:
        first = over[0]
        raise KafkaError(
            ErrorCode.POLICY_VIOLATION,
            f"Provided assignment will cause brokers [{','.join(map(str, over))}] to exceed the limit of {limit} "
            f"on the number of partition replicas per broker (max.broker.partitions={limit}; broker {first} holds "
            f"{held.get(first, 0)} and would get {adding[first]} more); ask for fewer partitions, delete topics, "
            "or raise max.broker.partitions.")
    limit = config.max_partitions
    if new_partitions > 0 and held_partitions + new_partitions > limit:
        raise KafkaError(
            ErrorCode.POLICY_VIOLATION,
            f"The cluster already holds {held_partitions} partitions. This request requires adding {new_partitions} "
            f"more, which would exceed the cluster-wide limit of {limit} (max.partitions={limit}); ask for fewer "
            "partitions, delete topics, or raise max.partitions.")
