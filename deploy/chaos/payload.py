"""The records the chaos producer writes: keyed, sequence-numbered and self-checking.

Each record says who wrote it and where it belongs, and carries a digest of everything a mirror
must keep intact (key, value, headers, timestamp), so a record that arrives damaged is recognised
on its own, without its source copy:

    key        b"key-7"                               (seq mod the number of keys)
    value      b"cw1|<run>|<partition>|<seq>|<filler>|<digest>"
    headers    ("seq", b"<seq>"), ("run", b"<run>"), ("none", None)
    timestamp  the producer's clock when it made the record (CreateTime)

The filler is a deterministic function of (run, partition, seq) of varying length, so records
differ in size; the digest is BLAKE2b-64 over the length-prefixed key, the value up to its last
`|`, every header and the timestamp. Pure: no IO.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from broker.protocol.records import Record

__all__ = ["MAGIC", "Payload", "make_record", "read_payload"]

MAGIC = b"cw1"
_SEP = b"|"
_FILLER_ALPHABET = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


@dataclass(frozen=True, slots=True)
class Payload:
    """What a record says about itself; `intact` is whether its digest matches its bytes."""

    run: str
    partition: int
    seq: int
    intact: bool


def _filler(run: str, partition: int, seq: int, min_size: int, max_size: int) -> bytes:
    seed = hashlib.blake2b(f"{run}/{partition}/{seq}".encode(), digest_size=32).digest()
    size = min_size + int.from_bytes(seed[:4], "big") % (max_size - min_size + 1)
    out = bytearray()
    block = seed
    while len(out) < size:
        out += bytes(_FILLER_ALPHABET[b % len(_FILLER_ALPHABET)] for b in block)
        block = hashlib.blake2b(block, digest_size=32).digest()
    return bytes(out[:size])


def _digest(key: bytes | None, body: bytes, headers: Sequence[tuple[str, bytes | None]], timestamp: int) -> bytes:
    h = hashlib.blake2b(digest_size=8)

    def field(data: bytes | None) -> None:
        if data is None:
            h.update(struct.pack(">i", -1))
        else:
            h.update(struct.pack(">i", len(data)))
            h.update(data)

    field(key)
    field(body)
    h.update(struct.pack(">i", len(headers)))
    for name, value in headers:
        field(name.encode())
        field(value)
    h.update(struct.pack(">q", timestamp))
    return h.hexdigest().encode()


def make_record(run: str, partition: int, seq: int, *, timestamp_ms: int, keys: int = 16,
                min_size: int = 40, max_size: int = 400) -> Record:
    """The record number `seq` of partition `partition` in run `run` (`run` must not hold `|`).

    Raises ValueError for a bad run name or sizes.
    """
    if not run or "|" in run or not run.isascii():
        raise ValueError(f"run name {run!r}: non-empty ASCII without '|'")
    if not 0 < min_size <= max_size:
        raise ValueError(f"filler sizes {min_size}..{max_size}")
    key = b"key-%d" % (seq % keys)
    headers: tuple[tuple[str, bytes | None], ...] = (("seq", b"%d" % seq), ("run", run.encode()), ("none", None))
    timestamp = timestamp_ms
    body = _SEP.join((MAGIC, run.encode(), b"%d" % partition, b"%d" % seq,
                      _filler(run, partition, seq, min_size, max_size)))
    value = body + _SEP + _digest(key, body, headers, timestamp)
    return Record(key, value, headers, timestamp)


def read_payload(key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes | None]],
                 timestamp: int) -> Payload | None:
    """Who wrote the record and where it belongs, and whether it is intact; None when the value
    is not one of ours at all (or too damaged to name its run, partition and sequence)."""
    if value is None:
        return None
    body, sep, digest = value.rpartition(_SEP)
    parts = body.split(_SEP)
    if not sep or len(parts) != 5 or parts[0] != MAGIC:
        return None
    try:
        run = parts[1].decode("ascii")
        partition = int(parts[2])
        seq = int(parts[3])
    except (UnicodeDecodeError, ValueError):
        return None
    if partition < 0 or seq < 0:
        return None
    intact = digest == _digest(key, body, headers, timestamp)
    return Payload(run, partition, seq, intact)
