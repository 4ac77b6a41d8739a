"""The mirror's YAML config: MM2's knob names, defaults, and errors with line and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirror.config import load_mirror_config, mirror_config_from_data
from topology import TopologyError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "mirror.yaml"
    path.write_text(text)
    return path


def test_defaults(tmp_path: Path) -> None:
    config = load_mirror_config(write(tmp_path, "source: {alias: east, bootstrap: 'a:1'}\n"
                                                "target: {alias: west, bootstrap: 'b:2'}\n"))
    assert config.display_name == "east->west"
    assert config.naming == "default" and config.separator == "."
    assert config.refresh_topics_s == 5.0 and config.offset_lag_max == 100
    assert config.offset_syncs_location == "source" and config.replication_factor == -1
    assert config.sync_topic_acls and config.sync_topic_acls_s == 600.0  # MM2's
    assert config.topics.matches("orders") and not config.topics.matches("__consumer_offsets", (r"__.*",))


@pytest.mark.parametrize(("lines", "interval_s"), [
    ("", 5.0),  # mm2 mode: MM2's knob with our shorter default
    ("mode: link\n", 0.1),  # link mode copies the groups' offsets often: a failover may not copy them last
    ("mode: link\nsync.group.offsets.interval.seconds: 3\n", 3.0),  # as given
])
def test_group_offsets_are_synced_often_by_default_in_link_mode(tmp_path: Path, lines: str,
                                                                 interval_s: float) -> None:
    config = load_mirror_config(write(tmp_path, "source: {alias: east, bootstrap: 'a:1'}\n"
                                                "target: {alias: west, bootstrap: 'b:2'}\n" + lines))
    assert config.sync_group_offsets_s == interval_s


def test_mm2_names(tmp_path: Path) -> None:
    config = load_mirror_config(write(tmp_path, """\
source: {alias: east, bootstrap: 'a:1'}
target: {alias: west, bootstrap: 'b:2'}
topics: {include: ['orders.*'], exclude: ['orders-test']}
refresh.topics.interval.seconds: 2
offset.lag.max: 10
offset-syncs.topic.location: target
replication.policy.separator: _
sync.topic.acls.enabled: false
sync.topic.acls.interval.seconds: 30
"""))
    assert config.refresh_topics_s == 2 and config.offset_lag_max == 10
    assert config.offset_syncs_location == "target" and config.separator == "_"
    assert not config.sync_topic_acls and config.sync_topic_acls_s == 30
    assert config.topics.matches("orders.eu") and not config.topics.matches("orders-test")


def test_errors_name_line_and_key(tmp_path: Path) -> None:
    path = write(tmp_path, """\
source: {alias: east, bootstrap: 'a:1'}
target: {alias: east, bootstrap: 'b:2'}
topics: {include: ['(']}
offset.lag.maxx: 3
""")
    with pytest.raises(TopologyError) as info:
        load_mirror_config(path)
    text = str(info.value)
    assert f"{path}:2:1: target: source and target have the same alias 'east'" in text
    assert f"{path}:3:10: topics.include: '(' is not a regular expression" in text
    assert f"{path}:4:1: offset.lag.maxx: unknown key 'offset.lag.maxx'" in text


def test_exactly_once_support_is_for_mm2_mode() -> None:
    base = {"source": {"alias": "a", "bootstrap": "127.0.0.1:1"}, "target": {"alias": "b", "bootstrap": "127.0.0.1:2"}}
    assert mirror_config_from_data(base).exactly_once_support == "disabled"
    assert mirror_config_from_data({**base, "exactly.once.support": "required"}).exactly_once_support == "required"
    for bad in ({"exactly.once.support": "requested"}, {"mode": "link", "exactly.once.support": "required"}):
        with pytest.raises(TopologyError, match="exactly.once.support"):
            mirror_config_from_data({**base, **bad})
