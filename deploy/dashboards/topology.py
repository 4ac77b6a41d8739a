"""The topology dashboard: one line per mirror and per cluster of a topology, side by side. Mirrors
are told apart by the `mirror` label and clusters by the `cluster` label that the scrape config
gives each target (the launcher's Prometheus sets them from the topology's names; another
Prometheus can set them the same way), and by `instance` when those labels are missing."""

from __future__ import annotations

from grafanalib.core import Dashboard

from deploy.dashboards.panels import Row, dashboard, rate, timeseries

__all__ = ["UID", "build"]

UID = "causeway-topology"
PER_MIRROR = "mirror, instance"
PER_CLUSTER = "cluster"
MIRROR_LEGEND = "{{mirror}} {{instance}}"


def build() -> Dashboard:
    mirrors = Row("Mirrors", [
        timeseries("Lag per mirror (seconds)", "Each mirror's largest time lag over its partitions: what a "
                   "failover to its target now would lose.",
                   [(f"max by ({PER_MIRROR}) (causeway_mirror_partition_lag_seconds)", MIRROR_LEGEND)], unit="s"),
        timeseries("Lag per mirror (records)", "Records at each mirror's source not yet at its target.",
                   [(f"sum by ({PER_MIRROR}) (causeway_mirror_partition_lag_records)", MIRROR_LEGEND)]),
        timeseries("Bytes copied per mirror", "Record batch bytes each mirror writes to its target per second: "
                   "what it carries across the link between the two datacenters.",
                   [(f"sum by ({PER_MIRROR}) "
                     f"({rate('kafka_connect_mirror_source_connector_byte_count')})", MIRROR_LEGEND)],
                   unit="Bps"),
        timeseries("Parked partitions per mirror", "Partitions each mirror has stopped on a batch the target "
                   "will not take.",
                   [(f'sum by ({PER_MIRROR}) (causeway_mirror_partitions{{state="parked"}})', MIRROR_LEGEND)]),
    ])
    clusters = Row("Clusters", [
        timeseries("Messages in per cluster", "Records appended per second in each cluster, mirrors' writes "
                   "included.",
                   [(f"sum by ({PER_CLUSTER}) ({rate('kafka_server_brokertopicmetrics_messagesin_total')})",
                     "{{cluster}}")], unit="rps"),
        timeseries("Under-replicated partitions per cluster", "Partitions with a short ISR, and with no live "
                   "leader, in each cluster.",
                   [(f"sum by ({PER_CLUSTER}) (kafka_server_replicamanager_underreplicatedpartitions)",
                     "under-replicated {{cluster}}"),
                    (f"sum by ({PER_CLUSTER}) (kafka_controller_kafkacontroller_offlinepartitionscount)",
                     "offline {{cluster}}")]),
        timeseries("Brokers per cluster", "Brokers whose metrics Prometheus holds now: a broker that stops "
                   "answering scrapes drops out.",
                   [(f"count by ({PER_CLUSTER}) (kafka_server_replicamanager_partitioncount)",
                     "{{cluster}}")]),
        timeseries("Active controllers per cluster", "1 in each healthy cluster.",
                   [(f"sum by ({PER_CLUSTER}) (kafka_controller_kafkacontroller_activecontrollercount)",
                     "{{cluster}}")]),
    ])
    return dashboard(UID, "Causeway topology", "Every mirror and cluster of a topology: lag per mirror, what "
                     "each carries, and each cluster's health.", [], [mirrors, clusters])
