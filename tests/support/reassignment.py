"""Partition reassignments for ZooKeeper-mode tests: ask for one over the wire, and freeze its
target broker (SIGSTOP: still registered, not fetching) so it cannot finish. A topic deleted
meanwhile stays queued for deletion (Kafka's topics ineligible for deletion) until the move is
cancelled or finishes: the hold-up the deletion tests need.

    with frozen(cluster.brokers[target]):
        assert alter_reassignment(controller, "orders", [kept, target]) == ErrorCode.NONE
        ...                                       # the move cannot finish here
        alter_reassignment(controller, "orders", None)   # cancel
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import trio

from broker.address import parse_host_port
from broker.client.connection import open_connection
from broker.protocol.messages import AlterPartitionReassignmentsRequest
from deploy.broker_process import BrokerProcess

__all__ = ["alter_reassignment", "frozen", "send"]


def send(process: BrokerProcess, request: Any, *, timeout_s: float = 60) -> Any:
    """One request to the broker on a connection of its own; its decoded answer."""
    host, port = parse_host_port(process.bootstrap)

    async def call() -> Any:
        with trio.fail_after(timeout_s):
            async with open_connection(host, port) as conn:
                return await conn.request(request)

    return trio.run(call)


def alter_reassignment(process: BrokerProcess, topic: str, replicas: list[int] | None, partition: int = 0) -> int:
    """AlterPartitionReassignments of one partition (``None`` cancels); the partition's error code."""
    answer = send(process, AlterPartitionReassignmentsRequest(topics=[
        AlterPartitionReassignmentsRequest.ReassignableTopic(name=topic, partitions=[
            AlterPartitionReassignmentsRequest.ReassignablePartition(partition_index=partition,
                                                                     replicas=replicas)])]))
    assert answer.error_code == 0, answer
    return int(answer.responses[0].partitions[0].error_code)


@contextmanager
def frozen(process: BrokerProcess) -> Iterator[None]:
    """The broker stopped with SIGSTOP for the block, continued (SIGCONT) however it ends."""
    assert process.proc is not None, "the broker is not running"
    os.kill(process.proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(process.proc.pid, signal.SIGCONT)
