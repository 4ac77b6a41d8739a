"""A broker's Prometheus metrics, as a test reads them: started with
``causeway.metrics.listener=127.0.0.1:0``, the broker logs where it serves them.

    values = scrape(metrics_url(broker))
    values['causeway_isr_shrinks_total']
"""

from __future__ import annotations

import re
import urllib.request

from deploy.broker_process import BrokerProcess

__all__ = ["metrics_url", "scrape"]


def metrics_url(broker: BrokerProcess) -> str:
    """The metrics URL of the broker's latest start (its log keeps every start's)."""
    urls = re.findall(r"metrics served on (http://\S+)", broker.log_path.read_text(errors="replace"))
    assert urls, f"no metrics endpoint in {broker.log_path}"
    return urls[-1]


def scrape(url: str) -> dict[str, float]:
    """Every sample, by its name with labels as Prometheus prints them."""
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - a loopback test server
        text = response.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out
