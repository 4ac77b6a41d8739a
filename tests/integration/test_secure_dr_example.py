"""`causeway up examples/secure-dr.yaml` as an operator runs it: 3+3 brokers with mutual TLS between
each cluster's brokers, east's WAN listener SASL_SSL (SCRAM), west's LOCAL listener SASL_SSL, ACLs
at both ends, and a link-mode mirror that logs in as mirror-west at each end.

What must hold: the mirror copies east's records to west at east's offsets across the secured
link; at west a second principal (`reporting`) reads the mirror topic `orders` but its Produce and
its LinkAppend to it are refused (TOPIC_AUTHORIZATION_FAILED) and write nothing; across the link
`analytics` reads `orders` and is refused `payments`; `status` is healthy; no generated password
is in what `up` printed, `status`, the state file or a log. One topology for every assertion.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from broker.client import MIRROR_NAME_CONFIG, ErrorCode, TopicPartition, admin, fetch, link_append, open_client
from broker.config import load_properties
from broker.protocol.records import Record, build_batch
from security.client import client_security
from tests.integration.test_link_mode_launcher import causeway, ends, produce, status
from tests.support.consume import read_partition
from tests.support.polling import wait_until

EXAMPLE = "examples/secure-dr.yaml"
TOPICS = {"orders": 3, "payments": 2}
DEADLINE_S = 90.0
TIMEOUT_S = 30.0


@dataclass
class SecureDr:
    state: Path
    up: subprocess.CompletedProcess[str]
    passwords: dict[str, str]  # every generated password of both clusters, by "<cluster>/<user>"
    east: str  # east's LOCAL bootstrap (PLAINTEXT)
    east_wan: str  # east's WAN listener as west reaches it (SASL_SSL)
    west: str  # west's LOCAL bootstrap (SASL_SSL)

    def properties(self, cluster: str, user: str, *, wan: bool = False) -> Path:
        """The client properties file `up` generated for `user` of `cluster`."""
        return self.state / "security" / cluster / f"{user}{'.wan' if wan else ''}.properties"

    def librdkafka(self, cluster: str, user: str, **extra: object) -> dict[str, object]:
        """librdkafka's keys for `user`'s SASL_SSL (SCRAM) login to `cluster`, from the same files."""
        return {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user,
                "sasl.password": self.passwords[f"{cluster}/{user}"],
                "ssl.ca.location": str(self.state / "security" / cluster / "certs" / "ca.crt"), **extra}


@pytest.fixture(scope="module")
def dr(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureDr]:
    """The example, up (`-d`) and healthy, with east's topics produced to; `down` after."""
    state = tmp_path_factory.mktemp("secure-dr") / "state"
    up = causeway("up", EXAMPLE, "-d", "--state-dir", str(state))
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        passwords = {f"{cluster}/{user}": password for cluster in ("east", "west") for user, password in
                     json.loads((state / "security" / cluster / "passwords.json").read_text()).items()}
        doc = status(state)
        east, west = doc["clusters"]["east"], doc["clusters"]["west"]
        for topic, partitions in TOPICS.items():
            produce(east["bootstrap"], topic, partitions, 10 * partitions)
        yield SecureDr(state, up, passwords, east["bootstrap"], east["wan"]["west"], west["bootstrap"])
    finally:
        down = causeway("down", "--state-dir", str(state))
        assert down.returncode == 0, down.stdout + down.stderr


def _west_ends(dr: SecureDr, topic: str, partitions: int) -> dict[int, int] | None:
    """`ends` at west, logged in as west's admin (the only user who may see every mirror topic)."""
    consumer = Consumer({"bootstrap.servers": dr.west, **dr.librdkafka("west", "admin", **{"group.id": "ends"})})
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if metadata is None or metadata.error is not None or len(metadata.partitions) < partitions:
            return None
        return {p: consumer.get_watermark_offsets(KafkaTopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)}
    finally:
        consumer.close()


def _rows(bootstrap: str, topic: str, partition: int, security: dict[str, object] | None = None,
          ) -> list[tuple[object, ...]]:
    return [(m.offset(), m.key(), m.value(), m.timestamp(), m.headers())
            for m in read_partition(bootstrap, topic, partition, security=security)]


def test_the_mirror_copies_across_the_secured_link_at_the_sources_offsets(dr: SecureDr) -> None:
    for topic, partitions in TOPICS.items():
        wait_until(lambda: _west_ends(dr, topic, partitions) == ends(dr.east, topic, partitions),  # noqa: B023
                   what=f"west's mirror topic {topic} to reach east's log ends", timeout_s=DEADLINE_S, interval_s=0.5)
    west_admin = dr.librdkafka("west", "admin")
    for topic, partitions in TOPICS.items():
        for p in range(partitions):
            assert _rows(dr.west, topic, p, west_admin) == _rows(dr.east, topic, p), (topic, p)
    # West has no WAN listener (nothing reads it across the link): no WAN client files either.
    assert "security: LOCAL SASL_SSL, no WAN listener" in dr.up.stdout, dr.up.stdout
    assert dr.properties("west", "reporting").exists() and not dr.properties("west", "reporting", wan=True).exists()
    # The mirror logged in at both ends as mirror-west: over east's WAN listener and west's LOCAL one.
    mirror = json.loads((dr.state / "mirrors" / "east-to-west.yaml").read_text())
    for end in ("source", "target"):
        assert mirror[end]["properties"]["security.protocol"] == "SASL_SSL", end
        assert 'username="mirror-west"' in mirror[end]["properties"]["sasl.jaas.config"], end


def test_a_second_principal_at_west_reads_the_mirror_topic_and_cannot_write_it(dr: SecureDr) -> None:
    wait_until(lambda: _west_ends(dr, "orders", 3) == ends(dr.east, "orders", 3),
               what="west's orders to reach east's log ends", timeout_s=DEADLINE_S, interval_s=0.5)
    before = _west_ends(dr, "orders", 3)
    assert before is not None and sum(before.values()) == 30
    # Reading: its ACLs allow `orders` as a reports-* group.
    reporting = dr.librdkafka("west", "reporting", **{"group.id": f"reports-{uuid.uuid4()}"})
    assert len(_rows(dr.west, "orders", 0, reporting)) == before[0]
    # Its generated client file works with the tools as it is; it sees only what it may describe.
    listed = causeway("topics", "--bootstrap-server", dr.west, "--command-config",
                      str(dr.properties("west", "reporting")), "--list")
    assert listed.returncode == 0 and listed.stdout.split() == ["orders"], listed.stdout + listed.stderr

    # Producing: refused, the delivery report says why.
    errors: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": dr.west, **dr.librdkafka("west", "reporting"),
                         "message.timeout.ms": 30000})
    producer.produce("orders", b"forged", partition=0,
                     on_delivery=lambda error, _message: errors.append(error))
    assert producer.flush(TIMEOUT_S) == 0
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED], errors

    # LinkAppend, as a mirror would send it (the right link name, batches where the copy ends):
    # refused, as it needs Alter on the topic or ClusterAction, which only mirror-west has.
    async def link_append_as_reporting() -> tuple[str, ErrorCode]:
        tp = TopicPartition("orders", 0)
        async with open_client(dr.west, request_timeout_s=TIMEOUT_S,
                               security=client_security(load_properties(dr.properties("west", "admin")))) as client:
            link = (await admin.describe_configs(client, "orders", keys=[MIRROR_NAME_CONFIG]))[MIRROR_NAME_CONFIG]
        assert link.value is not None
        batch = build_batch([Record(b"k", b"forged")], base_offset=before[0], base_timestamp=1_600_000_000_000)
        reporting_login = client_security(load_properties(dr.properties("west", "reporting")))
        async with open_client(dr.west, request_timeout_s=TIMEOUT_S, security=reporting_login) as client:
            result = (await link_append(client, link.value, {tp: batch}))[tp]
        return link.value, ErrorCode(result.error)

    link_name, error = trio.run(link_append_as_reporting)
    assert link_name == "east-to-west"
    assert error == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert _west_ends(dr, "orders", 3) == before  # nothing written


def test_analytics_across_the_link_reads_orders_and_is_refused_payments(dr: SecureDr) -> None:
    async def fetch_as_analytics() -> dict[str, int]:
        login = client_security(load_properties(dr.properties("east", "analytics", wan=True)))
        async with open_client(dr.east_wan, request_timeout_s=TIMEOUT_S, security=login) as client:
            answers = {}
            for topic in TOPICS:
                tp = TopicPartition(topic, 0)
                answers[topic] = (await fetch(client, {tp: 0}))[tp].error
            return answers

    assert trio.run(fetch_as_analytics) == {"orders": ErrorCode.NONE, "payments": ErrorCode.TOPIC_AUTHORIZATION_FAILED}


def test_status_is_healthy_and_no_password_is_out(dr: SecureDr) -> None:
    shown = causeway("status", "--state-dir", str(dr.state))
    assert shown.returncode == 0, shown.stdout + shown.stderr
    doc = status(dr.state)
    assert doc["healthy"] and set(doc["clusters"]) == {"east", "west"}, doc
    public: list[str] = [dr.up.stdout, dr.up.stderr, json.dumps(doc), shown.stdout, shown.stderr,
                         (dr.state / "state.json").read_text(),
                         *(p.read_text(errors="replace") for p in (dr.state / "logs").glob("*.log"))]
    assert len(dr.passwords) == 6  # east: admin, mirror-west, analytics; west: admin, mirror-west, reporting
    for who, password in dr.passwords.items():
        assert not any(password in text for text in public), f"{who}'s password is out"


@pytest.mark.parametrize("cluster", ["east", "west"])
def test_each_zookeeper_is_reached_over_tls_and_only_the_brokers_write_it(dr: SecureDr, cluster: str) -> None:
    """`zookeeper: SSL`: the brokers' zookeeper.connect is the TLS port, and a client of the plain
    port (anyone on the network) reads the layout but cannot rewrite it or read the credentials."""
    record = json.loads((dr.state / "state.json").read_text())["clusters"][cluster]["zookeeper"]
    assert record["tls_connect"] and record["tls_connect"] != record["connect"]
    anonymous = KazooClient(hosts=record["connect"])  # the plain port, with the cluster's chroot
    anonymous.start(timeout=15)
    try:
        assert sorted(anonymous.get_children("/brokers/ids")) == ["1", "2", "3"]
        with pytest.raises(NoAuthError):
            anonymous.set("/brokers/ids/1", b"{}")
        with pytest.raises(NoAuthError):
            anonymous.create("/config/topics/planted", b"{}")
        with pytest.raises(NoAuthError):
            anonymous.get("/config/users/mirror-west")  # the SCRAM credential the launcher wrote
    finally:
        anonymous.stop()


def test_switching_over_promotes_at_the_secured_west(dr: SecureDr) -> None:
    """`causeway mirror promote` logs in to west as the launcher does (its admin's client file):
    the promoted topic takes a producer at west. Last: it changes the topology."""
    promoted = causeway("mirror", "promote", EXAMPLE, "--mirror", "east-to-west", "--state-dir", str(dr.state),
                        "--topics", "payments")
    assert promoted.returncode == 0, promoted.stdout + promoted.stderr
    errors: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": dr.west, **dr.librdkafka("west", "admin")})
    producer.produce("payments", b"after the switch-over", partition=0,
                     on_delivery=lambda error, _message: errors.append(error))
    assert producer.flush(TIMEOUT_S) == 0
    assert errors == [None]
