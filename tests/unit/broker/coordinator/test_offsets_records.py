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
