"""The manual's reference follows the code: every config key, API and command is in it.

docs/reference/broker-configs.md and topic-configs.md are written by hand (a key's effect is not
in the code); these tests fail when a key the broker accepts is missing from them, or a key they
name is no longer accepted, and when a `causeway` command has no page of its own.
"""

from __future__ import annotations

import re
from pathlib import Path

from broker.config import (
    BROKER_KEYS,
    CONFIG_ALIASES,
    IGNORED_KAFKA_KEYS,
    IGNORED_SSL_KEYS,
    SASL_KEYS,
    ZOOKEEPER_SSL_KEYS,
    SslConfig,
)
from broker.server.group_configs import GROUP_CONFIGS
from broker.server.handlers import HANDLERS
from broker.storage.topic_configs import TOPIC_CONFIG_NAMES
from deploy.cli import COMMAND_MODULES
from mirror.config import MirrorConfig
from topology import schema

REFERENCE = Path(__file__).resolve().parents[3] / "docs" / "reference"
_SSL_KEYS = ({field.alias for field in SslConfig.model_fields.values() if field.alias}
             | set(IGNORED_SSL_KEYS) | set(SASL_KEYS) | ZOOKEEPER_SSL_KEYS)
_KEY = re.compile(r"`([a-z][a-zA-Z0-9]*(?:\.[a-zA-Z0-9]+)*)`")  # Kafka's keys are dotted, some camelCase


def _keys_in(page: str) -> set[str]:
    return set(_KEY.findall((REFERENCE / page).read_text()))


def test_every_broker_key_is_in_the_reference() -> None:
    documented = _keys_in("broker-configs.md")
    accepted = set(BROKER_KEYS) | set(CONFIG_ALIASES) | set(IGNORED_KAFKA_KEYS) | _SSL_KEYS
    assert not accepted - documented, f"broker keys missing from broker-configs.md: {sorted(accepted - documented)}"


def test_the_broker_reference_names_no_key_the_broker_refuses() -> None:
    """Every key in a table's first column is one `causeway broker` accepts."""
    accepted = set(BROKER_KEYS) | set(CONFIG_ALIASES) | set(IGNORED_KAFKA_KEYS) | _SSL_KEYS
    first_column = set()
    for line in (REFERENCE / "broker-configs.md").read_text().splitlines():
        if line.startswith("| `"):
            first_column |= set(_KEY.findall(line.split("|")[1]))
    assert not first_column - accepted, f"keys the broker does not accept: {sorted(first_column - accepted)}"


def test_every_topic_and_group_key_is_in_the_reference() -> None:
    documented = _keys_in("topic-configs.md")
    accepted = set(TOPIC_CONFIG_NAMES) | set(GROUP_CONFIGS)
    assert not accepted - documented, f"keys missing from topic-configs.md: {sorted(accepted - documented)}"


def test_every_command_has_a_page() -> None:
    commands = [name for _, names in COMMAND_MODULES for name, _ in names]
    assert commands, "no commands found in deploy.cli"
    pages = {p.stem for p in (REFERENCE / "cli").glob("*.md")}
    missing = sorted(set(commands) - pages)
    assert not missing, f"commands without a page in docs/reference/cli/: {missing}"
    assert "mirror-promote" in pages
    pipeline = (REFERENCE / "cli" / "pipeline.md").read_text()
    for job in ("export", "audit", "copy", "lag"):
        assert f"causeway pipeline {job}" in pipeline, job


def test_every_api_the_broker_serves_is_listed_with_its_versions() -> None:
    """docs/index.md's "What works today" names each API as Kafka does, with the versions served."""
    page = (REFERENCE.parent / "index.md").read_text()
    missing = []
    for key, handler in HANDLERS.items():
        name = "".join(part.capitalize() for part in handler.api_key.name.split("_"))  # LEADER_AND_ISR: LeaderAndIsr
        versions = (f"{handler.min_version}" if handler.min_version == handler.max_version
                    else f"{handler.min_version}-{handler.max_version}")
        # Causeway's own API is named without versions: its page says which it takes.
        wanted = name if key >= 10000 else f"{name} {versions}"
        if wanted not in page:
            missing.append(wanted)
    assert not missing, f"APIs served but not listed (or with other versions) in docs/index.md: {missing}"


def test_every_mirror_key_is_in_the_reference() -> None:
    documented = set(re.findall(r"^\| `([^`]+)` \|", (REFERENCE / "mirror-config.md").read_text(), re.M))
    accepted = {field.alias or name for name, field in MirrorConfig.model_fields.items()}
    assert accepted == documented, (f"missing: {sorted(accepted - documented)}, "
                                    f"not accepted: {sorted(documented - accepted)}")


def test_every_topology_key_is_in_the_reference() -> None:
    page = (REFERENCE / "topology.md").read_text()
    documented = set(re.findall(r"^\| `([^`]+)` \|", page, re.M))
    models = (schema.TopologySpec, schema.Datacenter, schema.Cluster, schema.TopicSpec, schema.Link, schema.Mirror,
              schema.ClusterSecurity, schema.Acl)
    accepted = {field.alias or name for model in models for name, field in model.model_fields.items()}
    assert accepted <= documented, f"topology keys missing from topology.md: {sorted(accepted - documented)}"
