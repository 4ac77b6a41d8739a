"""Replica assignment: Kafka's rack-unaware spread, and explicit assignments checked."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from broker.controller.assignment import assign_replicas, start_index_for_growth, validate_assignment
from broker.protocol.errors import ErrorCode, KafkaError


def test_fixed_start_matches_kafkas_layout() -> None:
    # AdminUtils with fixedStartIndex 0 over brokers 0..4 (Kafka's documented example).
    got = assign_replicas([0, 1, 2, 3, 4], 10, 3, start_index=0)
    assert got[0] == [0, 1, 2]
    assert got[1] == [1, 2, 3]
    assert got[4] == [4, 0, 1]
    # After a full round of brokers the follower shift grows by one.
    assert got[5] == [0, 2, 3]
    assert got[9] == [4, 1, 2]


def test_leaders_and_replicas_spread_evenly() -> None:
    got = assign_replicas([3, 1, 2], 6, 3, rng=random.Random(7))
    leaders = Counter(replicas[0] for replicas in got.values())
    assert leaders == {1: 2, 2: 2, 3: 2}
    for replicas in got.values():
        assert sorted(replicas) == [1, 2, 3]


def test_random_start_varies_first_leader() -> None:
    firsts = {assign_replicas([1, 2, 3], 1, 1, rng=random.Random(seed))[0][0] for seed in range(30)}
    assert firsts == {1, 2, 3}


def test_growth_continues_numbering() -> None:
    start = start_index_for_growth([1, 2, 3], [2, 3, 1])
    assert start == 1
    got = assign_replicas([1, 2, 3], 2, 3, start_index=start, start_partition=3)
    assert sorted(got) == [3, 4]
    assert all(len(set(r)) == 3 for r in got.values())


@pytest.mark.parametrize(
    ("partitions", "rf", "brokers", "code", "text"),
    [
        (0, 1, [1], ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0."),
        (1, 0, [1], ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0."),
        (1, 3, [1, 2], ErrorCode.INVALID_REPLICATION_FACTOR,
         "Replication factor: 3 larger than available brokers: 2."),
    ],
)
def test_refusals_use_kafkas_messages(partitions: int, rf: int, brokers: list[int], code: ErrorCode,
                                      text: str) -> None:
    with pytest.raises(KafkaError) as info:
        assign_replicas(brokers, partitions, rf)
    assert info.value.code == code
    assert text in str(info.value)


def test_explicit_assignment_accepted() -> None:
    validate_assignment({0: [1, 2], 1: [2, 3]}, [1, 2, 3])


@pytest.mark.parametrize(
    ("assignment", "text"),
    [
        ({0: [1, 2], 1: [2]}, "All partitions should have the same number of replicas"),
        ({0: [1, 1]}, "Duplicate replica assignment found"),
        ({0: [1], 2: [2]}, "consecutive 0-based"),
        ({0: [1, 9]}, "Unknown broker(s) in replica assignment: 9."),
    ],
)
def test_explicit_assignment_refused(assignment: dict[int, list[int]], text: str) -> None:
    with pytest.raises(KafkaError) as info:
        validate_assignment(assignment, [1, 2, 3])
    assert info.value.code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert text in str(info.value)


def test_growth_assignment_must_match_replication() -> None:
    with pytest.raises(KafkaError, match="Inconsistent replication factor"):
        validate_assignment({2: [1]}, [1, 2], expected_replication=2, first_partition=2)


async def test_standalone_takes_an_explicit_assignment_of_itself(tmp_path: Path) -> None:
    from broker.config import BrokerConfig
    from broker.controller.standalone import StandaloneController

    config = BrokerConfig.from_properties({"log.dirs": str(tmp_path), "node.id": "4"})
    controller = StandaloneController(config)
    topic = await controller.create_topic("placed", 99, 99, {}, assignments={0: [4], 1: [4]})
    assert [p.replicas for p in topic.partitions] == [(4,), (4,)]
    with pytest.raises(KafkaError, match=r"Unknown broker\(s\) in replica assignment: 5"):
        await controller.create_topic("elsewhere", 1, 1, {}, assignments={0: [5]})
    await controller.create_partitions("placed", 3, assignments=[[4]])
    assert len(controller.topics()["placed"].partitions) == 3
    with pytest.raises(KafkaError, match="by 2 but 1 assignments provided"):
        await controller.create_partitions("placed", 5, assignments=[[4]])
