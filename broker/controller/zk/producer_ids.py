"""Producer id blocks from ZooKeeper, as Kafka's ZkProducerIdManager hands them out.

    ids = await allocate_producer_id_block(zk, broker_id)   # range(start, start + 1000)

``/latest_producer_id_block`` holds the last block given to any broker,
{"version":1,"broker":B,"block_start":"S","block_end":"E"}. A broker takes the next block with a
conditional write on that znode's version: two brokers that read the same block race, one write
wins, the other reads again and takes the block after. Blocks therefore never overlap, however
many brokers allocate at once. The loop is bounded (each round some broker wins, so a broker
loses at most as many rounds as there are brokers allocating at that moment).
"""

from __future__ import annotations

import logging

import trio

from broker.controller.zk import znodes
from broker.controller.zk.client import ZkBadVersion, ZkClient, ZkError, ZkNodeExists, ZkNoNode, ZkUnavailable
from broker.retry import Backoff

__all__ = ["BLOCK_SIZE", "ProducerIdsExhausted", "allocate_producer_id_block"]

log = logging.getLogger(__name__)

BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE
MAX_ATTEMPTS = 50
# A short random pause after a lost race, so that brokers that lost together do not collide again.
_CONTENTION = Backoff(initial_s=0.005, max_s=0.2, jitter=0.5)
_INT64_MAX = 2**63 - 1


class ProducerIdsExhausted(ZkError):
    """The next block would pass the largest 64-bit producer id."""


async def allocate_producer_id_block(zk: ZkClient, broker_id: int, size: int = BLOCK_SIZE) -> range:
    """The next block of `size` producer ids, now recorded as `broker_id`'s in ZooKeeper."""
    if size < 1:
        raise ValueError(f"producer id block size {size} must be positive")
    path = znodes.PRODUCER_ID_BLOCK
    for attempt in range(1, MAX_ATTEMPTS + 1):
        version: int | None
        try:
            data, stat = await zk.get(path)
            version = stat.version
        except ZkNoNode:
            data, version = b"", None
        # The znode Kafka creates at start has no data: the first block starts at 0.
        start = znodes.parse_producer_id_block(path, data).last + 1 if data else 0
        if start > _INT64_MAX - size:
            raise ProducerIdsExhausted(f"producer ids are exhausted: a block of {size} after {start - 1} would "
                                       "pass the 64-bit limit", path)
        block = znodes.encode_producer_id_block(broker_id, start, start + size - 1)
        try:
            if version is None:
                await zk.create(path, block, make_parents=True)
            else:
                await zk.set(path, block, version=version)
        except (ZkBadVersion, ZkNodeExists, ZkNoNode):
            await trio.sleep(_CONTENTION.delay(attempt))  # another broker took this block: take the next
            continue
        except ZkUnavailable:
            # The write may have been applied before the connection dropped: it is ours if the
            # znode now holds exactly what we wrote (no other broker writes our broker id and start).
            try:
                current, _ = await zk.get(path)
            except ZkNoNode:
                continue
            if current != block:
                continue
        log.info("broker %d got producer id block %d-%d", broker_id, start, start + size - 1)
        return range(start, start + size)
    raise ZkError(f"no producer id block after {MAX_ATTEMPTS} attempts: other brokers kept writing {path} first",
                  path)
