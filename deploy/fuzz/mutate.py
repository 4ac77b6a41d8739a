"""Mutations: from a seed request to the bytes of a hostile frame, deterministically by seed.

Most of the weight goes to structure-aware mutations, because that is where a parser's bugs
live: the int16 or int32 in front of a string, array or bytes set to -1, -2, 2**31-1 or one off
its true value; compact (varint) lengths replaced by null, overlong or 5-byte maxima; integers
set to their boundaries; tagged-field sections stuffed with huge counts, duplicate and unknown
tags; record batches with their header fields changed and (usually) their CRC fixed again so the
checks behind the CRC get to see them. The header (API key, version, client id and its length)
and the frame's size prefix lie too. Blind byte flips, truncation and extension fill the rest.

Each mutation knows whether it usually ends the connection (the broker closes it on a frame it
cannot parse, as Kafka does): a connection's plan sends its benign frames first, so the ones
behind a fatal frame are not wasted.
"""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass

import crc32c

from broker.protocol.api import API_SPECS, ApiKey
from broker.protocol.errors import ProtocolError
from broker.protocol.messages import ProduceRequest
from broker.server.handlers import HANDLERS
from deploy.fuzz.corpus import Seed
from deploy.fuzz.trace import Field, Kind

__all__ = ["Frame", "MAX_FRAME", "Mutator"]

MAX_FRAME = 104_857_600  # Kafka's default socket.request.max.bytes

_INT_LIMITS = {1: (-(2**7), 2**7 - 1), 2: (-(2**15), 2**15 - 1), 4: (-(2**31), 2**31 - 1), 8: (-(2**63), 2**63 - 1)}
_INT_FMT = {1: ">b", 2: ">h", 4: ">i", 8: ">q"}
# Keys the broker does not serve (computed, so that an API it starts serving leaves the list).
_UNSERVED_KEYS = tuple(k for k in (4, 5, 6, 7, 17, 24, 27, 36, 57, 67, 80, 81, 999, 32767, -1, -32768)
                       if k not in API_SPECS)


@dataclass(frozen=True, slots=True)
class Frame:
    data: bytes  # as sent: size prefix, header, body
    correlation_id: int | None  # as it stands in `data`; None when too short to carry one
    api_key: int | None  # from the header bytes, for checking the reply
    api_version: int | None
    label: str  # the seed and the mutations applied, for reports
    silent: bool = False  # the seed expects no reply (acks=0)
    fatal: bool = False  # the broker will most likely close the connection on it
    lie: bool = False  # the size prefix claims more bytes than follow: nothing after it is read
    desync: bool = False  # the size prefix claims fewer bytes: what follows is misparsed


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _acks_zero(body: bytes, version: int) -> bool:
    """Whether a produce body asks for no answer (acks=0), as the broker will read it."""
    try:
        return int(ProduceRequest.decode(body, version).acks) == 0
    except (ProtocolError, ValueError):
        return False


class Mutator:
    """Makes frames from seeds. Pure: the bytes depend only on the Random passed in."""

    def __init__(self, corpus: dict[int, list[Seed]]) -> None:
        self._corpus = corpus
        # Served APIs get most of the traffic; CreateTopics and CreatePartitions a large share.
        # Requests that change metadata when they succeed (creating, deleting, altering configs)
        # are each a metadata write the broker makes durable one at a time: too many, and the
        # run measures fsync rather than parsing.
        weights = {0: 14, 1: 8, 3: 6, 19: 6, 37: 5, 2: 3, 18: 3, 20: 2, 32: 3, 33: 1.5, 44: 1.5}
        self._keys = sorted(corpus)
        self._weights = [weights.get(k, 2 if k in HANDLERS else 0.15) for k in self._keys]
        self._served = [k for k in self._keys if k in HANDLERS]
        self._served_weights = [weights.get(k, 2) for k in self._served]

    # -- public -----------------------------------------------------------------------------

    def pick_seed(self, rng: random.Random, *, served_only: bool = False) -> Seed:
        """A seed; of an API the broker serves when `served_only` (it closes on any other)."""
        if served_only:
            key = rng.choices(self._served, self._served_weights)[0]
        else:
            key = rng.choices(self._keys, self._weights)[0]
        return rng.choice(self._corpus[key])

    def benign(self, rng: random.Random, correlation_id: int) -> Frame:
        """A frame the broker should answer: the seed as is, or with values changed inside a
        structure that still parses (integers, batch contents, unknown tagged fields)."""
        seed = self.pick_seed(rng, served_only=True)
        body = bytearray(seed.body)
        names: list[str] = []
        if rng.random() < 0.8:
            ops = sorted(self._benign_choice(rng, seed) for _ in range(rng.randint(1, 2)))
            if ops.count("unknown_tag") > 1:
                ops.remove("unknown_tag")  # a second splice would land on bytes the first moved
            for op in ops:  # "unknown_tag" sorts last: it is the one that moves bytes
                names.append(self._benign_op(rng, op, seed, body))
        return self._frame(rng, seed, bytes(body), correlation_id, names, fatal=False)

    def fatal(self, rng: random.Random, correlation_id: int, *, last: bool) -> Frame:
        """A frame that most likely breaks parsing: lengths, header, size prefix, raw bytes.
        Only the last frame of a connection may lie about its size (nothing after it is read)."""
        seed = self.pick_seed(rng)
        body = bytearray(seed.body)
        names: list[str] = []
        roll = rng.random()
        header_op = size_op = None
        if roll < 0.14:
            header_op = rng.choice(("api_key", "api_version", "client_id_length", "client_id_bytes",
                                    "header_tags", "short_header"))
        elif roll < 0.22:
            size_op = rng.choice(("size_short", "size_zero", "size_negative", "size_over_max")
                                 + (("size_long", "size_max") if last else ()))
        for _ in range(1 if header_op or size_op else rng.choices((1, 2, 3), (6, 3, 1))[0]):
            if header_op or size_op:
                if rng.random() < 0.5:
                    break  # header or size lie on an intact body, half the time
            names.append(self._fatal_op(rng, seed, body))
        return self._frame(rng, seed, bytes(body), correlation_id, names, fatal=True,
                           header_op=header_op, size_op=size_op)

    # -- body mutations ---------------------------------------------------------------------

    @staticmethod
    def _benign_choice(rng: random.Random, seed: Seed) -> str:
        has = {f.kind for f in seed.fields}
        choices = ["int"] * 6 + ["batch"] * (5 if Kind.BATCH in has else 0) + ["unknown_tag"] * (Kind.TAGS in has)
        return rng.choice(choices)

    def _benign_op(self, rng: random.Random, op: str, seed: Seed, body: bytearray) -> str:
        batches = [f for f in seed.fields if f.kind is Kind.BATCH]
        ints = [f for f in seed.fields if f.kind is Kind.INT]
        tags = [f for f in seed.fields if f.kind is Kind.TAGS and f.value == 0]
        if op == "int" and ints:
            f = rng.choice(ints)
            value = self._int_value(rng, f)
            struct.pack_into(_INT_FMT[f.width], body, f.offset, value)
            return f"int@{f.offset}={value}"
        if op == "batch" and batches:
            return self._batch_op(rng, rng.choice(batches), body)
        if op == "unknown_tag" and tags:
            # A well-formed unknown tagged field must be skipped, as Kafka does. Splicing grows
            # the body, so this is the only op of the frame that may move bytes: do it last.
            f = rng.choice(tags)
            payload = rng.randbytes(rng.randint(0, 8))
            tag = _varint(rng.randint(100, 2**20))
            body[f.offset : f.offset + 1] = _varint(1) + tag + _varint(len(payload)) + payload
            return f"unknown_tag@{f.offset}"
        return "none"

    def _fatal_op(self, rng: random.Random, seed: Seed, body: bytearray) -> str:
        # Earlier ops of this frame may have moved or cut bytes: only fields still inside count.
        lengths = [f for f in seed.fields
                   if f.kind in (Kind.LENGTH, Kind.COMPACT_LENGTH) and f.offset + max(f.width, 1) <= len(body)]
        tags = [f for f in seed.fields if f.kind is Kind.TAGS and f.offset < len(body)]
        op = rng.choices(("length", "tags", "flip", "truncate", "extend", "splice"), (10, 2, 3, 3, 1.5, 1.5))[0]
        if op == "length" and lengths:
            return self._length_op(rng, rng.choice(lengths), body)
        if op == "tags" and tags:
            f = rng.choice(tags)
            variants = (
                _varint(2**31),  # a count with nothing behind it
                _varint(1) + _varint(0) + _varint(2**31 - 1),  # one field claiming 2 GiB
                _varint(2) + _varint(5) + _varint(1) + b"x" + _varint(5) + _varint(1) + b"y",  # duplicate tag
                _varint(1) + _varint(2**32 - 1) + _varint(0),  # the largest tag
                b"\xff\xff\xff\xff\xff\x7f",  # a varint longer than five bytes
            )
            body[f.offset : f.offset + max(f.width, 1)] = rng.choice(variants)
            return f"tags@{f.offset}"
        if op == "truncate" and body:
            cut = rng.choice([f.offset for f in seed.fields if f.offset < len(body)] or [0])
            cut = cut if rng.random() < 0.5 else rng.randrange(len(body))
            del body[cut:]
            return f"truncate@{cut}"
        if op == "extend":
            extra = rng.randbytes(rng.randint(1, 64)) if rng.random() < 0.5 or not body else \
                bytes(body[rng.randrange(len(body)):])[:4096]
            body += extra
            return f"extend+{len(extra)}"
        if op == "splice" and body:
            at = rng.randrange(len(body))
            if rng.random() < 0.5:
                n = rng.randint(1, min(16, len(body) - at))
                del body[at : at + n]
                return f"delete@{at}+{n}"
            junk = rng.randbytes(rng.randint(1, 16))
            body[at:at] = junk
            return f"insert@{at}+{len(junk)}"
        if not body:
            body += rng.randbytes(rng.randint(1, 8))
            return "garbage"
        positions = []
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(body))
            body[at] = body[at] ^ (1 << rng.randrange(8)) if rng.random() < 0.5 else rng.randrange(256)
            positions.append(at)
        return f"flip@{','.join(map(str, positions))}"

    def _length_op(self, rng: random.Random, f: Field, body: bytearray) -> str:
        true = f.value
        if f.kind is Kind.LENGTH:
            lo, hi = _INT_LIMITS[f.width]
            value = rng.choice((-1, -2, lo, hi, hi - 1, true + 1, true - 1, true + 2, 0, len(body),
                                rng.randint(lo, hi), 2**30 if f.width == 4 else 2**14))
            value = max(lo, min(hi, value))
            struct.pack_into(_INT_FMT[f.width], body, f.offset, value)
            return f"length@{f.offset}:{true}->{value}"
        # Compact: the varint holds length + 1 (0 is null). Its width may change: splice it.
        options = (
            _varint(0),  # null
            _varint(1),  # empty
            _varint(true + 2),  # one too many
            _varint(max(true, 0)),  # one too few
            _varint(2**32 - 1),  # the largest five-byte value
            _varint(2**31),
            _varint(len(body) + 1),
            b"\xff\xff\xff\xff\xff\x01",  # longer than five bytes
            b"\x80\x80\x80\x80\x80",  # runs off (continuation bit on the last byte)
            bytes([(true + 1) & 0x7F | 0x80, 0x00]) if true + 1 < 0x80 else _varint(true + 1),  # non-minimal
        )
        new = rng.choice(options)
        body[f.offset : f.offset + f.width] = new
        return f"compact_length@{f.offset}:{true}->{new.hex()}"

    def _int_value(self, rng: random.Random, f: Field) -> int:
        lo, hi = _INT_LIMITS[f.width]
        candidates = [0, -1, 1, lo, hi, f.value + 1, f.value - 1, rng.randint(lo, hi)]
        if f.width >= 4:
            # Large values stay far above what a broker grants (max.partitions.per.request is
            # 5,000): a count of 5,001 added to a topic of 3 is legal, and creating thousands of
            # partitions time and again would measure the disk, not the parser.
            candidates += [2**31 - 1, 1_000_000, 100_000, -(2**31), 60_000]
        return max(lo, min(hi, rng.choice(candidates)))

    def _batch_op(self, rng: random.Random, f: Field, body: bytearray) -> str:
        pos, size = f.offset, f.width
        # (name, offset in the batch, struct format, values to choose from)
        fields = (
            ("base_offset", 0, ">q", (0, -1, 2**63 - 1, 12345)),
            ("batch_length", 8, ">i", (0, -1, 48, 49, size - 13, size - 11, 2**31 - 1, size * 4)),
            ("leader_epoch", 12, ">i", (-1, 0, 2**31 - 1)),
            ("magic", 16, ">b", (0, 1, 3, -1)),
            ("attributes", 21, ">h", (1, 2, 3, 4, 5, 6, 7, 0x10, 0x20, 0x30, 0x08, -1, 0x7FFF)),
            ("last_offset_delta", 23, ">i", (-1, 0, 1, 4, 5, 2**31 - 1)),
            ("base_timestamp", 27, ">q", (-1, 0, 2**62, -(2**63))),
            ("max_timestamp", 35, ">q", (-1, 0, 2**62)),
            ("producer_id", 43, ">q", (-1, 0, 4242, 2**63 - 1)),
            ("producer_epoch", 51, ">h", (-1, 0, 32767)),
            ("base_sequence", 53, ">i", (-1, 0, 2**31 - 1, 7)),
            ("records_count", 57, ">i", (-1, 0, 1, 4, 6, 2**31 - 1, 100_000)),
        )
        if rng.random() < 0.25 and size > 61:
            at = pos + 61 + rng.randrange(size - 61)  # inside the records (or compressed payload)
            body[at] = rng.randrange(256)
            name = f"batch_records@{at - pos}"
        else:
            name, offset, fmt, values = rng.choice(fields)
            struct.pack_into(fmt, body, pos + offset, rng.choice(values))
        if rng.random() < 0.7 and pos + size <= len(body):
            struct.pack_into(">I", body, pos + 17, crc32c.crc32c(memoryview(body)[pos + 21 : pos + size]))
            return f"batch_{name}+crc"
        return f"batch_{name}"

    # -- header and frame -------------------------------------------------------------------

    def _frame(self, rng: random.Random, seed: Seed, body: bytes, correlation_id: int, names: list[str], *,
               fatal: bool, header_op: str | None = None, size_op: str | None = None) -> Frame:
        api_key, version, header_version = seed.api_key, seed.version, seed.header_version
        client_id: bytes | None = b"causeway-fuzz"
        default_id_length = len(b"causeway-fuzz")
        client_len: int | None = None
        header_tags = b"\x00"
        if header_op == "api_key":
            api_key = rng.choice((*_UNSERVED_KEYS, rng.choice(self._served)))
        elif header_op == "api_version":
            spec = API_SPECS.get(api_key)
            top = spec.max_version if spec else 10
            version = rng.choice((-1, top + 1, 32767, -32768, rng.randint(0, top)))
        elif header_op == "client_id_length":
            client_len = rng.choice((-2, -32768, 32767, default_id_length + 1, default_id_length - 1,
                                     default_id_length + len(body) + 1))
        elif header_op == "client_id_bytes":
            client_id = rng.choice((b"\xff\xfe\xc3\x28", b"a" * rng.randint(1000, 32767), b"", None, b"\x00" * 8))
        elif header_op == "header_tags" and header_version >= 2:
            header_tags = rng.choice((_varint(2**31), _varint(1) + _varint(0) + _varint(2**31 - 1),
                                      b"\xff\xff\xff\xff\xff\x7f", _varint(1) + _varint(3) + _varint(0)))
        if client_len is None:
            client_len = -1 if client_id is None else len(client_id)
        header = struct.pack(">hhi", api_key, version, correlation_id)
        if header_version >= 1:
            header += struct.pack(">h", client_len) + (client_id or b"")
        if header_version >= 2:
            header += header_tags
        payload = header + body
        if header_op == "short_header":
            payload = payload[: rng.randint(0, 7)]
        size = len(payload)
        lie = desync = False
        if size_op == "size_short" and size:
            size -= rng.randint(1, min(size, 16))
            desync = True
        elif size_op == "size_zero":
            size, desync = 0, bool(payload)
        elif size_op == "size_negative":
            size = rng.choice((-1, -(2**31), -size))
        elif size_op == "size_over_max":
            size = rng.choice((MAX_FRAME + 1, 2**31 - 1))
        elif size_op == "size_long":
            size += rng.choice((1, 2, 64, 4096))
            lie = True
        elif size_op == "size_max":
            size, lie = MAX_FRAME, True
        if header_op:
            names.append(header_op)
        if size_op:
            names.append(size_op)
        data = struct.pack(">i", size) + payload
        corr = int.from_bytes(payload[4:8], "big", signed=True) if len(payload) >= 8 else None
        key = int.from_bytes(payload[0:2], "big", signed=True) if len(payload) >= 2 else None
        ver = int.from_bytes(payload[2:4], "big", signed=True) if len(payload) >= 4 else None
        label = f"{seed.label}: {', '.join(names) or 'unmutated'}"
        silent = seed.silent
        if api_key == ApiKey.PRODUCE and names and not fatal:
            silent = _acks_zero(body, version)  # a mutated acks field may have made it 0, or not 0
        return Frame(data, corr, key, ver, label, silent, fatal, lie, desync)
