"""The WAN emulator's Prometheus metrics, served at ``GET /metrics`` on its API as Toxiproxy
serves its own (Toxiproxy 2.5+ with ``-proxy-metrics``).

Per proxy, Toxiproxy's byte counters by their names, ``toxiproxy_proxy_received_bytes_total``
and ``toxiproxy_proxy_sent_bytes_total`` (labels direction, listener, proxy, upstream: bytes read
from a stream's source and written to its destination), and Causeway's own: whether the proxy is
enabled (a cut link is a disabled proxy), its active toxics and its connections. Per shared link
(deploy/wan/link.py): the declared bandwidth, the bytes through its bottleneck each way and the
bytes queued at its entrance (its queue depth). Rendered as text on the event loop when asked:
a topology has tens of proxies, and every figure is a counter the proxies keep anyway.
"""

from __future__ import annotations

from broker.metrics import escape_label_value
from deploy.wan.proxy import ProxyRegistry
from deploy.wan.toxics import STREAMS

__all__ = ["CONTENT_TYPE", "render_metrics"]

#: Prometheus's text exposition format.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_FAMILIES = (
    ("toxiproxy_proxy_received_bytes_total", "counter", "Bytes a proxy read from each stream's source."),
    ("toxiproxy_proxy_sent_bytes_total", "counter", "Bytes a proxy wrote to each stream's destination."),
    ("causeway_wan_proxy_enabled", "gauge", "1 while the proxy forwards; 0 when disabled (its link is cut)."),
    ("causeway_wan_proxy_toxics", "gauge", "Toxics active on the proxy (faults injected beside its link's shaping)."),
    ("causeway_wan_proxy_connections", "gauge", "Client connections the proxy forwards now."),
    ("causeway_wan_link_bandwidth_bytes", "gauge", "The link's declared bandwidth each way, bytes/s (0: unlimited)."),
    ("causeway_wan_link_sent_bytes_total", "counter", "Bytes through the link's bottleneck, by direction."),
    ("causeway_wan_link_queued_bytes", "gauge", "Bytes waiting at the link's entrance for its bottleneck, by "
                                                "direction (its queue depth)."),
)


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{escape_label_value(v)}"' for k, v in sorted(labels.items())) + "}"


def render_metrics(registry: ProxyRegistry) -> str:
    """Every proxy's and link's figures now, in the text exposition format (call on the loop)."""
    lines: dict[str, list[str]] = {name: [] for name, _, _ in _FAMILIES}
    queued: dict[tuple[str, str], int] = {}  # (link, "a->b") -> bytes
    for name, proxy in sorted(registry.all().items()):
        ends = {"listener": proxy.listen, "proxy": name, "upstream": proxy.upstream}
        for stream in STREAMS:
            labels = _labels(direction=stream, **ends)
            lines["toxiproxy_proxy_received_bytes_total"].append(f"{labels} {proxy.received[stream]}")
            lines["toxiproxy_proxy_sent_bytes_total"].append(f"{labels} {proxy.sent[stream]}")
            if proxy.link is not None:
                client, server = proxy.link.client_side, proxy.link.upstream
                way = f"{client}->{server}" if stream == "upstream" else f"{server}->{client}"
                key = (proxy.link.link.spec.name, way)
                queued[key] = queued.get(key, 0) + proxy.queued(stream)
        lines["causeway_wan_proxy_enabled"].append(f"{_labels(proxy=name)} {int(proxy.enabled)}")
        lines["causeway_wan_proxy_toxics"].append(f"{_labels(proxy=name)} {len(proxy.toxics())}")
        lines["causeway_wan_proxy_connections"].append(f"{_labels(proxy=name)} {proxy.connections}")
    for name, link in sorted(registry.links().items()):
        lines["causeway_wan_link_bandwidth_bytes"].append(f"{_labels(link=name)} {link.spec.bandwidth}")
        for direction in link.directions.values():
            way = f"{direction.source}->{direction.dest}"
            lines["causeway_wan_link_sent_bytes_total"].append(f"{_labels(link=name, direction=way)} {direction.sent}")
            lines["causeway_wan_link_queued_bytes"].append(
                f"{_labels(link=name, direction=way)} {queued.get((name, way), 0)}")
    out: list[str] = []
    for name, kind, help_text in _FAMILIES:
        family = name.removesuffix("_total") if kind == "counter" else name
        out += [f"# HELP {family} {help_text}", f"# TYPE {family} {kind}", *(f"{name}{line}" for line in lines[name])]
    return "\n".join(out) + "\n"
