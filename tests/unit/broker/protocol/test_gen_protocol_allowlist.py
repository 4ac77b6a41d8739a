"""The generator makes only the allowlisted APIs, describes fields by name, and types messages."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from broker.protocol import messages
from broker.protocol.api import API_SPECS
from broker.protocol.schema import FieldSpec
from broker.server.handlers import HANDLERS
from tools import gen_protocol


def _schema(directory: Path, name: str, kind: str, api_key: int | None = None) -> None:
    raw: dict[str, object] = {
        "name": name,
        "type": kind,
        "validVersions": "0-1",
        "flexibleVersions": "1+",
        "fields": [
            {"name": "ErrorCode", "type": "int16", "versions": "0+"},
            {"name": "Note", "type": "string", "versions": "1+", "nullableVersions": "1+"},
        ],
    }
    if api_key is not None:
        raw["apiKey"] = api_key
    # Kafka's schema files carry // comments; the generator strips them.
    (directory / f"{name}.json").write_text("// Licensed to the ASF\n" + json.dumps(raw))


@pytest.fixture
def schemas(tmp_path: Path) -> Path:
    directory = tmp_path / "schemas"
    directory.mkdir()
    for key, api in enumerate(("Wanted", "Unwanted")):
        _schema(directory, f"{api}Request", "request", key)
        _schema(directory, f"{api}Response", "response", key)
    _schema(directory, "SomeData", "data")
    return directory


def _allowlist(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "allow.txt"
    path.write_text(text)
    return path


def _load(code: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """Run generated code as a module of its own (dataclasses resolve ClassVar through it)."""
    module = types.ModuleType("generated_messages")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(code, "generated_messages.py", "exec"), module.__dict__)
    return module.__dict__


def test_only_listed_apis_and_data_are_generated(
    schemas: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    allowlist = _allowlist(tmp_path, "# a group\nWanted  # 0\n\nSomeData\n")
    namespace = _load(gen_protocol.generate(schemas, allowlist), monkeypatch)
    assert {"WantedRequest", "WantedResponse", "SomeData"} <= namespace.keys()
    assert "UnwantedRequest" not in namespace and "UnwantedResponse" not in namespace
    assert namespace["REQUESTS"] == {0: namespace["WantedRequest"]}
    assert [k.name for k in namespace["ApiKey"]] == ["WANTED"]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("Wanted\nMissing\n", "Missing is neither an API nor a data schema"),
        ("Wanted\nWanted\n", "Wanted is listed twice"),
        ("WantedRequest\n", "WantedRequest is neither"),  # APIs are named without the suffix
    ],
)
def test_a_bad_allowlist_stops_the_generator(
    schemas: Path, tmp_path: Path, text: str, complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    allowlist = _allowlist(tmp_path, text)
    output = tmp_path / "out.py"
    argv = ["--schemas", str(schemas), "--allowlist", str(allowlist), "--output", str(output)]
    assert gen_protocol.main(argv) == 2
    assert complaint in capsys.readouterr().err
    assert not output.exists()


def test_fields_are_described_by_name(
    schemas: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    namespace = _load(gen_protocol.generate(schemas, _allowlist(tmp_path, "Wanted\n")), monkeypatch)
    error_code, note = namespace["WantedRequest"].FIELDS  # type: ignore[attr-defined]
    assert error_code == FieldSpec("error_code", "int16", 0, 1, 1, 0)  # never nullable: 1..0
    assert (note.name, note.min_version, note.nullable_min_version, note.nullable_max_version) == (
        "note",
        1,
        1,
        1,
    )


def test_every_served_api_is_generated() -> None:
    # A new handler for an API outside the allowlist would not even import; this names it.
    missing = sorted(key for key in HANDLERS if key not in messages.REQUESTS)
    assert not missing, f"API keys {missing} are served but not in tools/protocol_allowlist.txt"


def test_what_the_next_issues_need_is_generated() -> None:
    for name in (
        "LeaderAndIsr", "StopReplica", "UpdateMetadata", "ControlledShutdown", "AlterPartition",
        "SaslHandshake", "SaslAuthenticate", "DescribeAcls", "CreateAcls", "DeleteAcls",
        "AddPartitionsToTxn", "EndTxn", "WriteTxnMarkers", "TxnOffsetCommit",
        "DescribeLogDirs", "ElectLeaders", "AlterPartitionReassignments",
    ):  # fmt: skip
        assert hasattr(messages, f"{name}Request") and hasattr(messages, f"{name}Response"), name


def test_raft_share_groups_and_telemetry_are_not_generated() -> None:
    for name in ("VoteRequest", "BrokerRegistrationRequest", "ShareFetchRequest",
                 "PushTelemetryRequest", "VotersRecord", "EnvelopeRequest"):  # fmt: skip
        assert not hasattr(messages, name), name


def test_generated_classes_carry_field_specs_and_the_api_table_its_classes() -> None:
    spec = API_SPECS[messages.ApiKey.PRODUCE]
    assert spec.request is messages.ProduceRequest
    transactional_id = messages.ProduceRequest.FIELDS[0]
    assert isinstance(transactional_id, FieldSpec)
    assert transactional_id.name == "transactional_id"
    assert (transactional_id.min_version, transactional_id.nullable_min_version) == (3, 3)
