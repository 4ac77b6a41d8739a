"""Failback with a topology, as a user runs it: `causeway up examples/dr-link.yaml`, a planned
promote at west, then `causeway mirror reverse-and-start examples/dr-link.yaml --mirror east-to-west`
finds both clusters (and the mirror's topics) as `promote` does, and east's topics become mirror
topics of `east-to-west-reverse`, refusing producers, at the same offsets."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource

from tests.integration.test_link_mode_launcher import (
    EXAMPLE,
    MIRROR,
    TOPICS,
    causeway,
    copied_topology,
    ends,
    produce,
)


def owners(bootstrap: str) -> dict[str, str]:
    """Each topic's causeway.mirror.name ("" when unset)."""
    client = AdminClient({"bootstrap.servers": bootstrap})
    futures = client.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, t) for t in TOPICS])
    out = {}
    for resource, future in futures.items():
        entry = future.result(timeout=30).get("causeway.mirror.name")
        out[resource.name] = entry.value if entry is not None and entry.value else ""
    return out


def test_reverse_and_start_with_the_topology(tmp_path: Path) -> None:
    with copied_topology(tmp_path, 20) as (state, east, west):
        promoted = causeway("mirror", "promote", EXAMPLE, "--mirror", MIRROR, "--state-dir", str(state))
        assert promoted.returncode == 0, promoted.stdout + promoted.stderr
        produce(west, "orders", 3, 3, start=1000)
        held = {t: ends(east, t, n) for t, n in TOPICS.items()}

        done = causeway("mirror", "reverse-and-start", EXAMPLE, "--mirror", MIRROR, "--state-dir", str(state))
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"mirror topics of mirror {MIRROR}-reverse" in done.stdout, done.stdout
        assert done.stdout.count("nothing to cut") == sum(TOPICS.values()), done.stdout
        assert owners(east) == {t: f"{MIRROR}-reverse" for t in TOPICS}
        assert {t: ends(east, t, n) for t, n in TOPICS.items()} == held
        with pytest.raises(KafkaException) as refused:
            produce(east, "orders", 3, 1)
        assert refused.value.args[0].code() == KafkaError.INVALID_REQUEST
