"""The mirror dashboard: how far behind each mirror is (records and seconds), what it copies
(records and bytes per second), MirrorMaker 2's replication latency, checkpoint latency (mm2
mode), restarts and parked partitions, from the metrics of docs/reference/metrics.md (MM2's
named as Strimzi's JMX exporter rules name them)."""

from __future__ import annotations

from grafanalib.core import Dashboard

from deploy.dashboards.panels import Row, dashboard, query_variable, rate, stat, timeseries

__all__ = ["UID", "build"]

UID = "causeway-mirror"
MIRRORS = 'instance=~"$instance",target=~"$target"'  # the mirrors chosen in the dashboard's variables
TOPICS = MIRRORS + ',topic=~"$topic"'  # ... and the topics (named as at the target)
SOURCE = "kafka_connect_mirror_source_connector_"
CHECKPOINT = "kafka_connect_mirror_checkpoint_connector_checkpoint_latency_ms"
#: A restart is a new process start time; only the processes that serve mirror metrics count.
RESTARTS = ('changes(process_start_time_seconds{instance=~"$instance"}[1h]) '
            "and on (instance) group by (instance) (causeway_mirror_partitions)")


def build() -> Dashboard:
    health = Row("Health", [
        stat("Lag (seconds)", "The largest time lag over the partitions chosen: what a failover now would lose.",
             f"max(causeway_mirror_partition_lag_seconds{{{TOPICS}}})", unit="s", red_from=60),
        stat("Lag (records)", "Records at the sources not yet at the targets, over the partitions chosen.",
             f"sum(causeway_mirror_partition_lag_records{{{TOPICS}}})", red_from=100000),
        stat("Parked partitions", "Partitions stopped on a batch the target will not take (the mirror's status "
             "says why): nothing behind it in them is copied.",
             f'sum(causeway_mirror_partitions{{{MIRRORS},state="parked"}})'),
        stat("Restarts (1 h)", "New process start times of the mirrors in the last hour: the supervisor "
             "restarted them.", f"sum({RESTARTS})"),
    ])
    throughput = Row("Throughput", [
        timeseries("Records copied", "Records written to the target per second, per topic.",
                   [(f"sum by (target, topic) ({rate(SOURCE + 'record_count', TOPICS)})", "{{target}} {{topic}}")],
                   unit="rps"),
        timeseries("Bytes copied", "Record batch bytes written to the target per second, per topic.",
                   [(f"sum by (target, topic) ({rate(SOURCE + 'byte_count', TOPICS)})", "{{target}} {{topic}}")],
                   unit="Bps"),
    ])
    lag = Row("Lag per partition", [
        timeseries("Lag in records", "The source's log end (as last fetched) less the mirrored position.",
                   [(f"sum by (target, topic, partition) (causeway_mirror_partition_lag_records{{{TOPICS}}})",
                     "{{target}} {{topic}}-{{partition}}")]),
        timeseries("Lag in seconds", "How long ago the source's log end passed the mirrored position; "
                   "0 when caught up.",
                   [(f"max by (target, topic, partition) (causeway_mirror_partition_lag_seconds{{{TOPICS}}})",
                     "{{target}} {{topic}}-{{partition}}")], unit="s"),
    ])
    latency = Row("Latency", [
        timeseries("Replication latency", "MM2's replication-latency-ms: ms from the newest record timestamp of "
                   "a batch to its write acknowledged, largest and average per batch over the last 30 s.",
                   [(f"max by (target, topic) ({SOURCE}replication_latency_ms_max{{{TOPICS}}})",
                     "max {{target}} {{topic}}"),
                    (f"avg by (target, topic) ({SOURCE}replication_latency_ms_avg{{{TOPICS}}})",
                     "avg {{target}} {{topic}}")], unit="ms"),
        timeseries("Checkpoint latency", "mm2 mode: ms from a checkpoint pass's start to a group's checkpoint "
                   "written at the target, largest and average over the last 30 s.",
                   [(f"max by (target, group) ({CHECKPOINT}_max{{{TOPICS}}})", "max {{target}} {{group}}"),
                    (f"avg by (target, group) ({CHECKPOINT}_avg{{{TOPICS}}})", "avg {{target}} {{group}}")],
                   unit="ms"),
    ])
    trouble = Row("Restarts and parked partitions", [
        timeseries("Restarts", "Process restarts of each mirror in the last hour.",
                   [(RESTARTS, "{{instance}}")]),
        timeseries("Parked partitions", "1 for each partition parked on a batch the target will not take.",
                   [(f"max by (target, topic, partition) (causeway_mirror_partition_parked{{{TOPICS}}}) > 0",
                     "{{target}} {{topic}}-{{partition}}")]),
    ])
    variables = [
        query_variable("instance", "Mirror", "label_values(causeway_mirror_partitions, instance)"),
        query_variable("target", "Target", "label_values(causeway_mirror_partitions, target)"),
        query_variable("topic", "Topic", "label_values(causeway_mirror_partition_lag_records, topic)"),
    ]
    return dashboard(UID, "Causeway mirrors", "MirrorMaker 2's metrics and Causeway's lag: how far behind, how "
                     "fast, and what is stuck.", variables, [health, throughput, lag, latency, trouble])
