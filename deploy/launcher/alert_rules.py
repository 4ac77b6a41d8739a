"""The alerting rules a topology's Prometheus loads: Causeway's shipped rules
(`prometheus-alerts.yml`, beside this module) with the mirror-lag alert set from the topology.

Each mirror's `lag_alert_seconds` (its RPO, 60 by default) becomes a `CausewayMirrorLagHigh` rule
of its own, selecting that mirror's series (`{mirror="<name>"}`, the label the scrape config
gives every mirror target) and comparing with its threshold; every other rule is kept as
shipped. One rule per mirror rather than thresholds as series joined in PromQL: a rule reads as
what it checks, in Prometheus's alerts page and in `promtool test rules`, and a topology has few
mirrors. The shipped file keeps its 60 s rule for anyone who loads it by hand.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

__all__ = ["ALERT_RULES", "LAG_ALERT", "alert_rules", "lag_expr", "rules_text"]

#: The alerting rules, shipped with Causeway beside this module.
ALERT_RULES = Path(__file__).with_name("prometheus-alerts.yml")
#: The alert whose threshold each mirror sets.
LAG_ALERT = "CausewayMirrorLagHigh"
# The shipped rule's expression: its series selector, and the threshold it compares with.
_LAG_EXPR = re.compile(r"(?P<head>.*\(causeway_mirror_partition_lag_seconds)\) > (?P<threshold>\S+)", re.DOTALL)


def _number(seconds: float) -> str:
    """`seconds` as a PromQL number literal, exactly (30, 0.5, 123456.7)."""
    return str(int(seconds)) if float(seconds).is_integer() else repr(float(seconds))


def lag_expr(shipped: str, mirror: str, seconds: float) -> str:
    """The shipped lag expression for one mirror's series and its threshold. Mirror names are
    topology names (letters, digits, `.`, `_`, `-`), so they need no quoting inside `"..."`.
    Raises ValueError when the shipped expression no longer has the shape this rewrites."""
    match = _LAG_EXPR.fullmatch(shipped.strip())
    if match is None:
        raise ValueError(f"{LAG_ALERT}'s expression is not `...(causeway_mirror_partition_lag_seconds) > N`: "
                         f"{shipped!r}")
    return f'{match["head"]}{{mirror="{mirror}"}}) > {_number(seconds)}'


def alert_rules(lag_alert_seconds: Mapping[str, float], shipped: Path = ALERT_RULES) -> dict[str, Any]:
    """The shipped rules with `CausewayMirrorLagHigh` made one rule per mirror of
    `lag_alert_seconds` (mirror name -> threshold in seconds), in the mirrors' order; with no
    mirror, no lag rule (there is no lag series to watch)."""
    document: dict[str, Any] = yaml.safe_load(shipped.read_text())
    for group in document["groups"]:
        rules: list[dict[str, Any]] = []
        for rule in group["rules"]:
            if rule.get("alert") != LAG_ALERT:
                rules.append(rule)
                continue
            for mirror, seconds in lag_alert_seconds.items():
                mine = copy.deepcopy(rule)
                mine["expr"] = lag_expr(rule["expr"], mirror, seconds)
                # The series' own label, set on the rule too: rules of one alert name differ in
                # their labels, which promtool's lint asks of them.
                mine.setdefault("labels", {})["mirror"] = mirror
                mine.setdefault("annotations", {})["summary"] = (
                    f"{rule['annotations']['summary']} (its alert threshold: {_number(seconds)} s)")
                rules.append(mine)
        group["rules"] = rules
    return document


def rules_text(lag_alert_seconds: Mapping[str, float], shipped: Path = ALERT_RULES) -> str:
    """`alert_rules` as the file Prometheus loads (JSON, which is YAML)."""
    return json.dumps(alert_rules(lag_alert_seconds, shipped), indent=2) + "\n"
