"""meta.properties, read and written in one module for the standalone controller and a
ZooKeeper-mode broker's registration."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.config import StartupError
from broker.controller.meta_properties import read_meta_properties, write_meta_properties


def test_written_file_reads_back_in_kafka_format(tmp_path: Path) -> None:
    assert read_meta_properties(tmp_path, 3) is None  # no file yet
    write_meta_properties(tmp_path, 3, "AbCdEfGhIjKlMnOpQrStUv")
    text = (tmp_path / "meta.properties").read_text()
    assert "version=0\nbroker.id=3\ncluster.id=AbCdEfGhIjKlMnOpQrStUv\n" in text
    assert read_meta_properties(tmp_path, 3) == "AbCdEfGhIjKlMnOpQrStUv"


def test_kraft_node_id_comments_and_no_cluster_id(tmp_path: Path) -> None:
    (tmp_path / "meta.properties").write_text("! Java comment\n# another\nnode.id = 7\njunk line\n")
    assert read_meta_properties(tmp_path, 7) == ""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("broker.id=2\ncluster.id=x\n", "data dir belongs to broker 2, not 1"),
        ("broker.id=two\n", "broker.id 'two' is not a number"),
        ("cluster.id=x\n", "data dir belongs to broker -1, not 1"),
    ],
)
def test_another_brokers_or_damaged_file_is_refused_naming_it(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "meta.properties").write_text(text)
    with pytest.raises(StartupError, match=message) as raised:
        read_meta_properties(tmp_path, 1)
    assert str(tmp_path / "meta.properties") in str(raised.value)


def test_unreadable_file_says_what_to_do(tmp_path: Path) -> None:
    (tmp_path / "meta.properties").write_bytes(b"broker.id=\xff\n")
    with pytest.raises(StartupError, match="cannot read .*restore it, or write broker.id=<id>"):
        read_meta_properties(tmp_path, 1)
