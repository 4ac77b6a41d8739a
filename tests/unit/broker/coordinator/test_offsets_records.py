from __future__ import annotations

from broker.coordinator.offsets_records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_group_metadata,
    decode_key,
    decode_offset_commit,
    java_string_hash,
    partition_for,
)


def test_java_string_hash_matches_java() -> None:
    # Values of String.hashCode() in Java.
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("abc") == 96354
    assert java_string_hash("héllo wörld ☃") == 1283058812  # UTF-16 code units, not UTF-8 bytes
    assert java_string_hash("Hello World") == -862545276  # negative: Kafka takes the absolute value
    assert partition_for("Hello World", 50) == (862545276 % 50)


def test_offset_commit_key_bytes_are_kafkas() -> None:
    key = OffsetCommitKey("g", "t", 5).encode()
    assert key == b"\x00\x01" + b"\x00\x01g" + b"\x00\x01t" + b"\x00\x00\x00\x05"
    assert decode_key(key) == OffsetCommitKey("g", "t", 5)
    assert decode_key(GroupMetadataKey("g").encode()) == GroupMetadataKey("g")


def test_offset_commit_value_versions() -> None:
    v3 = OffsetCommitValue(10, "m", 1234, leader_epoch=2)
    assert v3.encode()[:2] == b"\x00\x03"
    assert decode_offset_commit(v3.encode()) == v3
    v1 = OffsetCommitValue(10, "m", 1234, expire_timestamp=9999)
    assert v1.encode()[:2] == b"\x00\x01"
    assert decode_offset_commit(v1.encode()) == v1


def test_group_metadata_round_trip() -> None:
    value = GroupMetadataValue("consumer", 3, "range", "m1", 77, (
        MemberMetadata("m1", None, "c", "h", 300000, 45000, b"sub", b"asg"),
        MemberMetadata("m2", "pod", "c", "h", 300000, 45000, b"", b""),
    ))
    assert decode_group_metadata(value.encode()) == value


def test_offset_commit_value_v3_bytes_are_kafkas() -> None:
    # OffsetCommitValue v3: offset INT64, leaderEpoch INT32, metadata STRING, commitTimestamp INT64.
    expected = (b"\x00\x03" + (42).to_bytes(8, "big") + (7).to_bytes(4, "big") + b"\x00\x02hi"
                + (1_700_000_000_000).to_bytes(8, "big"))
    assert OffsetCommitValue(42, "hi", 1_700_000_000_000, leader_epoch=7).encode() == expected


def test_group_metadata_v3_bytes_are_kafkas() -> None:
    member = MemberMetadata("m", "i", "c", "h", 300, 100, b"S", b"A")
    value = GroupMetadataValue("consumer", 5, "range", "m", 9, (member,))
    expected = (
        b"\x00\x03" + b"\x00\x08consumer" + (5).to_bytes(4, "big") + b"\x00\x05range" + b"\x00\x01m"
        + (9).to_bytes(8, "big") + (1).to_bytes(4, "big")
        + b"\x00\x01m" + b"\x00\x01i" + b"\x00\x01c" + b"\x00\x01h" + (300).to_bytes(4, "big")
        + (100).to_bytes(4, "big") + b"\x00\x00\x00\x01S" + b"\x00\x00\x00\x01A"
    )
    assert value.encode() == expected
    assert GroupMetadataKey("g").encode() == b"\x00\x02\x00\x01g"


def test_older_and_flexible_group_metadata_versions_decode() -> None:
    # v0: no state timestamp, no instance id, no rebalance timeout; a null protocol and leader.
    v0 = (b"\x00\x00" + b"\x00\x08consumer" + (1).to_bytes(4, "big") + b"\xff\xff" + b"\xff\xff"
          + (0).to_bytes(4, "big"))
    assert decode_group_metadata(v0) == GroupMetadataValue("consumer", 1, None, None, -1, ())
    # v4 (flexible): compact strings, compact arrays and bytes, tagged fields.
    v4 = (b"\x00\x04" + b"\x09consumer" + (2).to_bytes(4, "big") + b"\x06range" + b"\x02m"
          + (9).to_bytes(8, "big") + b"\x02"
          + b"\x02m" + b"\x00" + b"\x02c" + b"\x02h" + (300).to_bytes(4, "big") + (100).to_bytes(4, "big")
          + b"\x02S" + b"\x02A" + b"\x00"
          + b"\x00")
    assert decode_group_metadata(v4) == GroupMetadataValue(
        "consumer", 2, "range", "m", 9, (MemberMetadata("m", None, "c", "h", 300, 100, b"S", b"A"),))
