"""Random ids as Apache Kafka makes them (its `Uuid.randomUuid`): a random UUID, written as
URL-safe base64 of its 16 bytes without padding.

Kafka never hands out an id whose text starts with "-": tools take ids on the command line
(`kafka-storage format -t ID`, `--topic-id`), where such a value reads as an option. One random
id in 64 would; this module draws again for those, as Kafka does.
"""

from __future__ import annotations

import base64
import uuid

__all__ = ["random_uuid", "random_uuid_text", "uuid_text"]


def uuid_text(value: uuid.UUID) -> str:
    """Kafka's Uuid.toString."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


def random_uuid() -> uuid.UUID:
    """A random id whose text does not start with "-" (version-4 UUIDs are never Kafka's
    reserved zero or metadata-topic ids)."""
    while True:
        value = uuid.uuid4()
        if not uuid_text(value).startswith("-"):
            return value


def random_uuid_text() -> str:
    """A new cluster id, as `kafka-storage random-uuid` prints one."""
    return uuid_text(random_uuid())
