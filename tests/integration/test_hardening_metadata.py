"""Issue 10, item 7 (cluster metadata): a damaged ``cluster-metadata.json`` stops a real broker
process with a message that names the file and what to do, a non-zero exit and no traceback;
the intact file, put back, starts the broker with its topics."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from deploy.broker_process import BrokerProcess, broker_command

ROOT = Path(__file__).resolve().parents[2]

DAMAGE = {
    "empty": b"",
    "garbage": bytes(range(256)) * 4,
    "truncated": None,  # the first half of the real file
    "wrong types": b'{"version": 1, "producer_id_block_end": "many", "topics": {"orders": []}}',
    "partitions of the wrong type": None,  # a real topic whose partition index became text
}


def start_and_fail(data_dir: Path) -> subprocess.CompletedProcess[str]:
    cmd = broker_command(data_dir, listen="127.0.0.1:0")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=ROOT, check=False)


@pytest.fixture(scope="module")
def stopped_broker(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    """A data dir a broker ran on (topic 'orders', 3 partitions) and its intact metadata file
    (the snapshot: written at start with what the log held, so after a second start)."""
    data_dir = tmp_path_factory.mktemp("meta") / "broker"
    process = BrokerProcess(data_dir, topics=("orders:3",)).start()
    assert process.stop() == 0
    process.start()
    assert process.stop() == 0
    return data_dir, (data_dir / "cluster-metadata.json").read_bytes()


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_metadata_file_stops_the_start_with_a_clear_message(
    stopped_broker: tuple[Path, bytes], damage: str
) -> None:
    data_dir, intact = stopped_broker
    path = data_dir / "cluster-metadata.json"
    content = DAMAGE[damage]
    if damage == "truncated":
        content = intact[: len(intact) // 2]
    elif damage == "partitions of the wrong type":
        content = intact.replace(b'"partition": 1', b'"partition": "one"', 1)
        assert content != intact
    assert content is not None
    path.write_bytes(content)
    try:
        result = start_and_fail(data_dir)
    finally:
        path.write_bytes(intact)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert str(path) in result.stderr
    assert "is damaged" in result.stderr and "Restore the file" in result.stderr
    assert "ready" not in result.stdout


def test_the_intact_file_put_back_starts_the_broker_with_its_topics(stopped_broker: tuple[Path, bytes]) -> None:
    data_dir, _ = stopped_broker
    process = BrokerProcess(data_dir).start()
    try:
        client = AdminClient({"bootstrap.servers": process.bootstrap})
        assert len(client.list_topics(timeout=30).topics["orders"].partitions) == 3
    finally:
        assert process.stop() == 0
