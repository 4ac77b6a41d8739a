"""Kafka's znode JSON: what real Kafka brokers wrote parses, what we write is Kafka's format, and
garbage is refused naming the znode (no ZooKeeper needed)."""

from __future__ import annotations

import json
import uuid

import pytest

from broker.config import ListenerSpec
from broker.controller.model import BrokerInfo
from broker.controller.zk import znodes as z

# Byte strings as Kafka 3.x brokers wrote them (zkCli dumps).
KAFKA_BROKER = (b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
                b'"endpoints":["PLAINTEXT://localhost:9091"],"jmx_port":-1,"port":9091,"host":"localhost",'
                b'"version":5,"timestamp":"1707276552023"}')
STRIMZI_BROKER = (b'{"listener_security_protocol_map":{"CONTROLPLANE-9090":"SSL","REPLICATION-9091":"SSL",'
                  b'"PLAIN-9092":"PLAINTEXT","TLS-9093":"SSL"},"endpoints":["CONTROLPLANE-9090://k-0.k.svc:9090",'
                  b'"REPLICATION-9091://k-0.k.svc:9091","PLAIN-9092://k-0.k.svc:9092","TLS-9093://k-0.k.svc:9093"],'
                  b'"jmx_port":-1,"features":{},"port":9092,"host":"k-0.k.svc","version":5,"rack":"dc1",'
                  b'"timestamp":"1710691902130"}')
KAFKA_TOPIC = (b'{"removing_replicas":{},"partitions":{"0":[0]},"topic_id":"ZOLr9CLNQjSW70hyIHx6BQ",'
               b'"adding_replicas":{},"version":3}')
KAFKA_TOPIC_V2 = (b'{"version":2,"partitions":{"2":[1,2,0],"1":[0,1,2],"0":[2,0,1]},"adding_replicas":{},'
                  b'"removing_replicas":{}}')
KAFKA_STATE = b'{"controller_epoch":1,"leader":0,"version":1,"leader_epoch":0,"isr":[0]}'
KAFKA_CONTROLLER = b'{"version":2,"brokerid":0,"timestamp":"1685460739018","kraftControllerEpoch":-1}'
KAFKA_CONTROLLER_V1 = b'{"version":1,"brokerid":3,"timestamp":"1631034424470"}'
KAFKA_CLUSTER_ID = b'{"version":"1","id":"Sfr7YvlkRHSHrmSrwq9mug"}'
KAFKA_CONFIG = b'{"version":1,"config":{"retention.ms":"100000"}}'
KAFKA_CONFIG_CHANGE = b'{"version":2,"entity_path":"topics/my-topic"}'
KAFKA_PID_BLOCK = b'{"version":1,"broker":0,"block_start":"0","block_end":"999"}'
KAFKA_ISR_CHANGE = b'{"version":1,"partitions":[{"topic":"t","partition":0},{"topic":"u","partition":3}]}'


def test_broker_registration_from_kafka() -> None:
    reg = z.parse_broker("/brokers/ids/1", KAFKA_BROKER)
    assert reg.version == 5 and reg.jmx_port == -1 and reg.timestamp_ms() == 1707276552023
    assert reg.broker_info(1) == BrokerInfo(1, (ListenerSpec("PLAINTEXT", "localhost", 9091),), None)
    assert reg.security_protocols() == {"PLAINTEXT": "PLAINTEXT"}

    strimzi = z.parse_broker("/brokers/ids/0", STRIMZI_BROKER)
    info = strimzi.broker_info(0)
    assert [e.name for e in info.endpoints] == ["CONTROLPLANE-9090", "REPLICATION-9091", "PLAIN-9092", "TLS-9093"]
    assert info.rack == "dc1" and strimzi.security_protocols()["TLS-9093"] == "SSL"


def test_broker_registration_is_written_as_kafka_writes_it() -> None:
    info = BrokerInfo(1, (ListenerSpec("PLAINTEXT", "localhost", 9091),))
    data = z.encode_broker(info, {"PLAINTEXT": "PLAINTEXT"}, timestamp_ms=1707276552023)
    assert data == KAFKA_BROKER
    assert z.parse_broker("/brokers/ids/1", data).broker_info(1) == info


def test_broker_registration_without_plaintext_and_with_rack() -> None:
    info = BrokerInfo(2, (ListenerSpec("INTERNAL", "10.0.0.2", 9093), ListenerSpec("EXTERNAL", "::1", 9094)),
                      rack="r1")
    data = z.encode_broker(info, {"INTERNAL": "SSL", "EXTERNAL": "SASL_SSL"}, timestamp_ms=5)
    doc = json.loads(data)
    # Kafka: no PLAINTEXT endpoint -> null host and port -1 at the top level.
    assert doc["host"] is None and doc["port"] == -1 and doc["rack"] == "r1"
    assert doc["endpoints"] == ["INTERNAL://10.0.0.2:9093", "EXTERNAL://[::1]:9094"]
    assert doc["listener_security_protocol_map"] == {"INTERNAL": "SSL", "EXTERNAL": "SASL_SSL"}
    assert z.parse_broker("/brokers/ids/2", data).broker_info(2) == info


def test_topic_from_kafka_and_back() -> None:
    topic = z.parse_topic("/brokers/topics/t", KAFKA_TOPIC)
    assert topic.replicas() == {0: (0,)}
    topic_id = topic.uuid()
    assert topic_id is not None and z.topic_id_to_string(topic_id) == "ZOLr9CLNQjSW70hyIHx6BQ"
    assert z.encode_topic(topic_id, topic.replicas()) == KAFKA_TOPIC

    old = z.parse_topic("/brokers/topics/u", KAFKA_TOPIC_V2)
    assert old.uuid() is None and old.replicas() == {0: (2, 0, 1), 1: (0, 1, 2), 2: (1, 2, 0)}


def test_topic_reassignment_maps() -> None:
    tid = uuid.uuid4()
    data = z.encode_topic(tid, {0: [1, 2, 3], 1: [2, 3, 1]}, adding={0: [3], 1: []}, removing={0: [4]})
    doc = json.loads(data)
    assert doc["adding_replicas"] == {"0": [3]} and doc["removing_replicas"] == {"0": [4]}
    parsed = z.parse_topic("/brokers/topics/t", data)
    assert parsed.uuid() == tid and parsed.adding() == {0: (3,)} and parsed.removing() == {0: (4,)}


def test_partition_state_controller_and_epoch() -> None:
    state = z.parse_partition_state("/brokers/topics/t/partitions/0/state", KAFKA_STATE)
    assert (state.leader, state.leader_epoch, state.isr, state.controller_epoch) == (0, 0, [0], 1)
    assert z.encode_partition_state(0, 0, [0], 1) == KAFKA_STATE

    assert z.parse_controller("/controller", KAFKA_CONTROLLER).brokerid == 0
    assert z.encode_controller(0, timestamp_ms=1685460739018) == KAFKA_CONTROLLER
    assert z.parse_controller("/controller", KAFKA_CONTROLLER_V1).brokerid == 3

    assert z.parse_controller_epoch("/controller_epoch", b"17") == 17
    assert z.encode_controller_epoch(17) == b"17"


def test_cluster_config_and_notifications() -> None:
    assert z.parse_cluster_id("/cluster/id", KAFKA_CLUSTER_ID) == "Sfr7YvlkRHSHrmSrwq9mug"
    assert z.encode_cluster_id("Sfr7YvlkRHSHrmSrwq9mug") == KAFKA_CLUSTER_ID

    assert z.parse_config("/config/topics/t", KAFKA_CONFIG) == {"retention.ms": "100000"}
    assert z.encode_config({"retention.ms": "100000"}) == KAFKA_CONFIG
    assert z.parse_config("/config/topics/t", b"") == {}

    assert z.parse_config_change("/config/changes/config_change_0000000001", KAFKA_CONFIG_CHANGE) == "topics/my-topic"
    assert z.encode_config_change("topics/my-topic") == KAFKA_CONFIG_CHANGE
    v1 = b'{"version":1,"entity_type":"brokers","entity_name":"<default>"}'
    assert z.parse_config_change("/config/changes/config_change_0000000002", v1) == "brokers/<default>"

    block = z.parse_producer_id_block("/latest_producer_id_block", KAFKA_PID_BLOCK)
    assert (block.broker, block.first, block.last) == (0, 0, 999)
    assert z.encode_producer_id_block(0, 0, 999) == KAFKA_PID_BLOCK

    assert z.parse_isr_change("/isr_change_notification/isr_change_0000000000", KAFKA_ISR_CHANGE) == [
        ("t", 0), ("u", 3)]
    assert z.encode_isr_change([("t", 0), ("u", 3)]) == KAFKA_ISR_CHANGE


GARBAGE = [
    (z.parse_broker, "/brokers/ids/1", b"not json", "Invalid JSON"),
    (z.parse_broker, "/brokers/ids/1", b"[1,2]", "should be an object"),
    (z.parse_broker, "/brokers/ids/1", b'{"version":5,"jmx_port":-1}', "needs endpoints"),
    (z.parse_broker, "/brokers/ids/1", b'{"version":5,"jmx_port":-1,"endpoints":["nonsense"]}', "nonsense"),
    (z.parse_broker, "/brokers/ids/1",
     b'{"version":5,"jmx_port":-1,"endpoints":["FOO://h:1"],"listener_security_protocol_map":{"BAR":"SSL"}}',
     "no security protocol"),
    (z.parse_broker, "/brokers/ids/1", b'{"version":"5","jmx_port":-1,"endpoints":["PLAINTEXT://h:1"]}', "version"),
    (z.parse_broker, "/brokers/ids/x", KAFKA_BROKER, "broker id 'x'"),
    (z.parse_topic, "/brokers/topics/t", b'{"version":3,"partitions":{"a":[1]}}', "'a'"),
    (z.parse_topic, "/brokers/topics/t", b'{"version":3,"partitions":{"0":[1,1]}}', "more than once"),
    (z.parse_topic, "/brokers/topics/t", b'{"version":3,"partitions":{"0":[]}}', "no replicas"),
    (z.parse_topic, "/brokers/topics/t", b'{"version":3,"partitions":{"0":[1]},"topic_id":"xyz"}', "topic id"),
    (z.parse_topic, "/brokers/topics/t", b'{"version":3}', "partitions"),
    (z.parse_partition_state, "/brokers/topics/t/partitions/0/state", b'{"leader":1}', "leader_epoch"),
    (z.parse_partition_state, "/brokers/topics/t/partitions/0/state",
     b'{"version":1,"leader":1,"leader_epoch":-3,"isr":[1],"controller_epoch":1}', "leader_epoch"),
    (z.parse_partition_state, "/brokers/topics/t/partitions/0/state",
     b'{"version":1,"leader":1,"leader_epoch":0,"isr":"1","controller_epoch":1}', "isr"),
    (z.parse_controller, "/controller", b'{"version":2,"brokerid":"0"}', "brokerid"),
    (z.parse_controller_epoch, "/controller_epoch", b"seven", "not a decimal"),
    (z.parse_controller_epoch, "/controller_epoch", b"\xff\xfe", "not ASCII"),
    (z.parse_controller_epoch, "/controller_epoch", b"99999999999", "outside"),
    (z.parse_cluster_id, "/cluster/id", b'{"version":"1"}', "id"),
    (z.parse_cluster_id, "/cluster/id", None, "no data"),
    (z.parse_config, "/config/topics/t", b'{"version":1,"config":{"retention.ms":100}}', "config.retention.ms"),
    (z.parse_config_change, "/config/changes/config_change_1", b'{"version":2,"entity_path":"nope"}', "nope"),
    (z.parse_producer_id_block, "/latest_producer_id_block",
     b'{"version":1,"broker":0,"block_start":"1000","block_end":"999"}', "before block_start"),
    (z.parse_producer_id_block, "/latest_producer_id_block",
     b'{"version":1,"broker":0,"block_start":0,"block_end":"999"}', "block_start"),
    (z.parse_isr_change, "/isr_change_notification/isr_change_1", b'{"version":1,"partitions":[{"topic":"t"}]}',
     "partition"),
]


@pytest.mark.parametrize(("parse", "path", "data", "says"), GARBAGE)
def test_garbage_names_the_znode_and_the_problem(parse, path, data, says) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(z.ZnodeError) as caught:
        parse(path, data)
    message = str(caught.value)
    assert message.startswith(f"znode {path}: "), message
    assert says in message, message
    assert caught.value.path == path


def test_size_is_bounded() -> None:
    big = b'{"version":1,"config":{"k":"' + b"x" * z.MAX_ZNODE_BYTES + b'"}}'
    with pytest.raises(z.ZnodeError, match=r"znode /config/topics/t: holds \d+ bytes, more than"):
        z.parse_config("/config/topics/t", big)


def test_paths() -> None:
    assert z.broker_path(3) == "/brokers/ids/3"
    assert z.topic_path("orders") == "/brokers/topics/orders"
    assert z.partition_state_path("orders", 7) == "/brokers/topics/orders/partitions/7/state"
    assert z.topic_config_path("orders") == "/config/topics/orders"
    assert z.broker_config_path(2) == "/config/brokers/2"
    assert z.broker_config_path(None) == "/config/brokers/<default>"
    assert z.delete_topic_path("orders") == "/admin/delete_topics/orders"
    assert z.config_change_prefix_path() == "/config/changes/config_change_"
    for bad in ("a/b", "..", ""):
        with pytest.raises(ValueError):
            z.topic_path(bad)
    with pytest.raises(ValueError):
        z.config_entity_path("groups", "x")
    # Kafka's PersistentZkPaths.
    assert set(z.PERSISTENT_PATHS) == {
        "/consumers", "/brokers/ids", "/brokers/topics", "/config/changes", "/admin/delete_topics",
        "/brokers/seqid", "/isr_change_notification", "/latest_producer_id_block", "/log_dir_event_notification",
        "/config/topics", "/config/clients", "/config/users", "/config/brokers", "/config/ips"}


def test_topic_ids_are_kafka_uuids() -> None:
    tid = uuid.uuid4()
    text = z.topic_id_to_string(tid)
    assert len(text) == 22 and "=" not in text
    assert z.topic_id_from_string(text) == tid
    with pytest.raises(ValueError):
        z.topic_id_from_string("!" * 22)
