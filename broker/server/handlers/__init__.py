"""The handler of every API the broker serves, keyed by API key.

Each handler module declares the versions it implements next to its code; this table is the
single source for both dispatch and the ApiVersions answer.
"""

from __future__ import annotations

from broker.server.handlers import (
    acls,
    api_versions,
    client_quotas,
    cluster,
    configs,
    describe_log_dirs,
    describe_producers,
    describe_topic_partitions,
    elect_leaders,
    fetch,
    groups,
    init_producer_id,
    inter_broker,
    leader_epoch,
    link_append,
    link_leader_epoch,
    link_offset_commit,
    link_truncate,
    list_offsets,
    metadata,
    offsets,
    produce,
    reassignments,
    sasl,
    scram_credentials,
    topics,
    transactions,
    write_txn_markers,
)
from broker.server.handlers.base import ApiHandler

__all__ = ["ANSWER", "HANDLERS", "ApiHandler"]

# Every API but ApiVersions, whose answer lists them all.
_SERVED: tuple[ApiHandler, ...] = (
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
    *acls.HANDLERS,
    *inter_broker.HANDLERS,
    elect_leaders.HANDLER,
    *reassignments.HANDLERS,
    describe_log_dirs.HANDLER,
    describe_producers.HANDLER,
    *sasl.HANDLERS,
    *scram_credentials.HANDLERS,
    client_quotas.HANDLER,
    write_txn_markers.HANDLER,
    *transactions.HANDLERS,
    link_append.HANDLER,  # Causeway's own (key 10000): a Causeway target tells itself apart from Kafka by it
    link_truncate.HANDLER,  # Causeway's own (key 10001): failback at the old primary
    link_offset_commit.HANDLER,  # Causeway's own (key 10002): a mirror's group offsets, fenced by promotion
    link_leader_epoch.HANDLER,  # Causeway's own (key 10003): mirror topics' leader epochs follow the source's
)

# The ApiVersions answer, built once from the table below: what the dispatcher routes to is
# exactly what clients are told they may use.
ANSWER = api_versions.ApiVersionsAnswer(_SERVED)

HANDLERS: dict[int, ApiHandler] = {int(h.api_key): h for h in (ANSWER.handler, *_SERVED)}
