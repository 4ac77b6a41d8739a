"""`exactly_once_support` on a topology's mirror: MirrorMaker 2's `exactly.once.support` for an
mm2-mode mirror, written into the mirror's config by the launcher (and accepted by the mirror's
own config model); refused by line and key on a link-mode mirror or with a value it does not take."""

from __future__ import annotations

import json
from pathlib import Path

from deploy.launcher.from_topology import plan_from_file
from mirror.config import load_mirror_config
from tests.unit.topology.files import GOOD, assert_refused_at, write

REQUIRED = GOOD.replace("e2w: {source: east, target: west}",
                        "e2w: {source: east, target: west, exactly_once_support: required}")


def test_an_mm2_mirror_asks_for_exactly_once_in_its_config(tmp_path: Path) -> None:
    (mirror,) = plan_from_file(write(tmp_path, REQUIRED)).mirrors
    assert mirror.settings["exactly.once.support"] == "required"
    # What the launcher writes, the mirror reads (its own model, as `causeway mirror --config`).
    config = tmp_path / "mirror.json"
    config.write_text(json.dumps({"name": "e2w", "source": {"alias": "east", "bootstrap": "127.0.0.1:1"},
                                  "target": {"alias": "west", "bootstrap": "127.0.0.1:2"}, **mirror.settings}))
    assert load_mirror_config(config).exactly_once_support == "required"
    # Not asked: the key is not written, and the mirror keeps its at-least-once default.
    (plain,) = plan_from_file(write(tmp_path, GOOD)).mirrors
    assert "exactly.once.support" not in plain.settings


def test_exactly_once_on_a_link_mirror_is_refused_by_line_and_key(tmp_path: Path) -> None:
    text = REQUIRED.replace("exactly_once_support: required}", "mode: link, exactly_once_support: required}")
    assert_refused_at(tmp_path, text, "12:", "mirrors.e2w.exactly_once_support: exactly_once_support is for mode: mm2")


def test_a_value_it_does_not_take_is_named(tmp_path: Path) -> None:
    text = REQUIRED.replace("exactly_once_support: required", "exactly_once_support: maybe")
    assert_refused_at(tmp_path, text, "12:", "mirrors.e2w.exactly_once_support")
