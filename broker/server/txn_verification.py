"""A partition leader asks the transaction coordinator whether a producer's transaction holds
the partitions it is about to write (KIP-890's server-side defence, Kafka's
AddPartitionsToTxnManager).

Before a producer's first transactional batch of a transaction is appended to a partition, its
leader asks the coordinator of the request's transactional id (the leader of the id's
`__transaction_state` partition) with AddPartitionsToTxn v4+ and VerifyOnly: in place when that
is this broker, else over the inter-broker connection the marker sender keeps
(broker/server/txn_markers.py). A partition the producer never added to its open transaction is
refused, so a late or stray write cannot open a transaction that no marker will ever end (a
hanging transaction holds the last stable offset, and every read_committed reader, for good).

The answer per partition is Kafka's: NONE, or the error the produce maps (broker/server/
handlers/produce.py). PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH (what producers handle
here); a coordinator that cannot be reached or asked is NETWORK_EXCEPTION or
COORDINATOR_NOT_AVAILABLE; a coordinator that refuses the request's cluster rights is
INVALID_TXN_STATE (the producer must not see CLUSTER_AUTHORIZATION_FAILED); a coordinator too
old to verify (no AddPartitionsToTxn v4) lets the write through, as Kafka's does.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from broker import metrics
from broker.client.connection import ClientError
from broker.coordinator.offsets_records import partition_for
from broker.coordinator.txn_records import TXN_STATE_TOPIC
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.messages import AddPartitionsToTxnRequest, AddPartitionsToTxnResponse
from broker.server.context import BrokerServices

__all__ = ["TxnVerifier"]

log = logging.getLogger(__name__)

Partition = tuple[str, int]
_VERIFY_VERSION = 4  # the first version with VerifyOnly


class OtherBrokers(Protocol):
    """What the verifier needs of the marker sender's connections to other brokers."""

    async def request_broker(self, broker_id: int, request: Any, *, version: int | None = None) -> Any: ...

    async def broker_version(self, broker_id: int, api_key: int) -> int: ...


class TxnVerifier:
    """`verify` for the produce path (BrokerServices.txn_verifier)."""

    def __init__(self, services: BrokerServices, brokers: OtherBrokers) -> None:
        self._services = services
        self._brokers = brokers

    def _coordinator(self, transactional_id: str) -> int | None:
        """The broker leading the id's `__transaction_state` partition; None when there is none
        (the topic does not exist: no transaction was ever begun, or the partition has no
        leader)."""
        info = self._services.controller.topics().get(TXN_STATE_TOPIC)
        if info is None or not info.partitions:
            return None
        leader = info.leader_of(partition_for(transactional_id, len(info.partitions)))
        return leader if leader >= 0 else None

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: set[Partition]) -> dict[Partition, ErrorCode]:
        """Each partition's answer (see the module); never raises."""
        leader = self._coordinator(transactional_id)
        if leader is None:
            metrics.TXN_VERIFICATION_FAILURES.inc(len(partitions))
            return dict.fromkeys(partitions, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        local = leader == self._services.config.broker_id
        metrics.TXN_VERIFICATIONS.labels("local" if local else "remote").inc()
        try:
            if local:
                coordinator = self._services.transactions
                if coordinator is None:
                    raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
                answers = coordinator.verify_partitions(transactional_id, producer_id, producer_epoch, partitions)
            else:
                answers = await self._ask(leader, transactional_id, producer_id, producer_epoch, partitions)
        except KafkaError as exc:
            answers = dict.fromkeys(partitions, exc.code)
        except (ClientError, OSError) as exc:
            log.info("verifying the transaction of %r with broker %d: %s", transactional_id, leader, exc)
            answers = dict.fromkeys(partitions, ErrorCode.NETWORK_EXCEPTION)
        failed = sum(1 for code in answers.values() if code != ErrorCode.NONE)
        if failed:
            metrics.TXN_VERIFICATION_FAILURES.inc(failed)
        return {tp: ErrorCode.INVALID_PRODUCER_EPOCH if code == ErrorCode.PRODUCER_FENCED else ErrorCode(code)
                for tp, code in answers.items()}

    async def _ask(self, leader: int, transactional_id: str, producer_id: int, producer_epoch: int,
                   partitions: set[Partition]) -> dict[Partition, ErrorCode]:
        try:
            version = await self._brokers.broker_version(leader, ApiKey.ADD_PARTITIONS_TO_TXN)
        except KafkaError as exc:
            if exc.code != ErrorCode.UNSUPPORTED_VERSION:
                raise
            version = -1
        if version < _VERIFY_VERSION:
            log.warning("broker %d cannot verify transactions (no AddPartitionsToTxn v4); the write goes on", leader)
            return dict.fromkeys(partitions, ErrorCode.NONE)
        by_topic: dict[str, list[int]] = {}
        for topic, index in partitions:
            by_topic.setdefault(topic, []).append(index)
        request = AddPartitionsToTxnRequest(transactions=[AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction(
            transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
            verify_only=True, topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=sorted(ids))
                                      for t, ids in sorted(by_topic.items())])])
        response: AddPartitionsToTxnResponse = await self._brokers.request_broker(leader, request, version=version)
        if response.error_code != ErrorCode.NONE:
            code = ErrorCode(response.error_code)
            return dict.fromkeys(partitions, ErrorCode.INVALID_TXN_STATE
                                 if code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED else code)
        # A partition the answer leaves out is not taken as verified: the produce is retried.
        answers = dict.fromkeys(partitions, ErrorCode.NETWORK_EXCEPTION)
        for result in response.results_by_transaction:
            if result.transactional_id != transactional_id:
                continue  # not asked: a peer's answer is not trusted
            for topic_result in result.topic_results:
                for p in topic_result.results_by_partition:
                    tp = (topic_result.name, p.partition_index)
                    if tp in answers:
                        answers[tp] = ErrorCode(p.partition_error_code)
        return answers
