"""The handler of every API the broker serves, keyed by API key.

Each handler module declares the versions it implements next to its code; this table is the
single source for both dispatch and the ApiVersions answer.
"""

from __future__ import annotations

from broker.server.handlers import (
    api_versions,
    cluster,
    configs,
    describe_topic_partitions,
    fetch,
    groups,
    init_producer_id,
    leader_epoch,
    list_offsets,
    metadata,
    offsets,
    produce,
    topics,
)
from broker.server.handlers.base import ApiHandler

__all__ = ["HANDLERS", "ApiHandler"]

HANDLERS: dict[int, ApiHandler] = {
    int(h.api_key): h
    for h in (
        api_versions.HANDLER,
        metadata.HANDLER,
        describe_topic_partitions.HANDLER,
        produce.HANDLER,
        fetch.HANDLER,
        list_offsets.HANDLER,
        leader_epoch.HANDLER,
        init_producer_id.HANDLER,
        cluster.HANDLER,
        *topics.HANDLERS,
        *configs.HANDLERS,
        *groups.HANDLERS,
        *offsets.HANDLERS,
    )
}
