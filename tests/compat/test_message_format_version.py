"""message.format.version takes what Kafka 3.x's MetadataVersion.fromVersionString takes (issue 19,
item 15): a release, or one of its inter-broker protocol steps, followed by any dotted segments
Kafka ignores (`0.10.0.0` is 0.10.0, `2.8.1` is 2.8). Anything else is INVALID_CONFIG."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from broker.storage.config import is_metadata_version
from deploy.broker_process import BrokerProcess

pytestmark = pytest.mark.compat
TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(Path(tmp_path_factory.mktemp("mfv")) / "broker").start()
    try:
        yield process
    finally:
        assert process.stop() == 0, process.log_tail()


def _create(admin: AdminClient, topic: str, version: str) -> None:
    admin.create_topics([NewTopic(topic, 1, 1, config={"message.format.version": version})])[topic].result(TIMEOUT_S)


def _described(admin: AdminClient, topic: str) -> str:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return str(admin.describe_configs([resource])[resource].result(TIMEOUT_S)["message.format.version"].value)


@pytest.mark.parametrize("version", ["0.10.0.0", "0.8.2.2", "2.8.1", "0.10.0-IV1", "3.7-IV4", "1.1"])
def test_a_version_kafka_accepts_creates_the_topic(broker: BrokerProcess, version: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = "mfv-" + version.replace(".", "_").replace("-", "_")
    _create(admin, topic, version)
    assert _described(admin, topic) == version


@pytest.mark.parametrize("version", ["0.10.3", "1.9", "3.10", "0.8.0-IV0", "2.8.", "banana", "4.0"])
def test_a_version_kafka_refuses_is_invalid_config(broker: BrokerProcess, version: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    with pytest.raises(KafkaException) as refused:
        _create(admin, "refused", version)
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert f"Version {version} is not a valid version" in refused.value.args[0].str()


def test_an_existing_topic_takes_a_four_part_version(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("altered", 1, 1)])["altered"].result(TIMEOUT_S)
    change = ConfigResource(ConfigResource.Type.TOPIC, "altered", incremental_configs=[
        ConfigEntry("message.format.version", "0.10.0.0", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([change])[change].result(TIMEOUT_S)
    assert _described(admin, "altered") == "0.10.0.0"


def test_the_rule_is_kafkas_segment_rule() -> None:
    # Three segments for a 0.x release, two after; Java's split drops trailing empty segments,
    # so "0.10.0.0." still names 0.10.0 while "2.8." (two segments) is looked up whole.
    assert is_metadata_version("0.10.0.0.")
    assert is_metadata_version(" 2.8 ")  # Kafka trims string configs
    assert not is_metadata_version("2.8.")
    assert not is_metadata_version("")
