"""MM2's internal record formats, byte for byte (layouts from Apache Kafka's mirror-client)."""

from __future__ import annotations

import dataclasses
import struct

import pytest

from broker.protocol.errors import ProtocolError
from mirror.formats import Checkpoint, Heartbeat, OffsetSync, decode_position, encode_position


def test_heartbeat_layout() -> None:
    beat = Heartbeat("east", "west", 1_700_000_000_123)
    assert beat.key() == b"\x00\x04east\x00\x04west"
    assert beat.value() == struct.pack(">hq", 0, 1_700_000_000_123)
    assert Heartbeat.decode(beat.key(), beat.value()) == beat


def test_checkpoint_layout() -> None:
    cp = Checkpoint("billing", "east.orders", 7, 1000, 990, "meta")
    assert cp.key() == b"\x00\x07billing\x00\x0beast.orders" + struct.pack(">i", 7)
    assert cp.value() == struct.pack(">hqq", 0, 1000, 990) + b"\x00\x04meta"
    assert Checkpoint.decode(cp.key(), cp.value()) == cp


def test_offset_sync_has_no_version() -> None:
    sync = OffsetSync("orders", 2, 500, 480)
    assert sync.key() == b"\x00\x06orders" + struct.pack(">i", 2)
    assert sync.value() == struct.pack(">qq", 500, 480)
    assert OffsetSync.decode(sync.key(), sync.value()) == sync


def test_unknown_versions_and_short_records_are_refused() -> None:
    with pytest.raises(ProtocolError, match="version 1"):
        Heartbeat.decode(Heartbeat("a", "b", 0).key(), struct.pack(">hq", 1, 0))
    with pytest.raises(ProtocolError):
        OffsetSync.decode(b"\x00\x06orders", b"")


def test_utf8_names() -> None:
    cp = Checkpoint("grüppe", "east.tópico", 0, 1, 1)
    assert Checkpoint.decode(cp.key(), cp.value()) == cp


def test_positions_are_connect_json() -> None:
    key, value = encode_position("east", "orders", 3, 41)
    assert key == b'["MirrorSourceConnector",{"cluster":"east","partition":3,"topic":"orders"}]'
    assert value == b'{"offset":41}'
    assert decode_position(key, value) == ("east", "orders", 3, 41)
    assert decode_position(key, None) == ("east", "orders", 3, None)
    assert decode_position(b"not json", value) is None
    assert decode_position(b'["x", {"cluster": 1}]', value) is None


@pytest.mark.parametrize("format_", [Heartbeat, Checkpoint, OffsetSync])
def test_each_layout_names_every_field_in_order(format_: type[Heartbeat | Checkpoint | OffsetSync]) -> None:
    # decode() builds the record from the key's fields then the value's, by position.
    assert [name for name, _ in (*format_.KEY, *format_.VALUE)] == [f.name for f in dataclasses.fields(format_)]
