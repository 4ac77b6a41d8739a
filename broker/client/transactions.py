"""Transactions for a caller that builds its own produce requests (the mirror): InitProducerId
with a transactional id, AddPartitionsToTxn, EndTxn.

Kafka's transactions (KIP-98) from the client's side: InitProducerId fences an older instance
of the same id and aborts what it left open, AddPartitionsToTxn comes before the first write to
a partition in a transaction, and EndTxn commits or aborts.

Records are sent with `produce_batches(..., transactional_id=...)` in batches whose
transactional bit is set; this module only talks to the transaction coordinator.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from broker.client.cluster import BrokerInfo, Client, TopicPartition
from broker.client.connection import check_error
from broker.protocol.constants import CoordinatorType
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.messages import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from broker.retry import retry

__all__ = ["TransactionalProducer", "init_transactional_producer"]

T = TypeVar("T")

# AddPartitionsToTxn v0-3 is the client's; v4+ is the broker's verification (KIP-890).
_CLIENT_ADD_PARTITIONS_MAX_VERSION = 3
# EndTxn v5 (KIP-890 part 2) bumps the epoch at every end; this producer keeps its epoch for its
# life (its callers stamp their batches with it), as Kafka's producer does before transaction.version 2.
_END_TXN_MAX_VERSION = 4

# Answers after which the same request succeeds a moment later: the coordinator moved or is
# loading, or the previous transaction's markers are still being written.
_AGAIN = frozenset({ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
                    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.CONCURRENT_TRANSACTIONS})


@dataclass
class TransactionalProducer:
    """A producer id and epoch bound to `transactional_id`. Any KafkaError other than the
    retried ones (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH: a newer instance took the id)
    means this instance must stop writing."""

    client: Client
    transactional_id: str
    producer_id: int
    producer_epoch: int

    async def add_partitions(self, partitions: Iterable[TopicPartition]) -> None:
        """Make `partitions` part of the open transaction (starting one if none is open)."""
        topics: dict[str, list[int]] = {}
        for tp in partitions:
            topics.setdefault(tp.topic, []).append(tp.partition)
        if not topics:
            return
        request = AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=self.transactional_id,
            v3_and_below_producer_id=self.producer_id,
            v3_and_below_producer_epoch=self.producer_epoch,
            v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=ps)
                                 for t, ps in topics.items()],
        )

        async def ask(coordinator: BrokerInfo) -> None:
            response: AddPartitionsToTxnResponse = await self.client.request(
                coordinator.node_id, request, max_version=_CLIENT_ADD_PARTITIONS_MAX_VERSION)
            for topic in response.results_by_topic_v3_and_below:
                for p in topic.results_by_partition:
                    check_error(p.partition_error_code, f"add {topic.name}-{p.partition_index} to transaction "
                                f"{self.transactional_id!r}")

        await _with_coordinator(self.client, self.transactional_id, "AddPartitionsToTxn", ask)

    async def end(self, *, commit: bool) -> None:
        """Commit or abort the open transaction (EndTxn); returns once the coordinator has
        logged the decision (the markers follow; a read_committed reader waits for them)."""
        request = EndTxnRequest(transactional_id=self.transactional_id, producer_id=self.producer_id,
                                producer_epoch=self.producer_epoch, committed=commit)

        async def ask(coordinator: BrokerInfo) -> None:
            response: EndTxnResponse = await self.client.request(coordinator.node_id, request,
                                                                  max_version=_END_TXN_MAX_VERSION)
            check_error(response.error_code, f"{'commit' if commit else 'abort'} transaction "
                        f"{self.transactional_id!r}")

        await _with_coordinator(self.client, self.transactional_id, "EndTxn", ask)


async def init_transactional_producer(client: Client, transactional_id: str, *,
                                      transaction_timeout_ms: int = 60_000) -> TransactionalProducer:
    """InitProducerId for `transactional_id`: a new epoch, which fences any older instance and
    aborts the transaction it left open. Raises KafkaError, ConnectionFailed."""
    request = InitProducerIdRequest(transactional_id=transactional_id, transaction_timeout_ms=transaction_timeout_ms)

    async def ask(coordinator: BrokerInfo) -> TransactionalProducer:
        response: InitProducerIdResponse = await client.request(coordinator.node_id, request)
        check_error(response.error_code, f"InitProducerId for {transactional_id!r}")
        return TransactionalProducer(client, transactional_id, response.producer_id, response.producer_epoch)

    return await _with_coordinator(client, transactional_id, "InitProducerId", ask)


async def _with_coordinator(client: Client, transactional_id: str, what: str,
                            ask: Callable[[BrokerInfo], Awaitable[T]]) -> T:
    """`ask(coordinator)`, looked up again and retried with backoff after a "not yet" answer
    until the call's deadline; any other error is raised at once."""

    async def attempt() -> T:
        return await ask(await _find_coordinator(client, transactional_id))

    def again(exc: Exception) -> bool:
        return isinstance(exc, KafkaError) and exc.code in _AGAIN

    with client.deadline(f"{what} for transactional id {transactional_id!r}"):
        return await retry(attempt, retriable=again, backoff=client.backoff)


async def _find_coordinator(client: Client, transactional_id: str) -> BrokerInfo:
    request = FindCoordinatorRequest(key=transactional_id, key_type=CoordinatorType.TRANSACTION,
                                     coordinator_keys=[transactional_id])
    response: FindCoordinatorResponse = await client.request_any(request)
    if response.coordinators:
        found = response.coordinators[0]
        check_error(found.error_code, f"find coordinator of transactional id {transactional_id!r}", found.error_message)
        return BrokerInfo(found.node_id, found.host, found.port)
    check_error(response.error_code, f"find coordinator of transactional id {transactional_id!r}",
                response.error_message)
    return BrokerInfo(response.node_id, response.host, response.port)
