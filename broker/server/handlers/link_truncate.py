"""LinkTruncate (Causeway's API key 10001): failback of a link-mode mirror, at the old primary.

After a failover the new primary's copy of a topic ends where the old primary's log diverged
from it: everything below is the old primary's batches byte for byte (a copy), what lies past it
at the old primary was acknowledged there and never copied. The failback command
(mirror/failback.py) finds that point per partition and sends it here, to each partition's
leader at the old primary, with the last batch both logs share (its offsets and CRC, as the new
primary holds it). Per topic, on its partitions' leader:

1. every partition is checked first, and nothing changes when one is refused: this broker leads
   it; it holds the shared batch as the new primary does (else the logs share nothing: this
   cluster was never the source of that copy, or its log was replaced); the divergence point
   lies within the log; ``AllowTruncation`` false (reverse-and-start, after a planned promote)
   refuses a log that holds anything past it; a promoted mirror topic whose promotion marker
   stays below the cut (its local writes follow the marker: a second round trip) waits,
   NOT_ENOUGH_REPLICAS, until every replica holds that marker (the log then becomes a mirror
   topic again at its end, broker/storage/link_copy.py). ``ValidateOnly`` stops here: the
   command checks every leader before any cuts;
2. the topic becomes the mirror topic of ``LinkName`` (``causeway.mirror.name`` set through the
   controller, as the mirror sets it at creation) and the handler waits until this broker applied
   it: from then on producers are refused, so nothing lands past the cut;
3. each partition's log is cut at the divergence point, what is cut moved to the partition's
   quarantine directory (broker/storage/truncation.py, as a follower's cut, its manifest saying
   these records were acknowledged: the failover's RPO), named in the answer with its offsets
   and counts; then the handler waits until every replica has cut its own log (they follow by
   their normal truncation: ``Partition.truncate_for_failback``). LinkAppend to the partition
   is refused, NOT_ENOUGH_REPLICAS, until they have.

Rerun after a crash, it finds nothing more to cut (the log already ends at the divergence point,
or holds the new primary's batches past it) and answers where the partition stands. A timeout
(the config not applied, a replica not following in time) is REQUEST_TIMED_OUT, saying which;
running the request again goes on from there.

Authorization is LinkAppend's: Alter on the topic or ClusterAction on the cluster.
"""

from __future__ import annotations

import logging

import trio

from broker.controller.model import TopicInfo
from broker.protocol.api import ApiKey
from broker.protocol.constants import MIRROR_NAME_CONFIG, MIRROR_STATE_CONFIG
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.messages import LinkTruncateRequest, LinkTruncateResponse
from broker.protocol.records import BATCH_HEADER_SIZE, read_batch_header
from broker.replication.partition import Partition
from broker.server.context import RequestContext
from broker.server.handlers.base import ApiHandler
from broker.server.handlers.link_append import may_link
from broker.server.topic_configs import mirror_name

__all__ = ["HANDLER", "check_partition"]

log = logging.getLogger(__name__)

PartitionRequest = LinkTruncateRequest.LinkTruncatePartition
PartitionResponse = LinkTruncateResponse.LinkTruncatePartitionResponse
_APPLIED_POLL_S = 0.05


def _refused(why: str) -> KafkaError:
    return KafkaError(ErrorCode.INVALID_REQUEST, why)


def _check_shared(partition: Partition, asked: PartitionRequest) -> None:
    """The log holds the last batch both logs share as the new primary holds it."""
    plog = partition.log
    where = f"{partition.topic}-{partition.index}"
    if asked.shared_base_offset < 0:
        if plog.log_end_offset > max(asked.truncate_offset, plog.log_start_offset):
            raise _refused(f"{where}: the new primary's log shares no batch with this one (this cluster was never "
                           f"the source of its copy, or the logs were replaced): nothing is cut")
        return
    if asked.shared_last_offset < plog.log_start_offset:
        return  # deleted here since (retention, DeleteRecords): nothing left to compare
    data = plog.read(asked.shared_base_offset, BATCH_HEADER_SIZE, min_one_batch=False).data
    held = read_batch_header(data) if len(data) >= BATCH_HEADER_SIZE else None
    if held is None or (held.base_offset, held.last_offset, held.crc) != (
            asked.shared_base_offset, asked.shared_last_offset, asked.shared_crc):
        raise _refused(f"{where}: the batch at offsets [{asked.shared_base_offset}, {asked.shared_last_offset}] is not "
                       f"the new primary's (CRC {asked.shared_crc}): the logs share no epoch of history there (this "
                       f"cluster was never the source of that copy); nothing is cut")


def check_partition(partition: Partition, asked: PartitionRequest) -> None:
    """Step 1 of the module, for one partition. Raises KafkaError."""
    if not partition.is_leader:
        raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    plog = partition.log
    where = f"{partition.topic}-{partition.index}"
    at = asked.truncate_offset
    if at > plog.log_end_offset:
        raise _refused(f"{where}: the divergence point {at} lies past this log's end {plog.log_end_offset}: the new "
                       f"primary holds copied records this cluster does not (it was never their source, or lost "
                       f"them); nothing is cut")
    if at < plog.log_start_offset:
        raise _refused(f"{where}: the divergence point {at} lies below this log's start {plog.log_start_offset}")
    _check_shared(partition, asked)
    if not asked.allow_truncation and plog.log_end_offset > at:
        raise _refused(f"{where}: holds {plog.log_end_offset - at} offset(s) past the new primary's copy "
                       f"({at}..{plog.log_end_offset - 1}): reverse-and-start cuts nothing; after a failover use "
                       f"truncate-and-restore, which keeps them in quarantine")
    marker = plog.copy.marker
    if marker >= 0 and at > marker:
        # A promoted mirror topic that kept its local writes: it becomes a mirror topic again
        # at its end, each replica at its own (broker/storage/link_copy.py). A replica that has
        # not fetched the marker yet would take it, fetched after that, for the end of the new copy.
        behind = sorted(r for r, state in partition.followers.items() if state.log_end_offset <= marker)
        if behind:
            raise KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS,
                             f"{where} was a promoted mirror topic and replica(s) {', '.join(map(str, behind))} have "
                             f"not fetched its promotion marker (offset {marker}) yet: nothing is changed until every "
                             f"replica holds it; run the failback again once they have")


async def _apply_owner(ctx: RequestContext, name: str, topic: TopicInfo, link_name: str,
                       partitions: list[Partition]) -> None:
    """Step 2: the topic becomes the mirror topic of `link_name`, applied at this broker."""
    if mirror_name(topic.configs) != link_name:
        # A new link: whatever link state the topic kept from before (a pause) is not this one's.
        configs = {k: v for k, v in topic.configs.items() if k != MIRROR_STATE_CONFIG}
        await ctx.services.controller.set_topic_configs(name, {**configs, MIRROR_NAME_CONFIG: link_name})
        log.warning("topic %s is the mirror topic of mirror %s again (failback): producers are refused", name,
                    link_name)
    while True:
        if all(p.log.config.mirror_name == link_name for p in partitions):
            return
        # Applied when the config change reaches this broker (ZooKeeper's notification): nothing
        # here to wait on but the partitions' configs.
        await trio.sleep(_APPLIED_POLL_S)


def _answer(index: int, partition: Partition | None, exc: KafkaError | None = None) -> PartitionResponse:
    answer = PartitionResponse(index=index)
    if exc is not None:
        answer.error_code, answer.error_message = exc.code, exc.message or None
    if partition is not None and partition.is_leader:
        answer.log_end_offset = partition.log.log_end_offset
    return answer


async def _restore_topic(ctx: RequestContext, request: LinkTruncateRequest, name: str,
                         asked: list[PartitionRequest], deadline: float) -> list[PartitionResponse]:
    topic = ctx.services.controller.topics().get(name)
    if topic is None:
        return [_answer(p.index, None, KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                  f"This server does not host topic-partition {name}-{p.index}"))
                for p in asked]
    owner = mirror_name(topic.configs)
    if owner is not None and owner != request.link_name:
        why = _refused(f"topic {name} is the mirror topic of mirror {owner}, not of mirror {request.link_name}")
        return [_answer(p.index, None, why) for p in asked]
    partitions: list[Partition] = []
    failed: dict[int, KafkaError] = {}
    for p in asked:
        try:
            partition = ctx.services.replicas.get(name, p.index)
            check_partition(partition, p)
            partitions.append(partition)
        except KafkaError as exc:
            failed[p.index] = exc
    if failed or request.validate_only:
        others = _refused(f"not restored: partition(s) {', '.join(map(str, sorted(failed)))} of topic {name} were "
                          f"refused") if failed else None
        return [_answer(p.index, pt, failed.get(p.index, others))
                for p, pt in zip(asked, [_hosted(ctx, name, p.index) for p in asked], strict=True)]
    answers: list[PartitionResponse] = []
    with trio.move_on_after(max(0.0, deadline - trio.current_time())) as scope:
        await _apply_owner(ctx, name, topic, request.link_name, partitions)
    if scope.cancelled_caught:
        late = _timed_out(f"topic {name}: this broker did not apply {MIRROR_NAME_CONFIG}={request.link_name} within "
                          f"{request.timeout_ms} ms; nothing was cut: run the failback again")
        return [_answer(p.index, pt, late) for p, pt in zip(asked, partitions, strict=True)]
    for p, partition in zip(asked, partitions, strict=True):
        answers.append(await _cut(partition, p, request.link_name, deadline, request.timeout_ms))
    return answers


def _hosted(ctx: RequestContext, name: str, index: int) -> Partition | None:
    try:
        return ctx.services.replicas.get(name, index)
    except KafkaError:
        return None


def _timed_out(why: str) -> KafkaError:
    return KafkaError(ErrorCode.REQUEST_TIMED_OUT, why)


async def _cut(partition: Partition, asked: PartitionRequest, link_name: str, deadline: float,
               timeout_ms: int) -> PartitionResponse:
    """Step 3 for one partition."""
    try:
        check_partition(partition, asked)  # again: the log may have changed while the config applied
        cut = await partition.truncate_for_failback(
            asked.truncate_offset, f"failback: the new primary's copy (mirror {link_name}) diverges here")
    except KafkaError as exc:
        return _answer(asked.index, partition, exc)
    except OSError as exc:  # the quarantine copy or the cut failed: the log is as it was, or cut
        return _answer(asked.index, partition, KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"cutting the log: {exc}"))
    answer = _answer(asked.index, partition)
    if cut is not None:
        s = cut.survey
        answer.truncated_batches, answer.truncated_records = s.batches, s.records
        answer.first_truncated_offset = s.first_offset if s.first_offset is not None else -1
        answer.last_truncated_offset = s.last_offset if s.last_offset is not None else -1
        answer.quarantine_path = str(cut.destination) if cut.destination is not None else None
    with trio.move_on_after(max(0.0, deadline - trio.current_time())):
        await partition.wait_failback_followed()
    if partition.failback_pending:
        waiting = ", ".join(map(str, sorted(partition.failback_pending)))
        answer.error_code = ErrorCode.REQUEST_TIMED_OUT
        answer.error_message = (f"{partition.topic}-{partition.index}: replica(s) {waiting} did not cut their logs at "
                                f"offset {asked.truncate_offset} within {timeout_ms} ms; the mirror's copies wait "
                                f"for them (run the failback again to check)")
    elif not partition.is_leader:
        answer.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
        answer.error_message = "leadership moved while the replicas were cutting their logs: run the failback again"
    return answer


def _denied(name: str, index: int) -> PartitionResponse:
    return PartitionResponse(index=index, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                             error_message=f"LinkTruncate of topic {name} needs Alter on the topic or ClusterAction "
                                           f"on the cluster")


async def handle(ctx: RequestContext, request: LinkTruncateRequest) -> LinkTruncateResponse:
    allowed = may_link(ctx, {t.name for t in request.topics})
    deadline = trio.current_time() + max(0, request.timeout_ms) / 1000
    topics = []
    for topic_data in request.topics:
        if topic_data.name in allowed:
            answers = await _restore_topic(ctx, request, topic_data.name, topic_data.partitions, deadline)
        else:
            answers = [_denied(topic_data.name, p.index) for p in topic_data.partitions]
        topics.append(LinkTruncateResponse.LinkTruncateTopicResponse(name=topic_data.name, partitions=answers))
    return LinkTruncateResponse(topics=topics)


HANDLER = ApiHandler(ApiKey.LINK_TRUNCATE, 0, 0, handle)
