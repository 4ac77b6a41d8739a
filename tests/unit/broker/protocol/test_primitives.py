from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.protocol.errors import ProtocolError
from broker.protocol.primitives import Reader, Writer


@given(st.integers(-(2**31), 2**31 - 1))
def test_varint_round_trip(value: int) -> None:
    w = Writer()
    w.varint(value)
    assert Reader(w.getvalue()).varint() == value


@given(st.integers(-(2**63), 2**63 - 1))
def test_varlong_round_trip(value: int) -> None:
    w = Writer()
    w.varlong(value)
    assert Reader(w.getvalue()).varlong() == value


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, b"\x00"),
        (-1, b"\x01"),
        (1, b"\x02"),
        (63, b"\x7e"),
        (-64, b"\x7f"),
        (64, b"\x80\x01"),
        (300, b"\xd8\x04"),
    ],
)
def test_zigzag_varint_matches_the_protocol_guide(value: int, encoded: bytes) -> None:
    w = Writer()
    w.varint(value)
    assert bytes(w.getvalue()) == encoded


def test_compact_string_and_null() -> None:
    w = Writer()
    w.compact_nullable_string(None)
    w.compact_string("héllo")
    r = Reader(w.getvalue())
    assert r.compact_nullable_string() is None
    assert r.compact_string() == "héllo"
    assert r.remaining == 0


@pytest.mark.parametrize(
    "data",
    [
        b"\x00",  # int16 string length cut short
        b"\x00\x05ab",  # string longer than the buffer
        b"\xff\xfe",  # string length -2
        b"\x80\x80\x80\x80\x80\x01",  # varint of six bytes
        b"\x00\x02\xff\xfe",  # not UTF-8
    ],
)
def test_malformed_strings_raise_protocol_error(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        r = Reader(data)
        if data.startswith(b"\x80"):
            r.unsigned_varint()
        else:
            r.nullable_string()


def test_array_length_larger_than_the_buffer_is_refused_before_allocating() -> None:
    w = Writer()
    w.int32(2**31 - 1)
    with pytest.raises(ProtocolError):
        Reader(w.getvalue()).array_length(compact=False)


def test_bytes_view_is_zero_copy() -> None:
    w = Writer()
    w.bytes_(b"payload")
    data = bytes(w.getvalue())
    view = Reader(data).bytes_view()
    assert view.obj is data and view == b"payload"


def test_unknown_tagged_fields_are_skipped() -> None:
    w = Writer()
    w.tagged_fields([(0, b"abc"), (5, b"")])
    w.int8(7)
    r = Reader(w.getvalue())
    r.skip_tagged_fields()
    assert r.int8() == 7
