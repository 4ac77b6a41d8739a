"""`monitoring: prometheus`: the topology key, the scrape config the launcher writes, and the
alerting rules shipped beside it, checked by Prometheus's own `promtool`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from deploy.launcher.alert_rules import LAG_ALERT, alert_rules, lag_expr, rules_text
from deploy.launcher.from_topology import plan_from_file
from deploy.launcher.prometheus import (
    ALERT_RULES,
    BROKER_JOB,
    LAUNCHER_JOB,
    MIRROR_JOB,
    WAN_JOB,
    BrokerTarget,
    MirrorTarget,
    scrape_config,
)
from deploy.prometheus_process import PROMTOOL, is_ready
from tests.unit.topology.files import GOOD, assert_refused_at, write
from topology import TopologyError, load_topology


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(PROMTOOL), *args], capture_output=True, text=True, timeout=60)


def test_the_shipped_alerting_rules_pass_promtool() -> None:
    checked = promtool("check", "rules", str(ALERT_RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 17 rules found" in checked.stdout


LAUNCHER_RULE_TESTS = """\
rule_files: [{rules}]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'causeway_launcher_process_restarts_total{{process="broker 1 of east", kind="broker"}}'
        values: '0 1 2 3 4 4 4'
      - series: 'causeway_launcher_process_restarts_total{{process="mirror east-to-west", kind="mirror"}}'
        values: '0 0 0 1 1 1 1'
      - series: 'causeway_launcher_process_up{{process="broker 1 of east", kind="broker"}}'
        values: '1 0 0 0 1 1 1'
    alert_rule_test:
      - eval_time: 5m
        alertname: CausewayProcessCrashLooping
        exp_alerts:
          - exp_labels: {{severity: warning, process: "broker 1 of east", kind: broker}}
            exp_annotations:
              summary: "broker 1 of east was restarted 4 times in 15 minutes"
      - eval_time: 3m
        alertname: CausewayProcessNotRunning
        exp_alerts:
          - exp_labels: {{severity: critical, process: "broker 1 of east", kind: broker}}
            exp_annotations:
              summary: "broker 1 of east has not been running for a minute; the launcher keeps restarting it"
      - eval_time: 1m
        alertname: CausewayProcessNotRunning
        exp_alerts: []
      - eval_time: 6m
        alertname: CausewayProcessNotRunning
        exp_alerts: []
"""


def test_the_launcher_rules_fire_on_a_crash_loop_and_a_process_that_stays_down(tmp_path: Path) -> None:
    """Prometheus's own rule tester: a broker restarted four times (the mirror once: quiet) and
    down for three minutes raises both alerts; a minute down is not yet an alert, back up none."""
    tests = tmp_path / "launcher-rules-test.yml"
    tests.write_text(LAUNCHER_RULE_TESTS.format(rules=json.dumps(str(ALERT_RULES.resolve()))))
    checked = promtool("test", "rules", str(tests))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_broken_rule_fails_promtool(tmp_path: Path) -> None:
    """The check above can fail: promtool parses every expression."""
    broken = tmp_path / "broken.yml"
    broken.write_text(ALERT_RULES.read_text().replace("causeway_mirror_partition_lag_seconds) > 60",
                                                      "causeway_mirror_partition_lag_seconds) >"))
    assert promtool("check", "rules", str(broken)).returncode != 0


def test_the_scrape_config_lists_every_daemon_with_its_names_and_loads_the_rules(tmp_path: Path) -> None:
    config = scrape_config("two-dc", [BrokerTarget("east", "dc1", 1, "127.0.0.1:9101"),
                                      BrokerTarget("east", "dc1", 2, "127.0.0.1:9102"),
                                      BrokerTarget("west", "dc2", 0, "127.0.0.1:9103")],
                           [MirrorTarget("east-to-west", "east", "west", "dc2", "127.0.0.1:9201")])
    jobs = {job["job_name"]: job["static_configs"] for job in config["scrape_configs"]}
    assert jobs[BROKER_JOB][1] == {"targets": ["127.0.0.1:9102"],
                                   "labels": {"cluster": "east", "datacenter": "dc1", "broker": "2"}}
    assert [c["targets"] for c in jobs[BROKER_JOB]] == [["127.0.0.1:9101"], ["127.0.0.1:9102"], ["127.0.0.1:9103"]]
    assert jobs[MIRROR_JOB] == [{"targets": ["127.0.0.1:9201"],
                                 "labels": {"mirror": "east-to-west", "datacenter": "dc2", "source_cluster": "east",
                                            "target_cluster": "west"}}]
    assert WAN_JOB not in jobs  # no emulator of ours (a real Toxiproxy): not scraped
    assert LAUNCHER_JOB not in jobs
    with_launcher = scrape_config("two-dc", [], [], launcher="127.0.0.1:9301")
    assert {"job_name": LAUNCHER_JOB, "static_configs": [{"targets": ["127.0.0.1:9301"]}]} in \
        with_launcher["scrape_configs"]
    with_wan = scrape_config("two-dc", [], [], wan="127.0.0.1:8474")
    assert {"job_name": WAN_JOB, "static_configs": [{"targets": ["127.0.0.1:8474"]}]} in with_wan["scrape_configs"]
    assert config["rule_files"] == [str(ALERT_RULES.resolve())]
    assert config["global"]["external_labels"] == {"topology": "two-dc"}
    # Prometheus's own checker reads it (and the rules it loads) as the server will.
    path = tmp_path / "prometheus.yml"
    path.write_text(json.dumps(config))
    checked = promtool("check", "config", str(path))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_monitoring_prometheus_in_a_topology_reaches_the_plan(tmp_path: Path) -> None:
    assert plan_from_file(write(tmp_path, GOOD)).monitoring == "none"
    assert plan_from_file(write(tmp_path, GOOD + "monitoring: prometheus\n")).monitoring == "prometheus"


@pytest.mark.parametrize("value", ["grafana", "yes", "{prometheus: true}"])
def test_a_bad_monitoring_value_is_named_by_line_and_key(tmp_path: Path, value: str) -> None:
    path = write(tmp_path, GOOD + f"monitoring: {value}\n")
    with pytest.raises(TopologyError) as exc:
        load_topology(path)
    [problem] = exc.value.problems
    assert str(problem).startswith(f"{path}:13:1: monitoring: "), str(problem)
    assert "'none' or 'prometheus'" in str(problem)


@pytest.mark.parametrize("url", ["file:///etc/passwd", "http://127.0.0.1:1/x?y", "ftp://127.0.0.1:21",
                                 "127.0.0.1:9090"])
def test_status_asks_only_an_http_host_and_port_for_readiness(url: str) -> None:
    """The state file names Prometheus's URL, and anyone may have written that."""
    assert not is_ready(url)


def _with_lag_alert(value: str) -> str:
    return GOOD.replace("e2w: {source: east, target: west}",
                        f"e2w: {{source: east, target: west, lag_alert_seconds: {value}}}")


def test_a_mirror_s_lag_alert_threshold_reaches_the_plan(tmp_path: Path) -> None:
    (default,) = plan_from_file(write(tmp_path, GOOD)).mirrors
    assert default.lag_alert_seconds == 60.0
    (given,) = plan_from_file(write(tmp_path, _with_lag_alert("2.5"))).mirrors
    assert given.lag_alert_seconds == 2.5


@pytest.mark.parametrize(("value", "message"), [
    ("0", "Input should be greater than 0"), ("-30", "Input should be greater than 0"),
    ("604801", "Input should be less than or equal to 604800"), (".inf", "Input should be a finite number"),
    (".nan", "Input should be a finite number"), ("true", "Input should be a valid number"),
    ("[60]", "Input should be a valid number"),
    ("30s", "give seconds as a number (60, 2.5), not '30s'"), ("'60'", "give seconds as a number"),
])
def test_a_bad_lag_alert_threshold_is_refused_by_line_and_key(tmp_path: Path, value: str, message: str) -> None:
    assert_refused_at(tmp_path, _with_lag_alert(value), "12:", f"mirrors.e2w.lag_alert_seconds: {message}")


def test_each_mirror_gets_its_own_lag_rule_and_the_rest_stay_as_shipped(tmp_path: Path) -> None:
    shipped = alert_rules({}, ALERT_RULES)
    rules = alert_rules({"fast": 30, "slow": 0.5})
    lag = [r for g in rules["groups"] for r in g["rules"] if r.get("alert") == LAG_ALERT]
    assert [r["expr"] for r in lag] == [
        'max by (mirror, target, topic, partition) (causeway_mirror_partition_lag_seconds{mirror="fast"}) > 30',
        'max by (mirror, target, topic, partition) (causeway_mirror_partition_lag_seconds{mirror="slow"}) > 0.5']
    others = [r for g in rules["groups"] for r in g["rules"] if r.get("alert") != LAG_ALERT]
    assert others == [r for g in shipped["groups"] for r in g["rules"]]  # no mirror: no lag rule either
    path = tmp_path / "alerts.yml"
    path.write_text(rules_text({"fast": 30, "slow": 0.5}))
    checked = promtool("check", "rules", str(path))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 18 rules found" in checked.stdout


def test_a_lag_rule_of_another_shape_is_refused_rather_than_rewritten_wrong() -> None:
    with pytest.raises(ValueError, match="CausewayMirrorLagHigh's expression"):
        lag_expr("max(causeway_mirror_partition_lag_records) > 60", "e2w", 30)


LAG_RULE_TESTS = """\
rule_files: [{rules}]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'causeway_mirror_partition_lag_seconds{{mirror="e2w",target="west",topic="east.orders",partition="0"}}'
        values: '0 45 45 45 45'
      - series: 'causeway_mirror_partition_lag_seconds{{mirror="w2e",target="east",topic="west.orders",partition="0"}}'
        values: '0 45 45 45 45'
    alert_rule_test:
      - eval_time: 3m
        alertname: CausewayMirrorLagHigh
        exp_alerts:
          - exp_labels: {{severity: critical, mirror: e2w, target: west, topic: east.orders, partition: "0"}}
            exp_annotations:
              summary: "mirror e2w: east.orders-0 is 45s behind its source (its alert threshold: 30 s)"
"""


def test_the_lag_threshold_from_the_topology_is_the_one_prometheus_alerts_on(tmp_path: Path) -> None:
    """Prometheus's own rule tester on the rules the launcher writes for a topology whose e2w
    has `lag_alert_seconds: 30` and whose w2e keeps the default 60: both 45 s behind, only e2w's
    alert fires (the shipped rule's 60 s would have raised none)."""
    text = _with_lag_alert("30") + "  w2e: {source: west, target: east}\n"
    plan = plan_from_file(write(tmp_path, text))
    rules = tmp_path / "alerts.yml"
    rules.write_text(rules_text({m.name: m.lag_alert_seconds for m in plan.mirrors}))
    tests = tmp_path / "lag-rules-test.yml"
    tests.write_text(LAG_RULE_TESTS.format(rules=json.dumps(str(rules))))
    checked = promtool("test", "rules", str(tests))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # The same test against the shipped file fails: the threshold did come from the topology.
    tests.write_text(LAG_RULE_TESTS.format(rules=json.dumps(str(ALERT_RULES.resolve()))))
    assert promtool("test", "rules", str(tests)).returncode != 0
