"""What every generated message class has: its field table and its wire codec.

broker/protocol/messages.py is generated (tools/gen_protocol.py); code that handles any message
(the API table, dispatch, the client connection) names `Message` instead of `Any`, and tests
and the fuzzer read a class's fields from `FIELDS` without the schemas at hand.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, NamedTuple, Protocol

if TYPE_CHECKING:
    from typing import Self

    from broker.protocol.primitives import Reader, Writer

__all__ = ["FieldSpec", "Message", "Struct"]


class FieldSpec(NamedTuple):
    """One field of a generated class, narrowed to the versions the message has.

    An empty range (min > max, e.g. 1..0) means "never": a field that is never nullable has
    nullable_min_version 1 and nullable_max_version 0.
    """

    name: str  # the Python attribute (snake_case of Kafka's field name)
    type: str  # Kafka's schema type: int32, string, records, []int32, []SomeStruct, ...
    min_version: int  # first version that carries the field
    max_version: int  # last version that carries the field
    nullable_min_version: int  # first version in which the field may be null
    nullable_max_version: int  # last version in which the field may be null


class Struct(Protocol):
    """A generated class that encodes inside a message (a message itself, or a nested struct)."""

    FIELDS: ClassVar[tuple[FieldSpec, ...]]

    def encode_into(self, w: Writer, version: int) -> None: ...

    @classmethod
    def decode_from(cls, r: Reader, version: int) -> Self: ...


class Message(Struct, Protocol):
    """A generated request, response or data message of broker.protocol.messages."""

    API_KEY: ClassVar[int]  # -1 for a data schema
    MIN_VERSION: ClassVar[int]
    MAX_VERSION: ClassVar[int]
    FLEXIBLE_VERSION: ClassVar[int | None]  # first version with tagged fields; None if none

    def encode(self, version: int) -> bytearray: ...

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview, version: int) -> Self: ...
