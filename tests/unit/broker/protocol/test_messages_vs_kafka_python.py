"""Our codec against an independent one: kafka-python's, for every message both implement.

Bytes we encode must decode in kafka-python and re-encode there to the same bytes; a field
order, width or flexible-version mistake on our side shows up as a difference.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

import kafka.protocol
import pytest
from hypothesis import HealthCheck, given, settings
from kafka.protocol.api_message import ApiMessage

from broker.protocol import messages
from tests.unit.broker.protocol.test_messages_roundtrip import instance


def _kafka_python_messages() -> dict[str, Any]:
    for info in pkgutil.walk_packages(kafka.protocol.__path__, "kafka.protocol."):
        try:
            importlib.import_module(info.name)
        except ImportError:
            continue
    found: dict[str, Any] = {}
    stack = list(ApiMessage.__subclasses__())
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if getattr(cls, "_class_version", None) is None and hasattr(messages, cls.__name__):
            found[cls.__name__] = cls
    return found


THEIRS = _kafka_python_messages()
CASES = [
    (name, v)
    for name, cls in sorted(THEIRS.items())
    for v in range(
        getattr(messages, name).MIN_VERSION,
        min(getattr(messages, name).MAX_VERSION, cls.max_version) + 1,
    )
]


def test_the_cross_check_covers_the_apis_we_serve() -> None:
    for name in (
        "ProduceRequest",
        "FetchResponse",
        "MetadataResponse",
        "ApiVersionsResponse",
        "ListOffsetsRequest",
    ):
        assert name in THEIRS


@pytest.mark.parametrize(("name", "version"), CASES, ids=[f"{n}-v{v}" for n, v in CASES])
def test_kafka_python_reads_what_we_write(name: str, version: int) -> None:
    ours = getattr(messages, name)
    theirs = THEIRS[name][version]

    @settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
    @given(instance(ours, ours, version))
    def check(message: Any) -> None:
        if name == "ApiVersionsResponse":
            # kafka-python reads an ApiVersions reply that carries an error as v0, as clients
            # must (KIP-511); the error path has its own test in the server suite.
            message.error_code = 0
        data = bytes(message.encode(version))
        # ApiMessage.encode: kafka-python's own DeleteTopicsRequest.encode fails on decoded
        # objects, so call the base encoder.
        assert bytes(ApiMessage.encode(theirs.decode(data))) == data

    check()
