"""The fuzzer's corpus and mutations, without a broker: seeds are valid requests of every served
API at every served version, frames are a pure function of (seed, connection), and the
structure-aware mutations hit the length and count fields they aim at."""

from __future__ import annotations

import struct

import pytest

from broker.protocol.api import API_SPECS
from broker.protocol.errors import ProtocolError
from broker.protocol.headers import decode_request_header
from broker.protocol.messages import CreatePartitionsRequest, CreateTopicsRequest
from broker.server.handlers import HANDLERS
from deploy.fuzz.corpus import Seed, Target, build_corpus
from deploy.fuzz.mutate import Frame, Mutator
from deploy.fuzz.plan import make_plan
from deploy.fuzz.trace import Kind, trace


@pytest.fixture(scope="module")
def corpus() -> dict[int, list[Seed]]:
    return build_corpus(Target())


@pytest.fixture(scope="module")
def mutator(corpus: dict[int, list[Seed]]) -> Mutator:
    return Mutator(corpus)


def body_decodes(frame: Frame) -> bool:
    """Whether the broker's codec reads the frame's body (header intact, sizes honest)."""
    if frame.lie or frame.desync or frame.api_key not in HANDLERS or frame.api_version is None:
        return False
    spec = API_SPECS[frame.api_key]
    if not spec.min_version <= frame.api_version <= spec.max_version:
        return False
    payload = frame.data[4:]
    if struct.unpack(">i", frame.data[:4])[0] != len(payload):
        return False
    try:
        _, offset = decode_request_header(payload)
        spec.request.decode(payload[offset:], frame.api_version)
    except (ProtocolError, ValueError):
        return False
    return True


def test_every_served_api_has_seeds_at_every_served_version(corpus: dict[int, list[Seed]]) -> None:
    for key, handler in HANDLERS.items():
        versions = {s.version for s in corpus[key]}
        assert versions == set(range(handler.min_version, handler.max_version + 1)), API_SPECS[key].name
    for seeds in corpus.values():
        for seed in seeds:
            spec = API_SPECS[seed.api_key]
            spec.request.decode(seed.body, seed.version)  # every seed is a valid request


def test_huge_and_negative_partition_counts_are_seeds(corpus: dict[int, list[Seed]]) -> None:
    counts = {t.num_partitions for s in corpus[19] for t in CreateTopicsRequest.decode(s.body, s.version).topics}
    assert {2**31 - 1, 100_000, -1, 0, -(2**31)} <= counts
    grown = {t.count for s in corpus[37] for t in CreatePartitionsRequest.decode(s.body, s.version).topics}
    assert {2**31 - 1, 100_000, -1, 0} <= grown


def test_the_trace_names_lengths_counts_and_integers_where_they_are() -> None:
    request = CreateTopicsRequest(timeout_ms=5, topics=[CreateTopicsRequest.CreatableTopic(
        name="abc", num_partitions=7, replication_factor=1)])
    body, fields = trace(request, 4)  # not flexible: int32 array counts, int16 string lengths
    assert fields[0] == fields[0].__class__(Kind.LENGTH, 0, 4, 1)  # one topic
    assert fields[1].kind is Kind.LENGTH and fields[1].width == 2 and fields[1].value == 3  # "abc"
    partitions = next(f for f in fields if f.kind is Kind.INT and f.value == 7)
    assert struct.unpack_from(">i", body, partitions.offset)[0] == 7
    body, fields = trace(request, 5)  # flexible: varint lengths and tagged-field counts
    assert fields[0].kind is Kind.COMPACT_LENGTH and body[fields[0].offset] == 2  # 1 topic, as 1 + 1
    assert any(f.kind is Kind.TAGS for f in fields)


def test_plans_are_a_function_of_seed_and_connection(mutator: Mutator) -> None:
    assert make_plan(mutator, 7, 123) == make_plan(mutator, 7, 123)
    assert make_plan(mutator, 7, 123) != make_plan(mutator, 8, 123)
    assert make_plan(mutator, 7, 123) != make_plan(mutator, 7, 124)


def test_benign_frames_parse_and_fatal_ones_mostly_do_not(mutator: Mutator) -> None:
    frames = [f for i in range(2000) for f in make_plan(mutator, 1, i).frames]
    benign = [f for f in frames if not f.fatal]
    fatal = [f for f in frames if f.fatal]
    assert sum(map(body_decodes, benign)) >= 0.95 * len(benign)
    assert sum(map(body_decodes, fatal)) <= 0.5 * len(fatal)
    # Frames that lie about their size come last on their connection: nothing behind them is read.
    for i in range(2000):
        plan = make_plan(mutator, 1, i)
        assert all(not f.lie for f in plan.frames[:-1])


def test_length_tampering_reaches_every_kind_of_length(mutator: Mutator) -> None:
    labels = [f.label for i in range(3000) for f in make_plan(mutator, 3, i).frames]
    for op in ("length@", "compact_length@", "tags@", "batch_", "api_version", "client_id_length",
               "size_long", "size_short", "size_negative", "truncate@", "flip@"):
        assert any(op in label for label in labels), op
    # int32 lengths set to the values a hostile peer picks
    assert any("->2147483647" in label for label in labels)
    assert any("->-1" in label for label in labels)
