"""A transactional producer's requests: AddPartitionsToTxn, AddOffsetsToTxn and EndTxn (to the
transaction coordinator, broker.coordinator.txn_coordinator), TxnOffsetCommit (to the group
coordinator, which holds the offsets until the transaction's marker decides them); and the
administrator's DescribeTransactions and ListTransactions (kafka-transactions describe / list),
which need Describe on each TransactionalId (an id without it is refused, or left out of a list).

With an authorizer, as Kafka's KafkaApis: each needs Write on the transactional id
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED); AddPartitionsToTxn Write on each topic
(TOPIC_AUTHORIZATION_FAILED, the other partitions OPERATION_NOT_ATTEMPTED); AddOffsetsToTxn and
TxnOffsetCommit Read on the group (GROUP_AUTHORIZATION_FAILED), TxnOffsetCommit Read on each
topic. Before KIP-588's versions (AddPartitionsToTxn, AddOffsetsToTxn and EndTxn v2,
TxnOffsetCommit v3) a fenced producer is told INVALID_PRODUCER_EPOCH, not PRODUCER_FENCED.

AddPartitionsToTxn v4+ comes from brokers (KIP-890: a partition leader verifying a producer's
first transactional write, broker/server/txn_verification.py): it needs ClusterAction on the
cluster (else the top-level CLUSTER_AUTHORIZATION_FAILED), batches several transactional ids,
and each is either verified (VerifyOnly: is each partition in the open transaction?) or added,
as Kafka's; the topics need no Write then. TRANSACTION_ABORTABLE (a partition not in the
transaction) is told to v4 as INVALID_TXN_STATE, which v4 knows.

EndTxn v5 (KIP-890 part 2, what Kafka 4.x producers send with transaction.version 2) bumps the
producer's epoch at every commit and abort and answers the producer id and epoch to go on with
(broker.coordinator.txn_coordinator.end_txn); v0-4 keep the epoch, as before.
"""

from __future__ import annotations

from collections.abc import Mapping

from broker.clock import now_ms
from broker.controller.model import TopicInfo
from broker.coordinator.offsets_records import OffsetCommitValue
from broker.coordinator.txn_coordinator import TransactionCoordinator
from broker.coordinator.txn_state import TxnState
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    EndTxnRequest,
    EndTxnResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from broker.server.context import RequestContext
from broker.server.handlers.base import ApiHandler
from security.acl import Operation, ResourceType

__all__ = ["HANDLERS", "fenced_code"]

TopicResult = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
PartitionResult = AddPartitionsToTxnResponse.AddPartitionsToTxnPartitionResult


def fenced_code(code: ErrorCode, version: int, fenced_from: int) -> ErrorCode:
    """PRODUCER_FENCED as the request's version can say it (KIP-588)."""
    return ErrorCode.INVALID_PRODUCER_EPOCH if code == ErrorCode.PRODUCER_FENCED and version < fenced_from else code


def _transactions(ctx: RequestContext) -> TransactionCoordinator:
    coordinator = ctx.services.transactions
    if coordinator is None:
        raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the transaction coordinator is not running")
    return coordinator


async def add_partitions(ctx: RequestContext, request: AddPartitionsToTxnRequest) -> AddPartitionsToTxnResponse:
    if ctx.version >= 4:
        return await _add_partitions_for_brokers(ctx, request)
    topics = request.v3_and_below_topics
    wanted = [(t.name, p) for t in topics for p in t.partitions]

    def answer(codes: dict[tuple[str, int], ErrorCode]) -> AddPartitionsToTxnResponse:
        return AddPartitionsToTxnResponse(results_by_topic_v3_and_below=[
            TopicResult(name=t.name, results_by_partition=[
                PartitionResult(partition_index=p, partition_error_code=fenced_code(codes[(t.name, p)], ctx.version, 2))
                for p in t.partitions])
            for t in topics])

    def every(code: ErrorCode) -> AddPartitionsToTxnResponse:
        return answer({tp: code for tp in wanted})

    if not ctx.authorize(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.v3_and_below_transactional_id):
        return every(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    known = ctx.services.controller.topics()
    refused: dict[tuple[str, int], ErrorCode] = {}
    for topic, index in wanted:
        info = known.get(topic)
        if not ctx.authorize(Operation.WRITE, ResourceType.TOPIC, topic):
            refused[(topic, index)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif info is None or not any(p.partition == index for p in info.partitions):
            refused[(topic, index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if refused:
        return answer({tp: refused.get(tp, ErrorCode.OPERATION_NOT_ATTEMPTED) for tp in wanted})
    try:
        await _transactions(ctx).add_partitions(request.v3_and_below_transactional_id,
                                                request.v3_and_below_producer_id,
                                                request.v3_and_below_producer_epoch, set(wanted))
    except KafkaError as exc:
        return every(exc.code)
    return every(ErrorCode.NONE)


async def _add_partitions_for_brokers(ctx: RequestContext,
                                      request: AddPartitionsToTxnRequest) -> AddPartitionsToTxnResponse:
    """AddPartitionsToTxn v4+ (see the module): every transaction of the request answered."""
    if not ctx.authorize_cluster(Operation.CLUSTER_ACTION):
        return AddPartitionsToTxnResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    known = ctx.services.controller.topics()
    results: list[AddPartitionsToTxnResponse.AddPartitionsToTxnResult] = []
    for transaction in request.transactions:
        wanted = {(t.name, p) for t in transaction.topics for p in t.partitions}
        codes = await _one_for_broker(ctx, transaction, wanted, known)
        if ctx.version < 5:
            codes = {tp: ErrorCode.INVALID_TXN_STATE if code == ErrorCode.TRANSACTION_ABORTABLE else code
                     for tp, code in codes.items()}
        by_topic: dict[str, list[PartitionResult]] = {}
        for (topic, index), code in sorted(codes.items()):
            by_topic.setdefault(topic, []).append(PartitionResult(partition_index=index, partition_error_code=code))
        results.append(AddPartitionsToTxnResponse.AddPartitionsToTxnResult(
            transactional_id=transaction.transactional_id,
            topic_results=[TopicResult(name=topic, results_by_partition=partitions)
                           for topic, partitions in by_topic.items()]))
    return AddPartitionsToTxnResponse(results_by_transaction=results)


async def _one_for_broker(ctx: RequestContext, transaction: AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction,
                          wanted: set[tuple[str, int]],
                          known: Mapping[str, TopicInfo]) -> dict[tuple[str, int], ErrorCode]:
    unknown = {(topic, index) for topic, index in wanted
               if topic not in known or not any(p.partition == index for p in known[topic].partitions)}
    if unknown:
        return {tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else ErrorCode.OPERATION_NOT_ATTEMPTED
                for tp in wanted}
    try:
        coordinator = _transactions(ctx)
        if transaction.verify_only:
            return coordinator.verify_partitions(transaction.transactional_id, transaction.producer_id,
                                                 transaction.producer_epoch, wanted)
        await coordinator.add_partitions(transaction.transactional_id, transaction.producer_id,
                                         transaction.producer_epoch, wanted)
    except KafkaError as exc:
        return dict.fromkeys(wanted, exc.code)
    return dict.fromkeys(wanted, ErrorCode.NONE)


async def add_offsets(ctx: RequestContext, request: AddOffsetsToTxnRequest) -> AddOffsetsToTxnResponse:
    if not ctx.authorize(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return AddOffsetsToTxnResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not ctx.authorize(Operation.READ, ResourceType.GROUP, request.group_id):
        return AddOffsetsToTxnResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    groups = ctx.services.groups
    try:
        if groups is None:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the group coordinator is not running")
        offsets_partition = ("__consumer_offsets", groups.partition_of(request.group_id))
        await _transactions(ctx).add_partitions(request.transactional_id, request.producer_id,
                                                request.producer_epoch, {offsets_partition})
    except KafkaError as exc:
        return AddOffsetsToTxnResponse(error_code=fenced_code(exc.code, ctx.version, 2))
    return AddOffsetsToTxnResponse()


async def end_txn(ctx: RequestContext, request: EndTxnRequest) -> EndTxnResponse:
    if not ctx.authorize(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return EndTxnResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    try:
        producer_id, producer_epoch = await _transactions(ctx).end_txn(
            request.transactional_id, request.producer_id, request.producer_epoch, request.committed,
            bump_epoch=ctx.version >= 5)
    except KafkaError as exc:
        return EndTxnResponse(error_code=fenced_code(exc.code, ctx.version, 2))
    return EndTxnResponse(producer_id=producer_id, producer_epoch=producer_epoch)


async def txn_offset_commit(ctx: RequestContext, request: TxnOffsetCommitRequest) -> TxnOffsetCommitResponse:
    wanted = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]

    def answer(codes: dict[tuple[str, int], ErrorCode]) -> TxnOffsetCommitResponse:
        return TxnOffsetCommitResponse(topics=[
            TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic(name=t.name, partitions=[
                TxnOffsetCommitResponse.TxnOffsetCommitResponsePartition(
                    partition_index=p.partition_index,
                    error_code=fenced_code(codes[(t.name, p.partition_index)], ctx.version, 3))
                for p in t.partitions])
            for t in request.topics])

    def every(code: ErrorCode) -> TxnOffsetCommitResponse:
        return answer({tp: code for tp in wanted})

    if not ctx.authorize(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return every(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not ctx.authorize(Operation.READ, ResourceType.GROUP, request.group_id):
        return every(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    codes = {tp: ErrorCode.NONE for tp in wanted}
    known = ctx.services.controller.topics()
    offsets: dict[tuple[str, int], OffsetCommitValue] = {}
    now = now_ms()
    for topic in request.topics:
        allowed = ctx.authorize(Operation.READ, ResourceType.TOPIC, topic.name)
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            metadata = p.committed_metadata or ""
            if not allowed:
                codes[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif topic.name not in known:
                codes[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif len(metadata.encode()) > ctx.config.offset_metadata_max_bytes:
                codes[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
            else:
                offsets[tp] = OffsetCommitValue(p.committed_offset, metadata, now,
                                                p.committed_leader_epoch if ctx.version >= 2 else -1)
    groups = ctx.services.groups
    try:
        if groups is None:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the group coordinator is not running")
        member = (request.generation_id, request.member_id, request.group_instance_id) if ctx.version >= 3 \
            else (-1, "", None)
        await groups.txn_commit(request.group_id, request.producer_id, request.producer_epoch, *member, offsets)
    except KafkaError as exc:
        return every(exc.code)
    return answer(codes)


async def describe_transactions(ctx: RequestContext,
                                request: DescribeTransactionsRequest) -> DescribeTransactionsResponse:
    """Each id the principal may Describe (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED), with the
    partitions of its transaction in topics it may Describe, as Kafka's."""
    described = []
    for transactional_id in request.transactional_ids:
        state = DescribeTransactionsResponse.TransactionState(transactional_id=transactional_id,
                                                              producer_id=-1, producer_epoch=-1)
        described.append(state)
        if not ctx.authorize(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, transactional_id):
            state.error_code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            continue
        try:
            txn = _transactions(ctx).describe(transactional_id)
        except KafkaError as exc:
            state.error_code = exc.code
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, index in txn.partitions:
            by_topic.setdefault(topic, []).append(index)
        state.transaction_state = txn.state.title
        state.transaction_timeout_ms = txn.timeout_ms
        state.transaction_start_time_ms = txn.txn_start_ms
        state.producer_id = txn.producer_id
        state.producer_epoch = txn.producer_epoch
        state.topics = [DescribeTransactionsResponse.TopicData(topic=topic, partitions=sorted(indexes))
                        for topic, indexes in sorted(by_topic.items())
                        if ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, topic, log_denied=False)]
    return DescribeTransactionsResponse(transaction_states=described)


async def list_transactions(ctx: RequestContext, request: ListTransactionsRequest) -> ListTransactionsResponse:
    """The ids this broker coordinates that the principal may Describe, filtered by state
    (names Kafka does not know come back in unknown_state_filters), producer id and (v1) how
    long the transaction has run; COORDINATOR_LOAD_IN_PROGRESS while a partition loads."""
    try:
        coordinator = _transactions(ctx)
    except KafkaError as exc:
        return ListTransactionsResponse(error_code=exc.code)
    if coordinator.is_loading:
        return ListTransactionsResponse(error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    names = {state.title: state for state in TxnState}
    unknown = [name for name in request.state_filters if name not in names]
    states = {names[name] for name in request.state_filters if name in names}
    producers = set(request.producer_id_filters)
    duration = request.duration_filter if ctx.version >= 1 else -1
    now = now_ms()
    listed = []
    for txn in coordinator.txns.values():
        if request.state_filters and txn.state not in states:
            continue
        if producers and txn.producer_id not in producers:
            continue
        if duration >= 0 and (txn.txn_start_ms < 0 or now - txn.txn_start_ms < duration):
            continue
        if not ctx.authorize(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, txn.transactional_id,
                             log_denied=False):
            continue
        listed.append(ListTransactionsResponse.TransactionState(
            transactional_id=txn.transactional_id, producer_id=txn.producer_id,
            transaction_state=txn.state.title))
    return ListTransactionsResponse(unknown_state_filters=unknown, transaction_states=listed)


HANDLERS = (
    ApiHandler(ApiKey.ADD_PARTITIONS_TO_TXN, 0, 5, add_partitions),
    ApiHandler(ApiKey.ADD_OFFSETS_TO_TXN, 0, 3, add_offsets),
    ApiHandler(ApiKey.END_TXN, 0, 5, end_txn),
    ApiHandler(ApiKey.TXN_OFFSET_COMMIT, 0, 3, txn_offset_commit),
    ApiHandler(ApiKey.DESCRIBE_TRANSACTIONS, 0, 0, describe_transactions),
    ApiHandler(ApiKey.LIST_TRANSACTIONS, 0, 1, list_transactions),
)
