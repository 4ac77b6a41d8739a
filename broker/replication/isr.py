"""How a partition leader asks the controller to change its ISR (KIP-497's AlterPartition).

The leader decides that a follower fell behind (``replica.lag.time.max.ms``) or caught up; the
controller writes the new ISR to the partition state znode with a conditional write on its
zkVersion (the partition epoch) and answers with the state it wrote. In ZooKeeper mode the
channel sends AlterPartition to the controller (broker/controller/zk); a standalone broker has
none: its ISR of one never changes.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Protocol

from broker.controller.model import PartitionInfo

__all__ = ["IsrChannel"]


class IsrChannel(Protocol):
    async def alter_partition(self, topic: str, topic_id: uuid.UUID, partition: int, leader_epoch: int,
                              new_isr: Sequence[int], partition_epoch: int) -> PartitionInfo:
        """Ask the controller to make ``new_isr`` the partition's ISR.

        Returns the state the controller wrote (its ``partition_epoch`` the new zkVersion).
        Raises KafkaError when refused: FENCED_LEADER_EPOCH or INVALID_UPDATE_VERSION (this
        leader's view is stale: it waits for the controller's next LeaderAndIsr), NOT_CONTROLLER
        and other retriable codes (tried again at the next ISR check).
        """
        ...
