"""Request header v0-v2 and response header v0-v1.

Request header: api_key int16, api_version int16, correlation_id int32, then (v1+) client_id
as a nullable int16-length string (never compact, even in v2), then (v2) tagged fields.
Response header: correlation_id int32, then (v1) tagged fields.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from broker.protocol.api import API_SPECS
from broker.protocol.primitives import Reader, Writer
from broker.protocol.schema import Message

__all__ = [
    "RequestHeader",
    "decode_request_header",
    "encode_request_header",
    "encode_response_frame",
    "start_response",
]

_FIXED = struct.Struct(">hhi")


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None = None


def decode_request_header(frame: memoryview | bytes | bytearray) -> tuple[RequestHeader, int]:
    """The header of a request frame and the offset at which its body starts.

    The header version follows from the API key and version. For a key or version we do not
    know, the header is read as v1 (what every client sends before it knows our versions), so
    the caller can still answer with the correlation id. Raises ProtocolError when short.
    """
    r = Reader(frame)
    api_key = r.int16()
    api_version = r.int16()
    correlation_id = r.int32()
    spec = API_SPECS.get(api_key)
    header_version = 1
    if spec is not None and spec.min_version <= api_version <= spec.max_version:
        header_version = spec.request_header_version(api_version)
    client_id = r.nullable_string() if header_version >= 1 else None
    if header_version >= 2:
        r.skip_tagged_fields()
    return RequestHeader(api_key, api_version, correlation_id, client_id), r.pos


def encode_request_header(header: RequestHeader, header_version: int) -> bytes:
    """The header bytes a client sends (used by Causeway's own client and by tests)."""
    out = bytearray(_FIXED.pack(header.api_key, header.api_version, header.correlation_id))
    if header_version >= 1:
        if header.client_id is None:
            out += b"\xff\xff"
        else:
            data = header.client_id.encode()
            out += struct.pack(">h", len(data)) + data
    if header_version >= 2:
        out.append(0)
    return bytes(out)


def encode_response_frame(
    correlation_id: int, header_version: int, body: bytes | bytearray
) -> bytearray:
    """A whole response frame: size prefix, header, body."""
    header_size = 4 if header_version == 0 else 5
    out = bytearray(struct.pack(">ii", header_size + len(body), correlation_id))
    if header_version >= 1:
        out.append(0)  # no tagged fields
    out += body
    return out


def start_response(w: Writer, correlation_id: int, header_version: int) -> None:
    """Write a response frame's start into an empty `w`: a size of 0 for the caller to patch
    once the body is written, then the response header."""
    w.int32(0)  # size, patched by the caller
    w.int32(correlation_id)
    if header_version >= 1:
        w.unsigned_varint(0)  # no tagged fields


def encode_response(correlation_id: int, header_version: int, message: Message, version: int) -> bytearray:
    """A whole response frame for `message`, encoded straight into one buffer.

    Writing the body after a reserved size field saves the copy that prepending would cost;
    for a fetch response that copy would be of every record returned.
    """
    w = Writer()
    start_response(w, correlation_id, header_version)
    message.encode_into(w, version)
    buf = w.getvalue()
    struct.pack_into(">i", buf, 0, len(buf) - 4)
    return buf
