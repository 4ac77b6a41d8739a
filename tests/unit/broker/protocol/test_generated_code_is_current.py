"""The checked-in messages.py is exactly what tools/gen_protocol.py makes of Kafka's schemas."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tools import gen_protocol

SCHEMAS = Path(os.environ.get("CAUSEWAY_KAFKA_SCHEMAS", gen_protocol.DEFAULT_SCHEMAS))


def test_messages_py_is_up_to_date() -> None:
    if not SCHEMAS.is_dir():
        # The schemas live beside the repository, not in it; without them there is no oracle.
        pytest.skip(f"Kafka's JSON schemas not found at {SCHEMAS} (set CAUSEWAY_KAFKA_SCHEMAS)")
    assert gen_protocol.generate(SCHEMAS) == gen_protocol.DEFAULT_OUTPUT.read_text(), (
        "broker/protocol/messages.py is stale: run python -m tools.gen_protocol"
    )
