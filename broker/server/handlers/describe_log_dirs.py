"""DescribeLogDirs (API 35): this broker's log directories and the replicas each holds.

``kafka-reassign-partitions`` asks every broker for it before it moves anything (to print the
current assignment with each replica's log dir), and ``kafka-log-dirs`` prints it. As Kafka's
broker: one result per configured ``log.dirs`` entry, each with the hosted replicas asked for
(all of them when ``topics`` is null), their size in bytes and offset lag (how far the high
watermark is past the log end: 0 on a leader; a future replica's lag has no meaning here, as
replicas never move between directories), and from version 4 the directory's total and usable
bytes. A log dir that is offline (it failed a write, broker/replication/dir_health.py) is answered
as Kafka's ReplicaManager.describeLogDirs answers it: KAFKA_STORAGE_ERROR, no replicas, no sizes
(``kafka-log-dirs --describe`` prints the error KafkaStorageException for it), until it is back
online. With an authorizer it needs Describe on the cluster, as Kafka: else CLUSTER_AUTHORIZATION_FAILED
(v3+; an empty answer before) and no directory.
"""

from __future__ import annotations

import os
from pathlib import Path

import trio

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages import DescribeLogDirsRequest, DescribeLogDirsResponse
from broker.server.context import RequestContext
from broker.server.handlers.base import ApiHandler
from security.acl import Operation

__all__ = ["HANDLER"]


def _space(directory: Path) -> tuple[int, int]:
    try:
        stat = os.statvfs(directory)
    except OSError:
        return -1, -1
    return stat.f_blocks * stat.f_frsize, stat.f_bavail * stat.f_frsize


async def handle(ctx: RequestContext, request: DescribeLogDirsRequest) -> DescribeLogDirsResponse:
    if not ctx.authorize_cluster(Operation.DESCRIBE):
        return DescribeLogDirsResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, results=[])
    wanted = None if request.topics is None else {(t.topic, p) for t in request.topics for p in t.partitions}
    dirs = [Path(d) for d in ctx.config.log_dirs]
    by_dir: dict[Path, dict[str, list[DescribeLogDirsResponse.DescribeLogDirsPartition]]] = {d: {} for d in dirs}
    for partition in sorted(ctx.services.replicas.partitions(), key=lambda x: (x.topic, x.index)):
        if wanted is not None and (partition.topic, partition.index) not in wanted:
            continue
        root = partition.log.directory.parent
        lag = max(partition.high_watermark - partition.log.log_end_offset, 0)
        by_dir.setdefault(root, {}).setdefault(partition.topic, []).append(
            DescribeLogDirsResponse.DescribeLogDirsPartition(
                partition_index=partition.index, partition_size=partition.log.size_bytes, offset_lag=lag))
    health = ctx.services.replicas.health
    results = []
    for directory, topics in by_dir.items():
        if health.is_offline(directory):
            results.append(DescribeLogDirsResponse.DescribeLogDirsResult(
                error_code=ErrorCode.KAFKA_STORAGE_ERROR, log_dir=str(directory), total_bytes=-1, usable_bytes=-1,
                topics=[]))
            continue
        total, usable = await trio.to_thread.run_sync(_space, directory) if ctx.version >= 4 else (-1, -1)
        results.append(DescribeLogDirsResponse.DescribeLogDirsResult(
            error_code=ErrorCode.NONE, log_dir=str(directory), total_bytes=total, usable_bytes=usable,
            topics=[DescribeLogDirsResponse.DescribeLogDirsTopic(name=name, partitions=ps)
                    for name, ps in topics.items()]))
    return DescribeLogDirsResponse(error_code=0, results=results)


HANDLER = ApiHandler(ApiKey.DESCRIBE_LOG_DIRS, 1, 4, handle)
