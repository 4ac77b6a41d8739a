"""Issue 10, item 10: every toxic attribute and proxy address is bounded (no sockets)."""

from __future__ import annotations

import json
import random

import pytest

from deploy.wan.errors import ApiError
from deploy.wan.proxy import parse_proxy_fields, split_hostport
from deploy.wan.toxics import ATTRIBUTES, MAXIMUMS, make_stage, parse_toxic, update_toxic


@pytest.mark.parametrize("toxic_type", sorted(ATTRIBUTES))
async def test_every_attribute_at_its_maximum_makes_a_stage(toxic_type: str) -> None:
    """The largest accepted values still give a stage whose arithmetic stays finite."""
    toxic = parse_toxic({"type": toxic_type, "attributes": dict(MAXIMUMS[toxic_type])})
    assert make_stage(toxic, random.Random(1)) is not None


@pytest.mark.parametrize("toxic_type", sorted(ATTRIBUTES))
@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan"), 10**400, -1, 2**63, 1e300, "1", None,
                                   True, [1], {"v": 1}])
def test_no_attribute_takes_a_value_out_of_bounds(toxic_type: str, value: object) -> None:
    for key in ATTRIBUTES[toxic_type]:
        attributes: dict[str, object] = {k: max(1, m) for k, m in ATTRIBUTES[toxic_type].items()}
        attributes[key] = value
        if value == -1 and ATTRIBUTES[toxic_type][key] <= -1:
            continue
        with pytest.raises(ApiError) as caught:
            parse_toxic(json.loads(json.dumps({"type": toxic_type, "attributes": attributes})))
        assert caught.value.status == 400 and repr(key) in caught.value.message


def test_updates_are_checked_like_creations() -> None:
    toxic = parse_toxic({"type": "latency", "attributes": {"latency": 40}})
    for value in (float("inf"), 10**400, -3):
        with pytest.raises(ApiError, match="'jitter'"):
            update_toxic(toxic, {"attributes": {"jitter": value}})
    with pytest.raises(ApiError, match="toxicity"):
        update_toxic(toxic, {"toxicity": float("nan")})


@pytest.mark.parametrize("address", ["h" * 300 + ":80", "a\x00b:80", "a b:80", "x" * 64 + ".example:80",
                                     "127.0.0.1:65536", "127.0.0.1:٣", "127.0.0.1:" + "9" * 400])
def test_addresses_no_resolver_could_take_are_400(address: str) -> None:
    with pytest.raises(ApiError) as caught:
        split_hostport(address, "upstream")
    assert caught.value.status == 400 and "upstream" in caught.value.message


def test_proxy_fields_are_named_when_wrong() -> None:
    for body, field in [({"name": "p", "upstream": 5}, "upstream"), ({"name": "p", "upstream": "a:1", "listen": 5},
                                                                    "listen"),
                        ({"name": "p" * 256, "upstream": "a:1"}, "name"),
                        ({"name": "p", "upstream": "a:1", "enabled": 1}, "enabled")]:
        with pytest.raises(ApiError) as caught:
            parse_proxy_fields(body)
        assert field in caught.value.message
