"""The topology dashboard: one line per mirror, per WAN link and per cluster of a topology, side by
side. Mirrors are told apart by the `mirror` label and clusters by the `cluster` label that the
scrape config gives each target (the launcher's Prometheus sets them from the topology's names;
another Prometheus can set them the same way), and by `instance` when those labels are missing.
Links are the WAN emulator's (deploy/wan/metrics.py), named by their `link` label and each way
by `direction` ("east->west")."""

from __future__ import annotations

from grafanalib.core import Dashboard

from deploy.dashboards.panels import Row, dashboard, rate, timeseries

__all__ = ["UID", "build"]

UID = "causeway-topology"
PER_MIRROR = "mirror, instance"
PER_CLUSTER = "cluster"
PER_LINK_WAY = "link, direction"
MIRROR_LEGEND = "{{mirror}} {{instance}}"
LINK_WAY_LEGEND = "{{link}} {{direction}}"
#: Each link's declared bandwidth each way, bytes/s; a link declared without one (0: unlimited)
#: has no series here, so it drops out of a ratio instead of dividing by 0.
DECLARED_BANDWIDTH = "max by (link) (causeway_wan_link_bandwidth_bytes > 0)"
LINK_BYTES_PER_S = f"sum by ({PER_LINK_WAY}) ({rate('causeway_wan_link_sent_bytes_total')})"


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
    links = Row("Links", [
        timeseries("Link use", "Bytes per second through each link's bottleneck, each way, as a fraction of "
                   "its declared bandwidth: near 100% the link is full and mirrors behind it fall behind. "
                   "Links declared without a bandwidth (unlimited) are not shown.",
                   [(f"{LINK_BYTES_PER_S} / on (link) group_left {DECLARED_BANDWIDTH}", LINK_WAY_LEGEND)],
                   unit="percentunit"),
        timeseries("Link throughput", "Bytes per second through each link's bottleneck, each way, and the "
                   "bandwidth each link declares.",
                   [(LINK_BYTES_PER_S, LINK_WAY_LEGEND), (DECLARED_BANDWIDTH, "{{link}} declared")],
                   unit="Bps"),
        timeseries("Bytes queued per link", "Bytes waiting at each link's entrance for its bottleneck, each "
                   "way (its queue depth): a queue that keeps growing is more traffic than the link carries.",
                   [(f"sum by ({PER_LINK_WAY}) (causeway_wan_link_queued_bytes)", LINK_WAY_LEGEND)],
                   unit="bytes"),
        timeseries("Proxies cut, toxics active", "Link proxies disabled now (a cut link: mirrors reading "
                   "through it copy nothing), and faults injected on top of the links' shaping (latency, "
                   "timeouts, resets). The emulator's GET /proxies names them.",
                   [("count(causeway_wan_proxy_enabled == 0) or vector(0)", "proxies cut"),
                    ("sum(causeway_wan_proxy_toxics) or vector(0)", "toxics active")]),
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
    return dashboard(UID, "Causeway topology", "Every mirror, WAN link and cluster of a topology: lag per "
                     "mirror and what each carries, link use against declared bandwidth, and each cluster's "
                     "health.", [], [mirrors, links, clusters])
