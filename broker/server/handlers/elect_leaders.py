"""ElectLeaders (API 43, KIP-183/KIP-460): preferred or unclean leader election on request.

As Kafka's ZooKeeper-mode broker: the controller elects (broker/controller/zk/leader_election.py),
then the answer waits, at most the request's ``timeout_ms``, until this broker's metadata shows
the new leaders (REQUEST_TIMED_OUT for those it does not). A broker that is not the controller
answers NOT_CONTROLLER for each partition (the admin client sends to the controller). A request
for all partitions (null) is answered only with the partitions that were elected or failed, not
those that needed no election, as Kafka filters them. A standalone broker leads every partition
with its only replica: ELECTION_NOT_NEEDED.

With an authorizer it needs Alter on the cluster, as Kafka: else CLUSTER_AUTHORIZATION_FAILED for
the request (v1+) and each partition asked for, and nothing is elected.
"""

from __future__ import annotations

from collections.abc import Sequence

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.messages import ElectLeadersRequest, ElectLeadersResponse
from broker.server.context import RequestContext
from broker.server.handlers.base import ApiHandler
from security.acl import Operation

__all__ = ["HANDLER"]

PREFERRED, UNCLEAN = 0, 1
# A peer's timeout_ms is its own business up to this bound: no request waits longer.
MAX_WAIT_S = 120.0

Results = dict[tuple[str, int], tuple[ErrorCode, str | None]]


def _known(ctx: RequestContext) -> list[tuple[str, int]]:
    return [(name, p.partition) for name, topic in ctx.services.controller.topics().items() for p in topic.partitions]


def _answer(results: Results, *, everything: bool, code: ErrorCode = ErrorCode.NONE) -> ElectLeadersResponse:
    by_topic: dict[str, list[ElectLeadersResponse.PartitionResult]] = {}
    for (topic, p), (error, message) in sorted(results.items()):
        if everything and error == ErrorCode.ELECTION_NOT_NEEDED:
            continue
        by_topic.setdefault(topic, []).append(ElectLeadersResponse.PartitionResult(
            partition_id=p, error_code=int(error), error_message=message))
    return ElectLeadersResponse(error_code=int(code), replica_election_results=[
        ElectLeadersResponse.ReplicaElectionResult(topic=t, partition_result=rs) for t, rs in by_topic.items()])


async def handle(ctx: RequestContext, request: ElectLeadersRequest) -> ElectLeadersResponse:
    election_type = request.election_type if ctx.version >= 1 else PREFERRED
    everything = request.topic_partitions is None
    asked: Sequence[tuple[str, int]] | None = None if everything else list(dict.fromkeys(
        (t.topic, p) for t in request.topic_partitions or () for p in t.partitions))
    if not ctx.authorize_cluster(Operation.ALTER):
        denied = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return _answer({tp: (denied, None) for tp in asked or ()}, everything=False, code=denied)
    if election_type not in (PREFERRED, UNCLEAN):
        return _answer({}, everything=everything, code=ErrorCode.INVALID_REQUEST)

    zk = ctx.services.controller.zookeeper()
    if zk is None:
        known = set(_known(ctx))
        return _answer({tp: (ErrorCode.ELECTION_NOT_NEEDED if tp in known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             None) for tp in (asked if asked is not None else known)}, everything=everything)
    active = zk.active_controller()
    if active is None:
        return _answer({tp: (ErrorCode.NOT_CONTROLLER, None) for tp in (asked if asked is not None else _known(ctx))},
                       everything=everything)
    try:
        elected = await active.elect_leaders(asked, unclean=election_type == UNCLEAN)
    except KafkaError as exc:  # the term ended meanwhile
        return _answer({tp: (exc.code, None) for tp in (asked if asked is not None else _known(ctx))},
                       everything=everything)
    results: Results = {tp: (code, message) for tp, (code, message, _) in elected.items()}
    expected = {tp: leader for tp, (code, _, leader) in elected.items() if code == ErrorCode.NONE}
    if expected:
        late = await zk.wait_for_leaders(expected, min(max(request.timeout_ms, 0) / 1000, MAX_WAIT_S))
        for tp in late:
            results[tp] = (ErrorCode.REQUEST_TIMED_OUT, "The election was made but this broker did not see the new "
                                                        f"leader {expected[tp]} within the request's timeout")
    return _answer(results, everything=everything)


HANDLER = ApiHandler(ApiKey.ELECT_LEADERS, 0, 2, handle)
