"""An Apache Kafka 4.x source cluster (one KRaft node from bench/peers) for a link-mode or mm2
mirror into Causeway, and the mirror config that reads from it: what a test or the DR chaos
matrix uses for "source: Apache Kafka" instead of a Causeway cluster.

    with kafka_source(tmp_path / "kafka") as kafka:
        config = mirror_from_kafka(kafka, "dr", causeway.bootstrap, name="kafka-to-dr")
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.peers import KafkaBroker
from deploy.broker_process import BrokerProcess

__all__ = ["kafka_and_causeway", "kafka_source", "mirror_from_kafka"]


@contextmanager
def kafka_source(directory: Path, overrides: dict[str, str] | None = None) -> Iterator[KafkaBroker]:
    """A started single-node Kafka (its `bootstrap` on a free loopback port), stopped on exit;
    the kafka_jars fixture must have found Kafka 4's jars (`make peers`)."""
    with KafkaBroker(directory, overrides=dict(overrides or {})) as kafka:
        yield kafka


@contextmanager
def kafka_and_causeway(directory: Path) -> Iterator[tuple[KafkaBroker, BrokerProcess]]:
    """`kafka_source` in `directory`/kafka and a standalone Causeway target beside it (in
    `directory`/causeway, groups formed at once), both stopped on exit."""
    with kafka_source(directory / "kafka") as kafka:
        causeway = BrokerProcess(directory / "causeway", overrides=("group.initial.rebalance.delay.ms=0",)).start()
        try:
            yield kafka, causeway
        finally:
            assert causeway.stop() == 0, causeway.log_tail()


def mirror_from_kafka(kafka: KafkaBroker, target_alias: str, target_bootstrap: str, *, name: str,
                      mode: str = "link", **extra: Any) -> dict[str, Any]:
    """The mirror config (mirror/config.py's keys) of `name` from `kafka` to a Causeway target."""
    return {"name": name, "mode": mode, "source": {"alias": "kafka", "bootstrap": kafka.bootstrap},
            "target": {"alias": target_alias, "bootstrap": target_bootstrap}, **extra}
