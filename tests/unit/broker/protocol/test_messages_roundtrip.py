"""Every message of every version survives encode then decode unchanged (hypothesis)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.protocol import messages
from tools import gen_protocol

INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
}

MESSAGE_CLASSES = [
    cls
    for cls in vars(messages).values()
    if isinstance(cls, type) and hasattr(cls, "FIELDS") and hasattr(cls, "MAX_VERSION")
]
CASES = [(cls, v) for cls in MESSAGE_CLASSES for v in range(cls.MIN_VERSION, cls.MAX_VERSION + 1)]


def scalar(kind: str) -> st.SearchStrategy[Any]:
    if kind in INT_RANGES:
        lo, hi = INT_RANGES[kind]
        return st.integers(lo, hi)
    if kind == "float64":
        return st.floats(allow_nan=False)
    if kind == "bool":
        return st.booleans()
    if kind == "string":
        return st.text(max_size=8)
    if kind in ("bytes", "records"):
        return st.binary(max_size=16)
    if kind == "uuid":
        return st.uuids()
    raise AssertionError(kind)


def instance(top: type, cls: type, version: int, depth: int = 0) -> st.SearchStrategy[Any]:
    """Random instances of `cls` with values in exactly the fields `version` carries."""
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for attr, kind, lo, hi, nlo, nhi in cls.FIELDS:  # type: ignore[attr-defined]
        if not lo <= version <= hi:
            continue
        element = kind.removeprefix("[]")
        if element in gen_protocol.PRIMITIVES:
            item = scalar(element)
        else:
            item = instance(top, getattr(top, element), version, depth + 1)
        value = st.lists(item, max_size=2 if depth < 2 else 0) if kind.startswith("[]") else item
        if nlo <= version <= nhi:
            value = st.none() | value
        fields[attr] = value
    return st.builds(cls, **fields)


@pytest.mark.parametrize(("cls", "version"), CASES, ids=[f"{c.__name__}-v{v}" for c, v in CASES])
def test_every_version_round_trips(cls: type, version: int) -> None:
    @settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
    @given(instance(cls, cls, version))
    def check(message: Any) -> None:
        data = message.encode(version)
        decoded = cls.decode(data, version)
        assert decoded == message
        assert decoded.encode(version) == data

    check()


def test_records_decode_as_views_of_the_input() -> None:
    request = messages.ProduceRequest(
        acks=-1,
        topic_data=[
            messages.ProduceRequest.TopicProduceData(
                name="t",
                partition_data=[
                    messages.ProduceRequest.PartitionProduceData(index=0, records=b"batch")
                ],
            )
        ],
    )
    data = bytes(request.encode(9))
    records = messages.ProduceRequest.decode(data, 9).topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview)
    assert records.obj is data  # a slice of the request buffer, not a copy
    assert records == b"batch"


def test_tagged_field_written_only_when_set_and_read_back() -> None:
    partition = messages.FetchResponse.PartitionData(partition_index=3)
    response = messages.FetchResponse(
        responses=[
            messages.FetchResponse.FetchableTopicResponse(
                topic_id=uuid.uuid4(), partitions=[partition]
            )
        ]
    )
    without = response.encode(13)
    partition.current_leader = messages.FetchResponse.LeaderIdAndEpoch(leader_id=2, leader_epoch=7)
    with_tag = response.encode(13)
    assert len(with_tag) > len(without)
    decoded = messages.FetchResponse.decode(with_tag, 13)
    assert decoded.responses[0].partitions[0].current_leader.leader_epoch == 7


def test_fields_absent_from_a_version_are_not_sent() -> None:
    # Metadata v0 has no allow_auto_topic_creation; v4 does.
    request = messages.MetadataRequest(topics=[], allow_auto_topic_creation=False)
    assert messages.MetadataRequest.decode(request.encode(0), 0).allow_auto_topic_creation is True
    assert messages.MetadataRequest.decode(request.encode(4), 4).allow_auto_topic_creation is False
