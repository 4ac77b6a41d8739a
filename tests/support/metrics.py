"""A daemon's Prometheus metrics, as a test reads them, through prometheus_client's own text
parser (what a Prometheus server reads, read the same way). A broker started with
``causeway.metrics.listener=127.0.0.1:0`` logs where it serves them.

    values = scrape(metrics_url(broker))
    values['kafka_server_replicamanager_isrshrinks_total']
    values['kafka_log_log_logendoffset{partition="0",topic="orders"}']
"""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from deploy.broker_process import BrokerProcess
from tests.support.polling import wait_until

__all__ = ["logged_metrics_url", "metrics_url", "sample_names", "scrape", "scrape_text"]


def metrics_url(broker: BrokerProcess) -> str:
    """The metrics URL of the broker's latest start (its log keeps every start's)."""
    urls = re.findall(r"metrics served on (http://\S+)", broker.log_path.read_text(errors="replace"))
    assert urls, f"no metrics endpoint in {broker.log_path}"
    return urls[-1]


def logged_metrics_url(log: Path, timeout_s: float = 30) -> str:
    """The first metrics URL a daemon's log names (a mirror's: `metrics served on URL`), once it does."""
    found: list[str] = []

    def served() -> bool:
        found.extend(re.findall(r"metrics served on (http://\S+)", log.read_text(errors="replace")))
        return bool(found)

    wait_until(served, what=f"a metrics endpoint in {log}", timeout_s=timeout_s)
    return found[0]


def scrape_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - a loopback test server
        return str(response.read().decode())


def scrape(url: str) -> dict[str, float]:
    """Every sample, by its name with its labels as prometheus_client prints them (sorted by
    label name): ``kafka_log_log_size{partition="0",topic="orders"}``."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(scrape_text(url)):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            out[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return out


def sample_names(url: str) -> set[str]:
    """The name of every sample served (a histogram's `_bucket`, `_sum` and `_count` apart, a
    counter's with `_total`): a family declared without samples names nothing."""
    return {key.split("{", 1)[0] for key in scrape(url)}
