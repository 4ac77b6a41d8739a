"""LinkAppend's wire format (Causeway's own schemas in tools/causeway_protocol/) and the
generator's guard against an own schema that reuses a Kafka name or API key."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from broker.protocol.api import API_SPECS, ApiKey
from broker.protocol.messages import LinkAppendRequest, LinkAppendResponse
from broker.protocol.records import Record, build_batch
from tools import gen_protocol


def test_link_append_is_key_10000_and_flexible_from_v0() -> None:
    spec = API_SPECS[ApiKey.LINK_APPEND]
    assert int(ApiKey.LINK_APPEND) == 10000
    assert (spec.min_version, spec.max_version, spec.request_header_version(0)) == (0, 1, 2)


def test_request_and_response_round_trip() -> None:
    records = build_batch([Record(b"k", b"v")], base_offset=41)
    request = LinkAppendRequest(link_name="east-to-west", timeout_ms=30000, topics=[
        LinkAppendRequest.LinkAppendTopic(name="orders", partitions=[
            LinkAppendRequest.LinkAppendPartition(index=3, records=records),
            LinkAppendRequest.LinkAppendPartition(index=4, records=None)])])
    decoded = LinkAppendRequest.decode(bytes(request.encode(0)), 0)
    assert decoded.link_name == "east-to-west" and decoded.timeout_ms == 30000
    parts = decoded.topics[0].partitions
    assert (parts[0].index, bytes(parts[0].records or b""), parts[1].records) == (3, records, None)
    # Version 1 carries where the source's previous batch ended; version 0 leaves it out.
    request.topics[0].partitions[0].previous_end_offset = 40
    assert LinkAppendRequest.decode(bytes(request.encode(1)), 1).topics[0].partitions[0].previous_end_offset == 40
    assert LinkAppendRequest.decode(bytes(request.encode(0)), 0).topics[0].partitions[0].previous_end_offset == -1
    response = LinkAppendResponse(topics=[LinkAppendResponse.LinkAppendTopicResponse(name="orders", partitions=[
        LinkAppendResponse.LinkAppendPartitionResponse(index=3, error_code=87, error_message="straddles")])])
    answer = LinkAppendResponse.decode(bytes(response.encode(0)), 0).topics[0].partitions[0]
    assert (answer.error_code, answer.error_message, answer.log_end_offset, answer.high_watermark) == (
        87, "straddles", -1, -1)


@pytest.mark.skipif(not gen_protocol.DEFAULT_SCHEMAS.is_dir(), reason="Kafka's JSON schemas are not beside the repo")
@pytest.mark.parametrize("change", ["name", "key"])
def test_an_own_schema_may_not_reuse_a_kafka_name_or_key(tmp_path: Path, change: str) -> None:
    own = tmp_path / "own"
    shutil.copytree(gen_protocol.DEFAULT_OWN_SCHEMAS, own)
    path = own / "LinkAppendRequest.json"
    text = path.read_text()
    text = text.replace('"LinkAppendRequest"', '"ProduceRequest"') if change == "name" else text.replace(
        '"apiKey": 10000', '"apiKey": 0')
    path.write_text(text)
    with pytest.raises(gen_protocol.AllowlistError):
        gen_protocol.generate(gen_protocol.DEFAULT_SCHEMAS, gen_protocol.DEFAULT_ALLOWLIST, own)
