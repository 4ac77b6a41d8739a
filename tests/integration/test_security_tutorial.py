"""docs/operations/secure-cluster.md, followed step by step: its server.properties and
alice.properties are read from the page itself (so the page cannot drift from what works), the
commands are the page's, on free ports. The end: alice produces and consumes over SASL_SSL with
SCRAM, the administrator works over mutual TLS, bob is refused."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError

from broker.config import load_properties
from deploy.broker_process import BrokerProcess
from tests.support.refusal import ask_metadata

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "operations" / "secure-cluster.md"


def causeway(*args: str, cwd: Path, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "deploy.cli", *args], capture_output=True, text=True, input=stdin,
                          timeout=120, cwd=cwd)


def _block_after(marker: str) -> str:
    """The first ```properties block after `marker` on the page."""
    text = PAGE.read_text()
    match = re.search(re.escape(marker) + r".*?```properties\n(.*?)```", text, re.S)
    assert match is not None, f"no properties block after {marker!r} in {PAGE}"
    return match.group(1)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("tutorial")
    made = causeway("certs", "create", "--dir", "certs", "--broker", "broker=localhost,127.0.0.1", "--client", "admin",
                    cwd=work)
    assert made.returncode == 0, made.stderr
    # The page's server.properties, on free ports.
    server = re.sub(r":909[34]\b", ":0", _block_after("`server.properties`:"))
    (work / "server.properties").write_text(server)
    return work


@pytest.fixture(scope="module")
def broker(workdir: Path) -> Iterator[BrokerProcess]:
    props = load_properties(workdir / "server.properties")
    # Paths in the page are relative to where the broker runs: made absolute for the process.
    overrides = [f"{k}={workdir / v}" if k.endswith(".location") else f"{k}={v}" for k, v in props.items()]
    process = BrokerProcess(workdir / "data", overrides=tuple(overrides))
    process.start()
    yield process
    assert process.stop() == 0, process.log_tail()


def _alice_properties(workdir: Path, user: str, password: str) -> Path:
    text = _block_after("`alice.properties`").replace('username="alice" password="..."',
                                                        f'username="{user}" password="{password}"')
    path = workdir / f"{user}.properties"
    path.write_text(text.replace("certs/ca.crt", str(workdir / "certs" / "ca.crt")))
    return path


def test_the_tutorial_from_zero_to_tls_scram_and_acls(workdir: Path, broker: BrokerProcess) -> None:
    admin_config = str(workdir / "certs" / "admin.properties")
    mtls, sasl = broker.listeners["SSL"], broker.listeners["SASL_SSL"]
    for user in ("alice", "bob"):
        added = causeway("users", "--bootstrap-server", mtls, "--command-config", admin_config, "--add", "--user", user,
                         cwd=workdir, stdin=f"{user}-password\n")
        assert added.returncode == 0, added.stderr
    steps = [
        ("topics", "--create", "--topic", "orders", "--partitions", "3"),
        ("acls", "--add", "--allow-principal", "User:alice", "--producer", "--topic", "orders"),
        ("acls", "--add", "--allow-principal", "User:alice", "--consumer", "--topic", "orders",
         "--group", "orders-app"),
    ]
    for command, *rest in steps:
        done = causeway(command, "--bootstrap-server", mtls, "--command-config", admin_config, *rest, cwd=workdir)
        assert done.returncode == 0, f"{command} {rest}: {done.stderr}"
    listed = causeway("acls", "--bootstrap-server", mtls, "--command-config", admin_config, "--list", cwd=workdir)
    assert "User:alice" in listed.stdout and "orders-app" in listed.stdout, listed.stdout

    alice = str(_alice_properties(workdir, "alice", "alice-password"))
    produced = causeway("produce", "--bootstrap-server", sasl, "--producer.config", alice, "--topic", "orders",
                        cwd=workdir, stdin="one\ntwo\nthree\n")
    assert produced.returncode == 0, produced.stderr
    consumed = causeway("consume", "--bootstrap-server", sasl, "--consumer.config", alice, "--topic", "orders",
                        "--group", "orders-app", "--from-beginning", "--max-messages", "3", cwd=workdir)
    assert consumed.returncode == 0, consumed.stderr
    assert sorted(consumed.stdout.split()) == ["one", "three", "two"]

    # bob logs in and may do nothing: his produce is refused, orders is not in his metadata.
    bob = str(_alice_properties(workdir, "bob", "bob-password"))
    refused = causeway("produce", "--bootstrap-server", sasl, "--producer.config", bob, "--topic", "orders",
                       cwd=workdir, stdin="intruder\n")
    assert refused.returncode != 0 and "TOPIC_AUTHORIZATION_FAILED" in refused.stderr, refused.stderr
    topics = causeway("topics", "--bootstrap-server", sasl, "--command-config", bob, "--list", cwd=workdir)
    assert "orders" not in topics.stdout.split()
    # A wrong password is refused by name; no certificate on the administrator's port fails TLS.
    wrong = causeway("topics", "--bootstrap-server", sasl, "--command-config",
                     str(_alice_properties(workdir, "alice", "wrong")), "--list", cwd=workdir)
    assert wrong.returncode != 0 and "SASL_AUTHENTICATION_FAILED" in wrong.stderr, wrong.stderr
    handshake_failed = (KafkaError._SSL, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)
    anonymous = ask_metadata({"bootstrap.servers": mtls, "security.protocol": "SSL",
                              "ssl.ca.location": str(workdir / "certs" / "ca.crt")},
                             timeout_s=10, until=handshake_failed)
    assert anonymous.refused_by(*handshake_failed), anonymous.errors
