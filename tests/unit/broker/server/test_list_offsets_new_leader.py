"""ListOffsets at a leader just elected whose high watermark lags the start of its epoch (every
broker restarted; the watermark starts from an old checkpoint): a client's "latest" is
OFFSET_NOT_AVAILABLE, retriable, until the followers bring the watermark up, as in Kafka. Else a
consumer resetting to "latest", or a failback looking for where two logs diverge, would take a
position below records the leader holds and will expose moments later.

The handler runs on a real Partition and Log; only the request context is a stand-in.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from broker.controller.model import PartitionInfo
from broker.protocol.constants import EARLIEST, LATEST
from broker.protocol.errors import ErrorCode
from broker.protocol.messages import ListOffsetsRequest
from broker.protocol.records import Record, build_batch
from broker.replication.partition import Partition, monotonic_ms
from broker.server.handlers.list_offsets import handle
from broker.storage import Log, LogConfig

NOW = 1_700_000_000_000


def _new_leader(tmp_path: Path) -> Partition:
    """Broker 2 held records 0..9 as a follower that never heard a high watermark, then was
    elected leader of epoch 1 with followers 1 and 3 in the ISR."""
    log = Log.open(tmp_path / "t-0", LogConfig(), recovery_point=None)
    p = Partition("t", 0, log, leader_epoch=0, is_leader=False, broker_id=2, leader_id=1, replicas=(1, 2, 3),
                  isr=(1, 2, 3))
    log.append_as_follower(build_batch([Record(None, b"v%d" % i, timestamp=NOW + i) for i in range(10)]), now_ms=NOW)
    p.make_leader(PartitionInfo(0, 2, 1, (1, 2, 3), (1, 2, 3), 1), monotonic_ms())
    return p


async def _ask(p: Partition, timestamp: int, replica_id: int = -1) -> tuple[int, int]:
    ctx = SimpleNamespace(version=7, authorize=lambda *_args, **_kw: True,
                          services=SimpleNamespace(replicas=SimpleNamespace(get=lambda _t, _i: p)))
    request = ListOffsetsRequest(replica_id=replica_id, isolation_level=0, topics=[ListOffsetsRequest.ListOffsetsTopic(
        name="t", partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=timestamp,
                                                                      current_leader_epoch=-1)])])
    answer = (await handle(ctx, request)).topics[0].partitions[0]
    return answer.error_code, answer.offset


async def test_latest_is_not_available_until_the_watermark_reaches_the_epoch_start(tmp_path: Path) -> None:
    p = _new_leader(tmp_path)
    assert (p.high_watermark, p.leader_epoch_start_offset) == (0, 10)
    assert await _ask(p, LATEST) == (ErrorCode.OFFSET_NOT_AVAILABLE, -1)
    assert await _ask(p, NOW + 20) == (ErrorCode.OFFSET_NOT_AVAILABLE, -1)  # a time past what is fetchable
    assert await _ask(p, EARLIEST) == (ErrorCode.NONE, 0)  # the log start is known whatever the watermark
    assert await _ask(p, LATEST, replica_id=-2) == (ErrorCode.NONE, 0)  # a debugging tool gets what there is

    # The followers fetch up to the log end: the watermark reaches the epoch's start.
    now = monotonic_ms()
    p.update_follower_fetch(1, 10, now)
    p.update_follower_fetch(3, 10, now)
    assert p.high_watermark == 10
    assert await _ask(p, LATEST) == (ErrorCode.NONE, 10)
    assert await _ask(p, NOW + 4) == (ErrorCode.NONE, 4)
