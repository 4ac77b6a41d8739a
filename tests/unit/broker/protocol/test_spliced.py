"""A fetch response encoded with file slices is, on the wire, the in-memory encoding."""

from pathlib import Path

import pytest

from broker.protocol.headers import encode_response
from broker.protocol.messages import FetchResponse
from broker.protocol.records import Record, build_batch
from broker.protocol.spliced import encode_response_parts
from broker.storage.file_slice import FileSlice


def _response(records_a: object, records_b: object) -> FetchResponse:
    def part(index: int, records: object) -> FetchResponse.PartitionData:
        return FetchResponse.PartitionData(partition_index=index, high_watermark=10, last_stable_offset=10,
                                           log_start_offset=0, records=records)  # type: ignore[arg-type]

    return FetchResponse(responses=[FetchResponse.FetchableTopicResponse(
        topic="t", partitions=[part(0, records_a), part(1, b""), part(2, records_b)])])


@pytest.mark.parametrize("version", [4, 11, 12, 13, 16, 17])
def test_spliced_parts_join_to_the_in_memory_frame(tmp_path: Path, version: int) -> None:
    a = build_batch([Record(None, b"a" * 100) for _ in range(3)])
    b = build_batch([Record(b"k", b"b" * 1000)])
    path = tmp_path / "segment"
    path.write_bytes(b"junk" + a + b + b"tail")
    header_version = 1 if version >= 12 else 0
    expected = encode_response(7, header_version, _response(a, b), version)
    with path.open("rb") as f:
        slices = [FileSlice(f.fileno(), 4, len(a), release=lambda: None),
                  FileSlice(f.fileno(), 4 + len(a), len(b), release=lambda: None)]
        parts = encode_response_parts(7, header_version, _response(*slices), version)
        joined = b"".join(p.read(0, len(p)) if isinstance(p, FileSlice) else bytes(p) for p in parts)
    assert joined == bytes(expected)
    assert [p for p in parts if isinstance(p, FileSlice)] == slices
