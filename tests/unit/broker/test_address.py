"""broker.address: the one HOST:PORT parser."""

from __future__ import annotations

import pytest

from broker.address import format_host_port, parse_host_port

PARSED = {
    "127.0.0.1:9092": ("127.0.0.1", 9092),
    "localhost:0": ("localhost", 0),
    "broker-1.dc-east.example:65535": ("broker-1.dc-east.example", 65535),
    "[::1]:8474": ("::1", 8474),
    "[fe80::1]:1": ("fe80::1", 1),
    "::1:9092": ("::1", 9092),  # unbracketed: up to the last colon, as before
    ":9092": ("", 9092),  # every interface, for a listener
}


@pytest.mark.parametrize("text", list(PARSED))
def test_parses(text: str) -> None:
    assert parse_host_port(text) == PARSED[text]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("host", "must be HOST:PORT"),
        ("[::1]8474", "must be HOST:PORT"),
        ("[::1", "must be HOST:PORT"),
        ("host:", "bad port"),
        ("host:port", "bad port"),
        ("host:70000", "bad port"),
        ("host:-1", "bad port"),
        ("host:٣", "bad port"),  # a digit, but not ASCII
        ("host:" + "9" * 400, "bad port"),
        ("a b:80", "bad host"),
        ("a\x00b:80", "bad host"),
        ("h" * 300 + ":80", "bad host"),
        ("x" * 64 + ".example:80", "bad host"),  # a label IDNA cannot encode
    ],
)
def test_rejects_with_a_clear_error_naming_what(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason) as caught:
        parse_host_port(text, "bootstrap address")
    assert str(caught.value).startswith("bootstrap address ")
    assert len(str(caught.value)) < 200  # a huge input is shortened in the message


@pytest.mark.parametrize(("host", "port"), [("127.0.0.1", 1), ("::1", 2), ("name", 3)])
def test_format_is_the_inverse(host: str, port: int) -> None:
    assert parse_host_port(format_host_port(host, port)) == (host, port)
