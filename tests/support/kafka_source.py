"""An Apache Kafka 4.x source cluster (one KRaft node from bench/peers) for a link-mode or mm2
mirror into Causeway, and the mirror config that reads from it: what a test or the DR chaos
matrix uses for "source: Apache Kafka" instead of a Causeway cluster.

    with kafka_source(tmp_path / "kafka") as kafka:
        config = mirror_from_kafka(kafka, "dr", causeway.bootstrap, name="kafka-to-dr")

A mirror that reaches Kafka across an emulated WAN link (one a drill can cut) reads it through a
listener of its own, advertised at a proxy of the WAN emulator, as a Causeway cluster's WAN
listener is in a topology (the primary's own clients keep the PLAINTEXT listener):

    with WanProcess() as wan, kafka_behind_wan(tmp_path / "kafka", wan.api) as kafka:
        config = mirror_from_kafka(kafka, "dr", causeway.bootstrap, name="kafka-to-dr",
                                   bootstrap=kafka.wan_bootstrap)
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.peers import KafkaBroker
from deploy.broker_process import BrokerProcess
from deploy.wan.client import WanClient

__all__ = ["WAN_LISTENER", "WAN_PROXY", "KafkaBehindWan", "kafka_and_causeway", "kafka_behind_wan", "kafka_source",
           "mirror_from_kafka"]

WAN_LISTENER = "WAN"
WAN_PROXY = "kafka-wan"  # the emulator's proxy in front of it


@contextmanager
def kafka_source(directory: Path, overrides: dict[str, str] | None = None) -> Iterator[KafkaBroker]:
    """A started single-node Kafka (its `bootstrap` on a free loopback port), stopped on exit;
    the kafka_jars fixture must have found Kafka 4's jars (`make peers`)."""
    with KafkaBroker(directory, overrides=dict(overrides or {})) as kafka:
        yield kafka


@dataclass
class KafkaBehindWan(KafkaBroker):
    """A Kafka node with a second plaintext listener, WAN, advertised at `wan_bootstrap` (the
    proxy's address): a client that bootstraps there reaches every partition through the proxy."""

    wan_bootstrap: str = ""

    def config(self) -> dict[str, str]:
        config = super().config()
        config["advertised.listeners"] = f"PLAINTEXT://{self.bootstrap},{WAN_LISTENER}://{self.wan_bootstrap}"
        config["listener.security.protocol.map"] = (f"PLAINTEXT:PLAINTEXT,{WAN_LISTENER}:PLAINTEXT,"
                                                    "CONTROLLER:PLAINTEXT")
        return config


@contextmanager
def kafka_behind_wan(directory: Path, api: str, overrides: dict[str, str] | None = None) -> Iterator[KafkaBehindWan]:
    """A started single-node Kafka whose WAN listener is reached through proxy WAN_PROXY of the
    emulator at `api` (made here, deleted on exit); stopped on exit."""
    client = WanClient(api, timeout_s=10)
    # The proxy binds port 0 before Kafka starts, so Kafka can advertise it; its upstream (a port
    # nothing listens on until then) is Kafka's WAN listener once Kafka has picked that port.
    client.create_proxy(WAN_PROXY, "127.0.0.1:0", "127.0.0.1:1")
    try:
        listen = str(client.proxies()[WAN_PROXY]["listen"])
        kafka = KafkaBehindWan(directory, overrides=dict(overrides or {}), extra_listeners=(WAN_LISTENER,),
                               wan_bootstrap=listen)
        with kafka:
            client.request("POST", f"/proxies/{WAN_PROXY}", {"upstream": kafka.address(WAN_LISTENER)})
            yield kafka
    finally:
        client.delete_proxy(WAN_PROXY)


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
                      mode: str = "link", bootstrap: str | None = None, **extra: Any) -> dict[str, Any]:
    """The mirror config (mirror/config.py's keys) of `name` from `kafka` (at `bootstrap`, its
    own by default) to a Causeway target."""
    return {"name": name, "mode": mode, "source": {"alias": "kafka", "bootstrap": bootstrap or kafka.bootstrap},
            "target": {"alias": target_alias, "bootstrap": target_bootstrap}, **extra}
