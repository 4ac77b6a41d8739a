"""LinkTruncate's check of a promoted mirror topic made a mirror topic again with its local
writes kept (a second round trip: its promotion marker below the divergence point): refused,
NOT_ENOUGH_REPLICAS, while a replica has not fetched past the marker (it would take the marker,
fetched later, for the end of the new copy); accepted once every replica has
(broker/server/handlers/link_truncate.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.messages import LinkTruncateRequest
from broker.protocol.records import read_batch_header
from broker.replication.partition import Partition
from broker.server.handlers.link_truncate import check_partition
from tests.unit.broker.storage.test_link_copy import promoted


def test_the_marker_must_be_on_every_replica_before_the_copy_begins_again(tmp_path: Path) -> None:
    log = promoted(tmp_path / "t-0", (0, 0), (0, 1))  # the marker at 6, local writes at 7 and 8
    partition = Partition("t", 0, log, leader_epoch=0, is_leader=True, broker_id=1, replicas=[1, 2, 3],
                          isr=[1, 2, 3])
    shared = read_batch_header(log.read(8, 1 << 20).data)
    asked = LinkTruncateRequest.LinkTruncatePartition(
        index=0, truncate_offset=9, shared_base_offset=shared.base_offset, shared_last_offset=shared.last_offset,
        shared_crc=shared.crc, allow_truncation=False)
    partition.followers[2].log_end_offset = 9
    partition.followers[3].log_end_offset = 6  # below its marker: not fetched yet
    with pytest.raises(KafkaError) as refused:
        check_partition(partition, asked)
    assert refused.value.code == ErrorCode.NOT_ENOUGH_REPLICAS and "replica(s) 3" in refused.value.message
    partition.followers[3].log_end_offset = 7
    check_partition(partition, asked)
