"""`monitoring: prometheus` (or `causeway up --prometheus`): a real Prometheus beside the topology.

The launcher gives every broker and mirror a metrics listener of its own (allocated with the
other ports, so a restarted process keeps its address), writes a scrape config listing all of
them and its WAN emulator (whose API serves /metrics, deploy/wan/metrics.py), with labels
saying which cluster, broker, datacenter or mirror each is, and starts
`causeway prometheus` (deploy/prometheus_process.py) under the supervisor like its other
children, on a free port, with its data under `<state dir>/prometheus/`. The alerting rules a DR
owner needs ship beside this module (`prometheus-alerts.yml`); the config loads them as written
into `<state dir>/prometheus/alerts.yml` with each mirror's lag threshold from the topology
(deploy/launcher/alert_rules.py). The manual (docs/operations/monitoring.md) says what to do
about each alert.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from broker.atomic_file import write_atomically
from deploy.launcher.alert_rules import ALERT_RULES, rules_text
from deploy.prometheus_process import READY_PREFIX
from deploy.supervisor import ProcessSpec, Supervised, supervise
from topology.schema import DEFAULT_LAG_ALERT_SECONDS

__all__ = ["ALERT_RULES", "BROKER_JOB", "LAUNCHER_JOB", "MIRROR_JOB", "MONITORING", "READY", "SCRAPE_INTERVAL_S",
           "WAN_JOB", "BrokerTarget", "MirrorTarget", "PrometheusState", "scrape_config", "start_prometheus"]

#: The values of a topology's `monitoring:` key.
MONITORING = ("none", "prometheus")
READY = re.compile(rf"^{re.escape(READY_PREFIX)}(\S+)$")
#: How often Prometheus scrapes and evaluates the rules: a local topology is small (its scrape
#: cost is in docs/reference/metrics.md), and a drill wants lag seen within seconds.
SCRAPE_INTERVAL_S = 5
#: The scrape jobs: the alert rules select targets by them (`up{job="causeway-mirror"}`).
BROKER_JOB = "causeway-broker"
MIRROR_JOB = "causeway-mirror"
WAN_JOB = "causeway-wan"
LAUNCHER_JOB = "causeway-launcher"


@dataclass(frozen=True)
class BrokerTarget:
    cluster: str
    datacenter: str
    broker_id: int
    address: str  # HOST:PORT of its causeway.metrics.listener


@dataclass(frozen=True)
class MirrorTarget:
    mirror: str
    source: str
    target: str
    datacenter: str  # where it runs: the target's
    address: str  # HOST:PORT of its metrics.listener
    lag_alert_seconds: float = DEFAULT_LAG_ALERT_SECONDS  # CausewayMirrorLagHigh's threshold for it


def scrape_config(topology: str, brokers: list[BrokerTarget], mirrors: list[MirrorTarget], wan: str | None = None,
                  rules: Path = ALERT_RULES, launcher: str | None = None) -> dict[str, Any]:
    """Prometheus's config for a topology: one job per kind of daemon, one static target per
    process, labelled with what the topology calls it; the WAN emulator's API (HOST:PORT, which
    serves /metrics as Toxiproxy does) when `wan` is given; the launcher's own metrics (HOST:PORT:
    its children up and restarted, deploy/launcher/metrics.py) when `launcher` is given; the
    alert rules loaded from `rules`.

    Label names avoid those the daemons' own series carry (a mirror's `source` and `target` are
    cluster aliases on every series already): `cluster`, `datacenter`, `broker`, `mirror`.
    """
    return {
        "global": {"scrape_interval": f"{SCRAPE_INTERVAL_S}s", "evaluation_interval": f"{SCRAPE_INTERVAL_S}s",
                   "external_labels": {"topology": topology}},
        "rule_files": [str(rules.resolve())],
        "scrape_configs": [
            {"job_name": BROKER_JOB,
             "static_configs": [{"targets": [b.address], "labels": {"cluster": b.cluster, "datacenter": b.datacenter,
                                                                    "broker": str(b.broker_id)}}
                                for b in brokers]},
            {"job_name": MIRROR_JOB,
             "static_configs": [{"targets": [m.address], "labels": {"mirror": m.mirror, "datacenter": m.datacenter,
                                                                    "source_cluster": m.source,
                                                                    "target_cluster": m.target}}
                                for m in mirrors]},
            *([{"job_name": WAN_JOB, "static_configs": [{"targets": [wan]}]}] if wan else []),
            *([{"job_name": LAUNCHER_JOB, "static_configs": [{"targets": [launcher]}]}] if launcher else []),
        ],
    }


@dataclass
class PrometheusState:
    url: str  # http://HOST:PORT
    config_file: Path
    data_dir: Path
    process: Supervised


async def start_prometheus(state_dir: Path, topology: str, brokers: list[BrokerTarget], mirrors: list[MirrorTarget],
                           wan: str | None, listen: str, nursery: trio.Nursery, env: dict[str, str],
                           on_change: Any = None, launcher: str | None = None) -> PrometheusState:
    """Write the scrape config and the alerting rules (each mirror's lag threshold in them) under
    `<state_dir>/prometheus/` and start `causeway prometheus` on
    `listen` in `nursery`, supervised (restarted with backoff should it die); returns once it
    answers. `env` marks it as the state dir's (deploy/process_identity.py). Raises
    deploy.supervisor.StartFailed with its log's tail (a port taken, the package missing)."""
    directory = state_dir / "prometheus"
    config_file = directory / "prometheus.yml"
    rules_file = directory / "alerts.yml"
    data_dir = directory / "data"
    rules = rules_text({m.mirror: m.lag_alert_seconds for m in mirrors})
    await trio.to_thread.run_sync(_write, rules_file, rules)
    config = scrape_config(topology, brokers, mirrors, wan, rules=rules_file, launcher=launcher)
    text = json.dumps(config, indent=2) + "\n"  # JSON is YAML
    await trio.to_thread.run_sync(_write, config_file, text)
    argv = [sys.executable, "-m", "deploy.cli", "prometheus", "--config-file", str(config_file.resolve()),
            "--data-dir", str(data_dir.resolve()), "--listen", listen,
            "--log", str((state_dir / "logs" / "prometheus-server.log").resolve())]
    spec = ProcessSpec("prometheus", argv, state_dir / "logs" / "prometheus.log", READY, env=env)
    process = Supervised(spec, on_change=on_change)
    ready: str = await nursery.start(supervise, process)
    match = READY.match(ready)
    assert match is not None  # the supervisor matched this line already
    return PrometheusState(match.group(1), config_file, data_dir, process)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, text)
