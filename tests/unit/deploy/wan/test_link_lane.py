"""Issue 24: how a link's netem settings show on a TCP stream (deploy/wan/link.py, Lane)."""

from __future__ import annotations

import random

import pytest

from deploy.wan.errors import ApiError
from deploy.wan.link import MIN_ROUND_TRIP_SECONDS, SEGMENT_BYTES, Lane, Link, LinkSpec, parse_link, update_link


def lane(**shaping: float) -> Lane:
    link = Link(LinkSpec("l", ("a", "b"), **shaping))  # type: ignore[arg-type]
    return Lane(link, link.direction("a", "b"), random.Random(7))


def test_latency_alone_delays_every_piece_by_it() -> None:
    way = lane(latency=40)
    assert [way.due(t, 1000) for t in (0.0, 0.5, 1.0)] == pytest.approx([0.04, 0.54, 1.04])


def test_jitter_never_delivers_a_piece_before_the_one_ahead_of_it() -> None:
    way = lane(latency=40, jitter=40)
    dues = [way.due(i * 0.001, 1000) for i in range(2000)]
    assert dues == sorted(dues)
    assert all(due >= i * 0.001 for i, due in enumerate(dues))
    assert max(due - i * 0.001 for i, due in enumerate(dues)) <= 0.08 + 1e-9


def test_a_lost_piece_and_what_follows_it_arrive_a_round_trip_late() -> None:
    way = lane(latency=40, loss=10)
    dues = [way.due(i * 0.001, SEGMENT_BYTES) for i in range(5000)]
    late = [i for i, due in enumerate(dues) if due - i * 0.001 > 0.04 + 1e-9]
    # About 10% of one-segment pieces are lost; each costs a round trip (80 ms), and the pieces
    # behind it on the stream wait for it (head-of-line blocking), so many more arrive late.
    assert late
    assert max(due - i * 0.001 for i, due in enumerate(dues)) == pytest.approx(0.12)
    assert dues == sorted(dues)
    first = late[0]
    assert dues[first] == pytest.approx(first * 0.001 + 0.12)


def test_loss_grows_with_the_segments_a_piece_spans() -> None:
    small, large = lane(loss=1), lane(loss=1)
    lost_small = sum(small.due(i, SEGMENT_BYTES) > i for i in range(4000))
    lost_large = sum(large.due(i, 50 * SEGMENT_BYTES) > i for i in range(4000))
    # 1% of single segments; 1 - 0.99**50 (about 40%) of 50-segment pieces.
    assert 10 <= lost_small <= 80
    assert 1200 <= lost_large <= 2000
    assert lane(loss=1).due(0.0, 0) in (0.0, MIN_ROUND_TRIP_SECONDS)


def test_a_reordered_piece_arrives_with_the_piece_before_it() -> None:
    way = lane(latency=40, reorder=50)
    dues = [way.due(i * 0.010, 1000) for i in range(1000)]
    early = [i for i, due in enumerate(dues) if due - i * 0.010 < 0.04 - 1e-9]
    assert 350 <= len(early) <= 650  # about half skip the delay ...
    assert all(dues[i] == dues[i - 1] or dues[i] == i * 0.010 for i in early if i)  # ... but not the queue
    assert dues == sorted(dues)


@pytest.mark.parametrize(("body", "named"), [
    ({"name": "l", "between": ["a", "b"], "loss": 150}, "loss"),
    ({"name": "l", "between": ["a", "b"], "loss": 100}, "loss"),
    ({"name": "l", "between": ["a", "b"], "reorder": -1}, "reorder"),
    ({"name": "l", "between": ["a", "b"], "loss": float("nan")}, "loss"),
    ({"name": "l", "between": ["a", "b"], "bandwidth": -5}, "bandwidth"),
    ({"name": "l", "between": ["a", "b"], "bandwidth": 1.5}, "bandwidth"),
    ({"name": "l", "between": ["a", "b"], "latency": True}, "latency"),
    ({"name": "l", "between": ["a"]}, "between"),
    ({"name": "../x", "between": ["a", "b"]}, "name"),
    ([], "object"),
])
def test_bad_links_are_400_naming_the_field(body: object, named: str) -> None:
    with pytest.raises(ApiError, match=named) as caught:
        parse_link(body)
    assert caught.value.status == 400


def test_an_update_keeps_name_and_ends() -> None:
    spec = parse_link({"name": "l", "between": ["a", "b"], "bandwidth": 1000, "latency": 10})
    updated = update_link(spec, {"loss": 0.5})
    assert (updated.bandwidth, updated.latency, updated.loss) == (1000, 10, 0.5)
    with pytest.raises(ApiError, match="between"):
        update_link(spec, {"between": ["a", "c"]})
