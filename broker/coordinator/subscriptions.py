"""Reading the consumer protocol's subscription metadata (the bytes members send in JoinGroup)."""

from __future__ import annotations

from broker.protocol.errors import ProtocolError
from broker.protocol.messages import ConsumerProtocolSubscription
from broker.protocol.primitives import Reader

__all__ = ["topics_of"]


def topics_of(metadata: bytes) -> set[str] | None:
    """The topics a consumer subscribes to, or None when the bytes do not parse."""
    try:
        r = Reader(metadata)
        version = r.int16()
        version = min(max(version, 0), ConsumerProtocolSubscription.MAX_VERSION)
        return set(ConsumerProtocolSubscription.decode_from(r, version).topics)
    except ProtocolError:
        return None
