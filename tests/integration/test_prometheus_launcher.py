"""`causeway up --prometheus`: a real Prometheus (Debian's package) scrapes the topology's brokers and
mirror; their series and Causeway's alerting rules are read back from its HTTP API, and `down`
leaves nothing running."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from deploy.launcher.control import alive
from deploy.launcher.launch import free_port
from deploy.process_identity import find_marked
from deploy.wan.client import WanClient
from tests.support.consume import read_topic
from tests.support.polling import wait_until
from tests.support.produce import produce_spread
from tests.unit.topology.files import GOOD  # two standalone clusters, a WAN link, a mirror

REPO = Path(__file__).resolve().parents[2]



def causeway(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "deploy.cli", *args], capture_output=True, text=True,
                          timeout=180, cwd=REPO)


def api(url: str, path: str, **params: str) -> Any:
    """A Prometheus HTTP API answer's `data` (its status must be success)."""
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    with urllib.request.urlopen(f"{url}{path}{query}", timeout=10) as answer:
        doc = json.load(answer)
    assert doc["status"] == "success", doc
    return doc["data"]


def series(url: str, query: str) -> dict[tuple[tuple[str, str], ...], float]:
    """An instant query's result: labels (sorted) -> value."""
    data = api(url, "/api/v1/query", query=query)
    return {tuple(sorted(s["metric"].items())): float(s["value"][1]) for s in data["result"]}


def test_up_with_prometheus_scrapes_brokers_and_mirror_then_down_stops_it(tmp_path: Path) -> None:
    topology = tmp_path / "watched.yaml"
    # e2w's RPO as the topology gives it: the alert Prometheus loads compares with 45 s, not 60.
    topology.write_text(GOOD.replace("e2w: {source: east, target: west}",
                                     "e2w: {source: east, target: west, lag_alert_seconds: 45}"))
    state = tmp_path / "state"
    up = causeway("up", str(topology), "-d", "--prometheus", "--state-dir", str(state))
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        doc = json.loads(causeway("status", "--json", "--state-dir", str(state)).stdout)
        prometheus = doc["prometheus"]
        assert prometheus["healthy"], prometheus
        url = prometheus["url"]
        assert f"Prometheus at {url}" in up.stdout
        config = json.loads(Path(prometheus["config"]).read_text())  # JSON is YAML
        targets = {job["job_name"]: [t for c in job["static_configs"] for t in c["targets"]]
                   for job in config["scrape_configs"]}
        assert len(targets["causeway-broker"]) == 2 and len(targets["causeway-mirror"]) == 1
        assert targets["causeway-wan"] == [doc["wan"]["api"]]
        assert targets["causeway-launcher"] == [doc["metrics"]]
        assert f"launcher metrics (every process up, restarts): http://{doc['metrics']}/metrics" in up.stdout

        # Every target is up: Prometheus scrapes every broker, the mirror, the WAN emulator and
        # the launcher.
        def all_up() -> bool:
            up_series = series(url, "up")
            return len(up_series) == 5 and all(v == 1.0 for v in up_series.values())

        wait_until(all_up, what="Prometheus to scrape both brokers, the mirror, the WAN emulator and the launcher",
                   timeout_s=60)

        # The launcher's view of its children, through Prometheus: each process up, by kind
        # (Prometheus itself among them), none restarted.
        def children_up() -> bool:
            found = series(url, "sum by (kind) (causeway_launcher_process_up)")
            return {dict(labels)["kind"]: v for labels, v in found.items()} == \
                {"wan": 1.0, "broker": 2.0, "mirror": 1.0, "prometheus": 1.0}

        wait_until(children_up, what="the launcher's process_up series in Prometheus", timeout_s=60)
        assert list(series(url, "sum(causeway_launcher_process_restarts_total)").values()) == [0.0]

        sent = produce_spread(doc["clusters"]["east"]["bootstrap"], "orders", 60)
        assert read_topic(doc["clusters"]["west"]["bootstrap"], "east.orders", 60) == sent

        # The broker's records-in counter, as Prometheus scraped it, labelled with its cluster.
        def broker_counted() -> bool:
            found = series(url, 'sum(kafka_server_brokertopicmetrics_messagesin_total{cluster="east",topic="orders"})')
            return list(found.values()) == [60.0]

        wait_until(broker_counted, what="east's records-in counter at 60 in Prometheus", timeout_s=60)

        # The mirror's lag series: one per partition of the copy, each back to 0 once caught up,
        # and the records it wrote counted.
        def mirror_caught_up() -> bool:
            lag = series(url, 'causeway_mirror_partition_lag_seconds{mirror="e2w",topic="east.orders"}')
            written = series(url, 'sum(kafka_connect_mirror_source_connector_record_count{mirror="e2w"})')
            return len(lag) == 3 and all(v == 0.0 for v in lag.values()) and list(written.values()) == [60.0]

        wait_until(mirror_caught_up, what="the mirror's lag series at 0 and its 60 records in Prometheus",
                   timeout_s=60)
        lag_records = series(url, 'sum(causeway_mirror_partition_lag_records{mirror="e2w"})')
        assert list(lag_records.values()) == [0.0]

        # The mirror's fetches crossed the link: the emulator's byte counters, as scraped.
        def link_counted() -> bool:
            found = series(url, 'sum(toxiproxy_proxy_sent_bytes_total{proxy="east-to-west",direction="downstream"})')
            return bool(found) and list(found.values())[0] > 0

        wait_until(link_counted, what="the WAN proxy's bytes toward the mirror in Prometheus", timeout_s=60)

        # Causeway's rules are loaded and evaluate cleanly; none fires on a healthy topology.
        def rules_evaluated() -> bool:
            groups = api(url, "/api/v1/rules")["groups"]
            rules = [r for g in groups for r in g["rules"]]
            return {g["name"] for g in groups} == {"causeway-mirror", "causeway-cluster", "causeway-wan",
                                                          "causeway-launcher"} and \
                all(r["health"] == "ok" for r in rules)

        wait_until(rules_evaluated, what="Causeway's alerting rules loaded and evaluated", timeout_s=60)
        names = {r["name"] for g in api(url, "/api/v1/rules")["groups"] for r in g["rules"]}
        assert {"CausewayMirrorLagHigh", "CausewayUnderReplicatedPartitions", "CausewayOfflinePartitions",
                "CausewayBrokerDown", "CausewayMirrorDown"} <= names
        [lag_rule] = [r for g in api(url, "/api/v1/rules")["groups"] for r in g["rules"]
                      if r["name"] == "CausewayMirrorLagHigh"]
        assert lag_rule["query"].endswith('(causeway_mirror_partition_lag_seconds{mirror="e2w"}) > 45'), lag_rule
        assert config["rule_files"] == [str((state / "prometheus" / "alerts.yml").resolve())]
        assert api(url, "/api/v1/alerts")["alerts"] == []

        # The link cut (as `causeway drill` cuts it): its alert is raised (pending for its 30 s).
        WanClient(doc["wan"]["api"]).proxy("east-to-west").disable()

        def link_cut_alerted() -> bool:
            alerts = api(url, "/api/v1/alerts")["alerts"]
            return any(a["labels"]["alertname"] == "CausewayWanLinkCut" and a["labels"]["proxy"] == "east-to-west"
                       for a in alerts)

        wait_until(link_cut_alerted, what="CausewayWanLinkCut raised for the cut proxy", timeout_s=60)

        table = causeway("status", "--state-dir", str(state))
        assert f"prometheus {url}" in table.stdout
        ours = list(find_marked(state.resolve()))
        assert any(Path(p.cmdline[0]).name == "prometheus" for p in ours), ours  # the server itself
    finally:
        down = causeway("down", "--state-dir", str(state))
    assert down.returncode == 0, down.stderr
    assert "stopped prometheus" in down.stdout or "stopped launcher" in down.stdout
    assert not list(find_marked(state.resolve()))
    assert not any(alive(p.pid) for p in ours)


def test_causeway_prometheus_refuses_a_bad_config_with_prometheus_s_reason(tmp_path: Path) -> None:
    config = tmp_path / "prometheus.yml"
    config.write_text("global: {scrape_interval: soon}\n")
    run = causeway("prometheus", "--config-file", str(config), "--data-dir", str(tmp_path / "data"),
                   "--listen", f"127.0.0.1:{free_port()}")
    assert run.returncode == 1, run.stdout + run.stderr
    assert run.stderr.startswith("causeway prometheus: cannot start: prometheus exited with 2 before it was ready")
    assert "not a valid duration string" in run.stderr  # Prometheus's own words, from its log
    assert "ready" not in run.stdout
    port_zero = causeway("prometheus", "--config-file", str(config), "--data-dir", str(tmp_path / "data"),
                         "--listen", "127.0.0.1:0")
    assert port_zero.returncode == 2 and "other than 0" in port_zero.stderr
