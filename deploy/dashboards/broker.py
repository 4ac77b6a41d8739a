"""The broker dashboard: a cluster's health at a glance, then traffic per topic, requests per API,
replication, logs and consumer groups, from the metrics of docs/reference/metrics.md (named as
the JMX exporter names Kafka's, so most panels read Apache Kafka's brokers too)."""

from __future__ import annotations

from grafanalib.core import Dashboard

from deploy.dashboards.panels import Row, dashboard, query_variable, rate, stat, timeseries

__all__ = ["UID", "build"]

UID = "causeway-broker"
BROKERS = 'instance=~"$instance"'  # the brokers chosen in the dashboard's variables
TOPICS = BROKERS + ',topic=~"$topic"'  # ... and the topics
APIS = BROKERS + ',request=~"$request"'  # ... and the APIs
GROUPS = TOPICS + ',consumergroup=~"$consumergroup"'  # ... and the groups


def _gauge(metric: str, by: str = "", matchers: str = BROKERS) -> str:
    return f"sum{f' by ({by})' if by else ''} ({metric}{{{matchers}}})"


def _rate(metric: str, by: str = "", matchers: str = BROKERS) -> str:
    return f"sum{f' by ({by})' if by else ''} ({rate(metric, matchers)})"


def _p99(histogram: str) -> str:
    return f"histogram_quantile(0.99, {_rate(histogram + '_bucket', 'request, le', APIS)})"


def build() -> Dashboard:
    health = Row("Health", [
        stat("Under-replicated partitions", "Partitions whose ISR is smaller than their replicas, over the brokers "
             "chosen (each counts those it leads). One more failure can lose acknowledged writes.",
             _gauge("kafka_server_replicamanager_underreplicatedpartitions")),
        stat("Under min ISR", "Partitions whose ISR is below min.insync.replicas: acks=all producers are refused.",
             _gauge("kafka_server_replicamanager_underminisrpartitioncount")),
        stat("Offline partitions", "Partitions with no live leader (the active controller counts them).",
             _gauge("kafka_controller_kafkacontroller_offlinepartitionscount")),
        stat("Active controllers", "1 when one broker is the controller; 0 (none) or 2 and more (a split) is wrong.",
             _gauge("kafka_controller_kafkacontroller_activecontrollercount"), red_from=2),
    ])
    traffic = Row("Traffic per topic", [
        timeseries("Messages in", "Records appended as leader per second, from producers and link-mode mirrors.",
                   [(_rate("kafka_server_brokertopicmetrics_messagesin_total", "topic", TOPICS), "{{topic}}")],
                   unit="rps"),
        timeseries("Bytes in", "Record batch bytes appended as leader per second.",
                   [(_rate("kafka_server_brokertopicmetrics_bytesin_total", "topic", TOPICS), "{{topic}}")],
                   unit="Bps"),
        timeseries("Bytes out", "Record bytes per second in fetch answers to consumers and mirrors.",
                   [(_rate("kafka_server_brokertopicmetrics_bytesout_total", "topic", TOPICS), "{{topic}}")],
                   unit="Bps"),
        timeseries("Replication bytes out", "Record bytes per second in fetch answers to follower replicas.",
                   [(_rate("kafka_server_brokertopicmetrics_replicationbytesout_total", "topic", TOPICS),
                     "{{topic}}")], unit="Bps"),
    ])
    requests = Row("Requests per API", [
        timeseries("Request rate", "Requests answered per second, by Kafka's API name.",
                   [(_rate("kafka_network_requestmetrics_requests_total", "request", APIS), "{{request}}")],
                   unit="reqps", width=8),
        timeseries("Total time p99", "99th percentile of the ms from a request's last byte read to its answer "
                   "handed to the socket; a fetch's long poll (fetch.max.wait.ms) is part of it.",
                   [(_p99("kafka_network_requestmetrics_totaltimems"), "{{request}}")], unit="ms", width=8),
        timeseries("Queue time p99", "99th percentile of the ms a request waited behind those its client "
                   "pipelined before it on the connection.",
                   [(_p99("kafka_network_requestmetrics_requestqueuetimems"), "{{request}}")], unit="ms", width=8),
    ])
    replication = Row("Replication", [
        timeseries("Under-replicated partitions", "Per broker: the partitions it leads whose ISR is short, and "
                   "those whose ISR is below min.insync.replicas.",
                   [(_gauge("kafka_server_replicamanager_underreplicatedpartitions", "instance"), "{{instance}}"),
                    (_gauge("kafka_server_replicamanager_underminisrpartitioncount", "instance"),
                     "under min ISR {{instance}}")], width=8),
        timeseries("ISR shrinks and expands", "ISR changes per second for the partitions each broker leads: "
                   "followers falling out and catching up again.",
                   [(_rate("kafka_server_replicamanager_isrshrinks_total", "instance"), "shrinks {{instance}}"),
                    (_rate("kafka_server_replicamanager_isrexpands_total", "instance"), "expands {{instance}}")],
                   unit="ops", width=8),
        timeseries("Leader elections", "Partition leaders the controller moved per second, and unclean "
                   "elections (leaders from outside the ISR: acknowledged records may be lost).",
                   [(_rate("kafka_controller_controllerstats_leaderelectionrateandtimems_count"), "elections"),
                    (_rate("kafka_controller_controllerstats_uncleanleaderelections_total"), "unclean")],
                   unit="ops", width=8),
        timeseries("Partitions and leaders", "Partitions with a replica on each broker, and those it leads.",
                   [(_gauge("kafka_server_replicamanager_partitioncount", "instance"), "partitions {{instance}}"),
                    (_gauge("kafka_server_replicamanager_leadercount", "instance"), "leaders {{instance}}")]),
        timeseries("Preferred replica imbalance", "Partitions not led by their preferred (first) replica.",
                   [(_gauge("kafka_controller_kafkacontroller_preferredreplicaimbalancecount"), "imbalance")]),
    ])
    logs = Row("Logs", [
        timeseries("Log end offset", "Each partition's log end offset (the highest over its replicas): its "
                   "slope is the partition's write rate.",
                   [(f"max by (topic, partition) (kafka_log_log_logendoffset{{{TOPICS}}})",
                     "{{topic}}-{{partition}}")]),
        timeseries("Log size", "Bytes in each topic's segments, over every replica on the brokers chosen.",
                   [(_gauge("kafka_log_log_size", "topic", TOPICS), "{{topic}}")], unit="bytes"),
    ])
    groups = Row("Consumer groups", [
        timeseries("Consumer lag", "Per group and topic: the partitions' high watermarks less the group's "
                   "committed offsets, as Kafka's lag exporters compute it.",
                   [(_gauge("kafka_consumergroup_lag_sum", "consumergroup, topic", GROUPS),
                     "{{consumergroup}} {{topic}}")], width=16),
        timeseries("Group members", "Members of each group now.",
                   [(_gauge("kafka_consumergroup_members", "consumergroup",
                            BROKERS + ',consumergroup=~"$consumergroup"'), "{{consumergroup}}")], width=8),
    ])
    variables = [
        query_variable("instance", "Broker", "label_values(kafka_server_replicamanager_partitioncount, instance)"),
        query_variable("topic", "Topic", "label_values(kafka_log_log_logendoffset, topic)"),
        query_variable("request", "API", "label_values(kafka_network_requestmetrics_requests_total, request)"),
        query_variable("consumergroup", "Group", "label_values(kafka_consumergroup_members, consumergroup)"),
    ]
    return dashboard(UID, "Causeway brokers", "Kafka-named broker metrics: health, traffic, requests, replication, "
                     "logs and consumer groups.", variables, [health, traffic, requests, replication, logs, groups])
