"""`causeway users` against a standalone broker serving SCRAM: a user added (password from stdin
or a file, never the command line) logs in with librdkafka, is listed in Kafka's words, and is
refused once deleted; bad input is refused before anything is sent."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError

from deploy.broker_process import BrokerProcess
from tests.support.refusal import ask_metadata

REPO = Path(__file__).resolve().parents[2]
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"


def causeway(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "deploy.cli", *args], capture_output=True, text=True, input=stdin,
                          timeout=120, cwd=REPO)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("users") / "data", overrides=(
        "listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512",
        f"listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config={SCRAM_JAAS}",
        f"listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config={SCRAM_JAAS}"))
    process.start()
    yield process
    process.stop()


def _logs_in(broker: BrokerProcess, user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> bool:
    attempt = ask_metadata({"bootstrap.servers": broker.listeners["SASL_PLAINTEXT"],
                            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism, "sasl.username": user,
                            "sasl.password": password, "socket.timeout.ms": 5000}, until=(KafkaError._AUTHENTICATION,))
    if attempt.refused_by(KafkaError._AUTHENTICATION):
        return False
    assert not attempt.errors, attempt.errors
    return True


def test_an_added_user_logs_in_is_listed_and_is_refused_once_deleted(broker: BrokerProcess, tmp_path: Path) -> None:
    plain = broker.listeners["PLAINTEXT"]
    added = causeway("users", "--bootstrap-server", plain, "--add", "--user", "alice", stdin="alice-secret\n")
    assert added.returncode == 0, added.stderr
    password_file = tmp_path / "bob.pw"
    password_file.write_text("bob-secret\n")
    added = causeway("users", "--bootstrap-server", plain, "--add", "--user", "bob", "--mechanism", "SCRAM-SHA-256",
                     "--iterations", "8192", "--password-file", str(password_file))
    assert added.returncode == 0, added.stderr
    assert _logs_in(broker, "alice", "alice-secret")
    assert _logs_in(broker, "bob", "bob-secret", "SCRAM-SHA-256")
    assert not _logs_in(broker, "alice", "bob-secret")

    listed = causeway("users", "--bootstrap-server", plain, "--list")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines() == [
        "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-512(iterations=4096)",
        "SCRAM credential configs for user-principal 'bob' are SCRAM-SHA-256(iterations=8192)"]

    deleted = causeway("users", "--bootstrap-server", plain, "--delete", "--user", "alice")
    assert deleted.returncode == 0, deleted.stderr
    assert not _logs_in(broker, "alice", "alice-secret")
    assert "alice" not in causeway("users", "--bootstrap-server", plain, "--list").stdout


def test_bad_input_is_refused_and_a_missing_user_is_named(broker: BrokerProcess) -> None:
    plain = broker.listeners["PLAINTEXT"]
    few = causeway("users", "--bootstrap-server", plain, "--add", "--user", "carol", "--iterations", "10", stdin="x\n")
    assert few.returncode == 2 and "--iterations must be from 4096" in few.stderr
    empty = causeway("users", "--bootstrap-server", plain, "--add", "--user", "carol", stdin="\n")
    assert empty.returncode == 2 and "password is empty" in empty.stderr
    missing = causeway("users", "--bootstrap-server", plain, "--delete", "--user", "nobody",
                       "--mechanism", "SCRAM-SHA-512")
    assert missing.returncode == 1 and "RESOURCE_NOT_FOUND" in missing.stderr
