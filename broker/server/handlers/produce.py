"""Produce: append record batches, as bytes, to partition logs.

No record is decoded here. Every partition of the request goes through the broker's one append
path (broker/replication/append.py, as a client's: ``AppendOrigin.CLIENT``): the required acks,
internal topics, leadership, ``min.insync.replicas`` with acks=all (-1), the append
(``Partition.append``: batch headers and CRCs, the producer's sequence, base offsets), the fsync
at ``flush.messages``, then with acks=all the wait, for all partitions at once and at most the
request's ``timeout_ms``, until each one's high watermark passes its batches (the ISR has them):
REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS_AFTER_APPEND, NOT_LEADER_OR_FOLLOWER as Kafka's
DelayedProduce answers. With an ISR of one (a standalone broker) the high watermark passes the
batches at the append and nothing waits.

A produce with a transactional id may carry transactional batches: the log opens each producer's
transaction at its first one (broker/storage/producer_state.py). Before that first one, as
Kafka's ReplicaManager.handleProduceAppend (KIP-890, `transaction.partition.verification.enable`),
the transaction coordinator is asked whether the producer added the partition to its open
transaction (broker/server/txn_verification.py); a partition it did not is refused and nothing
is written: INVALID_TXN_STATE ("Partition was not added to the transaction"), or from Produce
v11 TRANSACTION_ABORTABLE, which Kafka 4.x producers answer by aborting. A coordinator that
cannot answer now (moving, loading, deciding the transaction, unreachable) is
NOT_ENOUGH_REPLICAS, which every producer retries without refreshing its metadata, as Kafka
answers. The request's transactional batches must be one producer's (else
INVALID_PRODUCER_ID_MAPPING for them all).

Here: the request's own checks of each topic (it exists; it is not a mirror topic, which only
its mirror writes, by LinkAppend) and the answer; acks=0 gets none at all.

With an authorizer, as Kafka's KafkaApis: a produce with a transactional id needs Write on it
(else every partition is answered TRANSACTIONAL_ID_AUTHORIZATION_FAILED and nothing is written);
each topic needs Write on it, decided once per topic (a partition of a topic refused is answered
TOPIC_AUTHORIZATION_FAILED and never reaches the append path; the others are written).
"""

from __future__ import annotations

from functools import partial

from broker.controller.model import TopicInfo
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.messages import ProduceRequest, ProduceResponse, Records
from broker.protocol.records import read_batch_header
from broker.replication.append import AppendEntry, AppendOrigin, LeaderAppend, append_records
from broker.replication.partition import Partition
from broker.server import request_metrics
from broker.server.context import RequestContext
from broker.server.handlers.base import ApiHandler
from broker.server.topic_configs import refuse_if_mirror
from broker.storage.log import RecordErrors
from broker.storage.producer_state import VerificationGuard
from security.acl import Operation, ResourceType

PartitionResponse = ProduceResponse.PartitionProduceResponse
PartitionProduceData = ProduceRequest.PartitionProduceData
RecordError = ProduceResponse.BatchIndexAndErrorMessage


def _check_topic(name: str, topic: TopicInfo | None, records: Records | None) -> None:
    if topic is None:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    if records is None:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE)
    refuse_if_mirror(name, topic.configs)  # only its mirror writes it (LinkAppend)


def _refused(index: int, exc: KafkaError) -> PartitionResponse:
    """The answer for a refused append; records refused one by one are named (KIP-467, v8+:
    older versions drop the fields), so a client fails only those records."""
    response = PartitionResponse(index=index, error_code=exc.code, base_offset=-1, error_message=exc.message or None)
    if isinstance(exc, RecordErrors):
        response.record_errors = [RecordError(batch_index=i, batch_index_error_message=m)
                                  for i, m in exc.record_errors]
    return response


def _answer(appended: LeaderAppend) -> PartitionResponse:
    if appended.refused is not None:
        return _refused(appended.index, appended.refused)
    result = appended.result
    assert result is not None  # appended, as it was not refused
    return PartitionResponse(
        index=appended.index,
        error_code=appended.acks,  # the batches are in the leader's log whatever the ISR answered
        base_offset=result.first_offset,
        log_append_time_ms=result.log_append_time,
        log_start_offset=result.log_start_offset,
    )


def _denied(index: int, code: ErrorCode) -> PartitionResponse:
    return PartitionResponse(index=index, error_code=code, base_offset=-1)


async def handle(ctx: RequestContext, request: ProduceRequest) -> ProduceResponse | None:
    if request.transactional_id is not None and not ctx.authorize(Operation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                                                  request.transactional_id):
        if request.acks == 0:
            return None
        return ProduceResponse(responses=[
            ProduceResponse.TopicProduceResponse(name=t.name, partition_responses=[
                _denied(p.index, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED) for p in t.partition_data])
            for t in request.topic_data])
    writable = {name: ctx.authorize(Operation.WRITE, ResourceType.TOPIC, name)
                for name in {t.name for t in request.topic_data}}
    topics = ctx.services.controller.topics()
    wanted = [(topic_data.name, data) for topic_data in request.topic_data if writable[topic_data.name]
              for data in topic_data.partition_data]
    refused: dict[tuple[str, int], KafkaError] = {}
    guards: dict[tuple[str, int], VerificationGuard] = {}
    if request.transactional_id is not None and ctx.config.transaction_partition_verification_enable:
        refused, guards = await _verify(ctx, request.transactional_id, wanted)
    entries = [AppendEntry(name, data.index, data.records,
                           check=partial(_check_topic, name, topics.get(name), data.records),
                           verification=guards.get((name, data.index)))
               for name, data in wanted if (name, data.index) not in refused]
    appended = await append_records(ctx.services.replicas, entries, origin=AppendOrigin.CLIENT,
                                    required_acks=request.acks, timeout_ms=request.timeout_ms,
                                    transactional=request.transactional_id is not None)
    request_metrics.count_appended(entries, appended)
    appends = iter(appended)
    if request.acks == 0:
        return None  # the client expects no answer at all

    def answer(name: str, index: int) -> PartitionResponse:
        if not writable[name]:
            return _denied(index, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        exc = refused.get((name, index))
        return _answer(next(appends)) if exc is None else _refused(index, exc)

    return ProduceResponse(responses=[
        ProduceResponse.TopicProduceResponse(
            name=topic_data.name,
            partition_responses=[answer(topic_data.name, data.index) for data in topic_data.partition_data])
        for topic_data in request.topic_data
    ])


# What a verification that could not be done now becomes for the producer (Kafka's choice: a
# retriable error every client retries the same way, and one that does not send it to refresh
# its metadata).
_RETRY_VERIFICATION = frozenset({
    ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.NETWORK_EXCEPTION, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR})


def _verification_error(code: ErrorCode, version: int) -> KafkaError:
    if code == ErrorCode.TRANSACTION_ABORTABLE and version <= 10:
        code = ErrorCode.INVALID_TXN_STATE  # older producers do not know TRANSACTION_ABORTABLE
    if code in (ErrorCode.INVALID_TXN_STATE, ErrorCode.TRANSACTION_ABORTABLE):
        return KafkaError(code, "Partition was not added to the transaction")
    if code in _RETRY_VERIFICATION:
        return KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS, "Unable to verify the partition has been added to the "
                                                         f"transaction. Underlying error: {code.name}")
    return KafkaError(code)


async def _verify(ctx: RequestContext, transactional_id: str, wanted: list[tuple[str, PartitionProduceData]],
                  ) -> tuple[dict[tuple[str, int], KafkaError], dict[tuple[str, int], VerificationGuard]]:
    """Ask the coordinator about the partitions whose first batch would open the producer's
    transaction here (see the module): the refused ones, and the guards of the verified ones.
    A partition not led here, or whose batches cannot be read, is left to the append to refuse."""
    producers: set[tuple[int, int]] = set()
    transactional: list[tuple[str, int, Partition]] = []
    for name, data in wanted:
        records = data.records
        try:
            header = read_batch_header(records) if records else None
            partition = ctx.services.replicas.get(name, data.index)
        except KafkaError:
            continue
        if header is None or not header.is_transactional or not header.has_producer_id or not partition.is_leader:
            continue
        producers.add((header.producer_id, header.producer_epoch))
        transactional.append((name, data.index, partition))
    if len(producers) > 1:
        exc = KafkaError(ErrorCode.INVALID_PRODUCER_ID_MAPPING, "Transactional records contained more than one "
                                                                  "producer ID")
        return {(name, index): exc for name, index, _ in transactional}, {}
    verifier = ctx.services.txn_verifier
    if not producers or verifier is None:
        return {}, {}
    (producer_id, producer_epoch), = producers
    guards: dict[tuple[str, int], tuple[Partition, VerificationGuard]] = {}
    for name, index, partition in transactional:
        guard = partition.start_txn_verification(producer_id)
        if guard is not None:
            guards[(name, index)] = (partition, guard)
    if not guards:
        return {}, {}
    answers = await verifier.verify(transactional_id, producer_id, producer_epoch, set(guards))
    refused: dict[tuple[str, int], KafkaError] = {}
    for tp, (partition, guard) in guards.items():
        code = answers.get(tp, ErrorCode.NETWORK_EXCEPTION)
        if code != ErrorCode.NONE:
            partition.drop_txn_verification(producer_id, guard)
            refused[tp] = _verification_error(code, ctx.version)
    return refused, {tp: guard for tp, (_, guard) in guards.items() if tp not in refused}


HANDLER = ApiHandler(ApiKey.PRODUCE, 3, 11, handle)
