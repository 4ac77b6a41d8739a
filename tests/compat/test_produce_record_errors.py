"""Two answers a real client expects (issue 11): per-record produce errors (KIP-467) and the
deprecated topic config ``message.format.version`` accepted and ignored, as Kafka 3.x does."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from broker.protocol.errors import ErrorCode
from broker.protocol.messages import ProduceRequest, ProduceResponse
from broker.protocol.records import Record, build_batch
from deploy.broker_process import BrokerProcess
from deploy.kafka_socket import ask
from tests.support.consume import read_partition

pytestmark = pytest.mark.compat
TIMEOUT_S = 30.0
KEYLESS_MESSAGE = "Compacted topic cannot accept message without key in topic partition {}-0"


@pytest.fixture(scope="module")
def broker(module_broker: BrokerProcess) -> BrokerProcess:
    """The module's one broker (tests/conftest.py), not one per test: topics keep them apart."""
    return module_broker


def create_compacted(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"cleanup.policy": "compact"})])[topic].result(TIMEOUT_S)


def produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes]]) -> list[tuple[bytes | None, int]]:
    """One batch (linger) of `records` to partition 0; (key, error code or 0) per record, in order."""
    outcome: dict[bytes, tuple[bytes | None, int]] = {}

    def on_delivery(err: KafkaError | None, msg: object) -> None:
        outcome[msg.value()] = (msg.key(), err.code() if err else 0)  # type: ignore[attr-defined]

    # A linger far longer than queueing four records can take on a loaded machine, so they go as
    # one batch; flush() sends at once without waiting it out.
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 30_000, "retries": 0})
    for key, value in records:
        producer.produce(topic, value=value, key=key, partition=0, on_delivery=on_delivery)
    assert producer.flush(TIMEOUT_S) == 0
    return [outcome[value] for _, value in records]


def read_values(bootstrap: str, topic: str) -> list[bytes]:
    return [msg.value() for msg in read_partition(bootstrap, topic, timeout_s=TIMEOUT_S)]


def test_librdkafka_fails_only_the_keyless_records_of_a_batch(broker: BrokerProcess) -> None:
    create_compacted(broker.bootstrap, "compacted")
    records = [(b"k0", b"v0"), (None, b"v1"), (b"k2", b"v2"), (None, b"v3")]
    outcome = produce(broker.bootstrap, "compacted", records)
    # The broker named records 1 and 3: librdkafka fails them with INVALID_RECORD and the others
    # with _INVALID_DIFFERENT_RECORD (retriable by the application), not the whole batch alike.
    assert outcome == [(b"k0", KafkaError._INVALID_DIFFERENT_RECORD), (None, KafkaError.INVALID_RECORD),
                       (b"k2", KafkaError._INVALID_DIFFERENT_RECORD), (None, KafkaError.INVALID_RECORD)]
    # Nothing of the refused batch was stored; the good records go in on their own.
    assert produce(broker.bootstrap, "compacted", [(b"k0", b"v0"), (b"k2", b"v2")]) == [(b"k0", 0), (b"k2", 0)]
    assert read_values(broker.bootstrap, "compacted") == [b"v0", b"v2"]


def produce_raw(bootstrap: str, topic: str, batch: bytes, version: int) -> ProduceResponse.PartitionProduceResponse:
    request = ProduceRequest(acks=1, timeout_ms=10_000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)])])
    response: ProduceResponse = ask(bootstrap, request, version, timeout_s=TIMEOUT_S)
    return response.responses[0].partition_responses[0]


@pytest.mark.parametrize("version", [8, 9, 11])
def test_record_errors_name_each_refused_record_by_its_index(broker: BrokerProcess, version: int) -> None:
    topic = f"compacted-v{version}"
    create_compacted(broker.bootstrap, topic)
    batch = build_batch([Record(b"a", b"1"), Record(None, b"2"), Record(b"c", b"3"), Record(None, b"4")])
    answer = produce_raw(broker.bootstrap, topic, batch, version)
    assert answer.error_code == ErrorCode.INVALID_RECORD and answer.base_offset == -1
    message = KEYLESS_MESSAGE.format(topic)
    assert [(e.batch_index, e.batch_index_error_message) for e in answer.record_errors] == [(1, message),
                                                                                             (3, message)]
    # Kafka's InvalidRecordException text, with the first three record errors.
    assert answer.error_message == (
        "One or more records have been rejected due to 2 record errors in total, and only showing the first "
        f"three errors at most: [RecordError(batchIndex=1, message='{message}'), "
        f"RecordError(batchIndex=3, message='{message}')]")


def describe(admin: AdminClient, topic: str) -> dict[str, str]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(TIMEOUT_S)
    return {name: entry.value for name, entry in entries.items()}


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")
def test_message_format_version_is_accepted_and_ignored_as_kafka_3_does(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    # A topic copied from an old cluster carries it: creating it works, the key is kept.
    admin.create_topics([NewTopic("old", 1, 1, config={"message.format.version": "0.10.2"})])["old"].result(TIMEOUT_S)
    assert describe(admin, "old")["message.format.version"] == "0.10.2"
    # AlterConfigs (the legacy full replace) and IncrementalAlterConfigs accept it too.
    resource = ConfigResource(ConfigResource.Type.TOPIC, "old", set_config={"message.format.version": "2.8",
                                                                          "retention.ms": "3600000"})
    admin.alter_configs([resource])[resource].result(TIMEOUT_S)
    assert describe(admin, "old")["message.format.version"] == "2.8"
    incremental = ConfigResource(ConfigResource.Type.TOPIC, "old", incremental_configs=[
        ConfigEntry("message.format.version", "3.0-IV1", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([incremental])[incremental].result(TIMEOUT_S)
    assert describe(admin, "old")["message.format.version"] == "3.0-IV1"
    # A value that is no Kafka release is refused, as Kafka's validator does.
    bad = ConfigResource(ConfigResource.Type.TOPIC, "old", incremental_configs=[
        ConfigEntry("message.format.version", "banana", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as refused:
        admin.incremental_alter_configs([bad])[bad].result(TIMEOUT_S)
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
    # Ignored: records still go in as v2 batches and come back.
    assert produce(broker.bootstrap, "old", [(b"k", b"v")]) == [(b"k", 0)]
    assert read_values(broker.bootstrap, "old") == [b"v"]
    # Said once per window (any value: a client repeating it must not flood the log), then counted.
    assert "message.format.version with value `0.10.2` is ignored" in broker.log_path.read_text()
    assert "message.format.version with value `3.0-IV1`" not in broker.log_path.read_text()
    # A topic without it does not list it (Kafka 4 removed the key).
    admin.create_topics([NewTopic("new", 1, 1)])["new"].result(TIMEOUT_S)
    assert "message.format.version" not in describe(admin, "new")
