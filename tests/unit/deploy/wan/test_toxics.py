"""Toxic parsing, defaults and the arithmetic of the stages (no sockets)."""

from __future__ import annotations

import random

import pytest

from deploy.wan.errors import ApiError
from deploy.wan.proxy import format_hostport, split_hostport
from deploy.wan.toxics import (
    ATTRIBUTES,
    LatencyStage,
    TokenBucket,
    make_stage,
    parse_toxic,
    slice_sizes,
    update_toxic,
)


def test_defaults_follow_toxiproxy() -> None:
    toxic = parse_toxic({"type": "latency", "attributes": {"latency": 40}})
    assert toxic.to_json() == {
        "attributes": {"latency": 40, "jitter": 0},
        "name": "latency_downstream",
        "type": "latency",
        "stream": "downstream",
        "toxicity": 1.0,
    }
    assert parse_toxic({"type": "bandwidth", "stream": "upstream"}).name == "bandwidth_upstream"


@pytest.mark.parametrize("toxic_type", sorted(ATTRIBUTES))
def test_every_type_parses_with_its_attributes(toxic_type: str) -> None:
    attributes = {key: max(minimum, 1) for key, minimum in ATTRIBUTES[toxic_type].items()}
    toxic = parse_toxic({"type": toxic_type, "attributes": attributes, "toxicity": 0.5})
    assert dict(toxic.attributes) == attributes
    assert toxic.toxicity == 0.5


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"type": "lag"}, "invalid toxic type"),
        ({}, "invalid toxic type"),
        ({"type": "latency", "stream": "sideways"}, "stream was invalid"),
        ({"type": "latency", "toxicity": 1.5}, "toxicity"),
        ({"type": "latency", "toxicity": "all"}, "toxicity"),
        ({"type": "latency", "attributes": {"latncy": 5}}, "unknown attribute 'latncy'"),
        ({"type": "latency", "attributes": {"latency": "5ms"}}, "must be an integer"),
        ({"type": "latency", "attributes": {"latency": 1.5}}, "must be an integer"),
        ({"type": "latency", "attributes": {"latency": -1}}, ">= 0"),
        ({"type": "slicer", "attributes": {"average_size": 0}}, ">= 1"),
        ({"type": "latency", "attributes": [1]}, "attributes must be a JSON object"),
        ([1, 2], "must be a JSON object"),
    ],
)
def test_bad_toxics_are_400(body: object, fragment: str) -> None:
    with pytest.raises(ApiError) as caught:
        parse_toxic(body)
    assert caught.value.status == 400
    assert fragment in caught.value.message


def test_update_merges_attributes_and_keeps_identity_fields() -> None:
    toxic = parse_toxic({"type": "latency", "name": "wan", "attributes": {"latency": 40, "jitter": 5}})
    updated = update_toxic(toxic, {"attributes": {"latency": 80}, "toxicity": 0.25, "type": "bandwidth"})
    assert updated.name == "wan" and updated.type == "latency"
    assert dict(updated.attributes) == {"latency": 80, "jitter": 5}
    assert updated.toxicity == 0.25
    assert updated is not toxic


def test_toxicity_decides_per_connection() -> None:
    rng = random.Random(7)
    never = parse_toxic({"type": "latency", "toxicity": 0})
    always = parse_toxic({"type": "latency", "toxicity": 1})
    assert all(make_stage(never, rng) is None for _ in range(100))
    assert all(make_stage(always, rng) is not None for _ in range(100))
    half = parse_toxic({"type": "latency", "toxicity": 0.5})
    hits = sum(make_stage(half, rng) is not None for _ in range(1000))
    assert 400 < hits < 600


@pytest.mark.parametrize(
    ("total", "average", "variation"), [(0, 5, 0), (1, 5, 0), (1000, 7, 3), (10, 1, 0), (99, 10, 20)]
)
def test_slices_cover_the_data(total: int, average: int, variation: int) -> None:
    sizes = slice_sizes(total, average, variation, random.Random(1))
    assert sum(sizes) == total
    assert all(size >= 1 for size in sizes)
    assert all(size <= max(1, average + variation) for size in sizes)


def test_token_bucket_spaces_grants_by_rate() -> None:
    bucket = TokenBucket(rate=1000.0, burst=0.0)
    assert bucket.reserve(500, now=10.0) == pytest.approx(10.5)
    assert bucket.reserve(500, now=10.0) == pytest.approx(11.0)
    # Idle time earns no credit beyond the burst.
    assert bucket.reserve(1000, now=20.0) == pytest.approx(21.0)
    bursty = TokenBucket(rate=1000.0, burst=0.5)
    assert bursty.reserve(1000, now=20.0) == pytest.approx(20.5)


def test_latency_jitter_stays_in_range() -> None:
    stage = LatencyStage(100, 20, random.Random(3))
    delays = [stage.delay() for _ in range(1000)]
    assert min(delays) >= 0.08 and max(delays) <= 0.12
    assert len(set(delays)) > 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        ("[::1]:8474", ("::1", 8474)),
        (":9092", ("", 9092)),
        ("localhost:1", ("localhost", 1)),
    ],
)
def test_split_hostport(text: str, expected: tuple[str, int]) -> None:
    assert split_hostport(text) == expected
    assert format_hostport(*expected) == text or expected[0] == ""


@pytest.mark.parametrize("text", ["127.0.0.1", "host:port", "h:70000", "[::1]8474"])
def test_split_hostport_rejects(text: str) -> None:
    with pytest.raises(ApiError) as caught:
        split_hostport(text)
    assert caught.value.status == 400
