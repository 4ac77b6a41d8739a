"""broker.address: the one HOST:PORT parser, and Kafka's NAME://host:port endpoints."""

from __future__ import annotations

import pytest

from broker.address import format_host_port, parse_endpoint, parse_host_port
from broker.config import ListenerSpec, parse_listeners
from broker.controller.zk.client import parse_connect
from broker.controller.zk.znodes import BrokerRegistration
from deploy.fuzz.wire import loopback_address

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


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("PLAINTEXT://:9092", ("PLAINTEXT", "", 9092)),
        ("REPLICATION-9091://broker-1.example:9091", ("REPLICATION-9091", "broker-1.example", 9091)),
        ("WAN://[::1]:9093", ("WAN", "::1", 9093)),
        ("WAN://::1:9093", ("WAN", "::1", 9093)),  # as parse_host_port reads an unbracketed one
        ("SSL://[fe80::1%eth0]:1", ("SSL", "fe80::1%eth0", 1)),
    ],
)
def test_parses_kafka_endpoints(text: str, parsed: tuple[str, str, int]) -> None:
    assert parse_endpoint(text) == parsed


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("host:9092", "must be NAME://HOST:PORT"),
        ("://host:9092", "must be NAME://HOST:PORT"),
        ("A:B://host:9092", "must be NAME://HOST:PORT"),
        ("PLAINTEXT://host", "must be HOST:PORT"),
        ("PLAINTEXT://host:70000", "bad port"),
        ("PLAINTEXT://a/b:1", "bad host"),  # outside the characters Kafka takes in a host
        ("PLAINTEXT://h!:1", "bad host"),
    ],
)
def test_rejects_bad_endpoints(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_endpoint(text, "listeners")


# Every place that reads a HOST:PORT reads brackets the same way: through broker.address.
@pytest.mark.parametrize(("text", "host", "port"), [("[::1]:9092", "::1", 9092), ("127.0.0.1:1", "127.0.0.1", 1),
                                                    ("::1:9092", "::1", 9092)])
def test_brackets_read_alike_everywhere(text: str, host: str, port: int) -> None:
    assert parse_listeners("listeners", f"PLAINTEXT://{text}")[0] == ListenerSpec("PLAINTEXT", host, port)
    assert parse_connect(text).hosts == ((host, port),)
    registration = BrokerRegistration(version=4, endpoints=[f"PLAINTEXT://{text}"], jmx_port=-1)
    assert registration.listeners() == (ListenerSpec("PLAINTEXT", host, port),)
    assert loopback_address(text) == (host, port)
    assert str(ListenerSpec("PLAINTEXT", host, port)) == f"PLAINTEXT://{format_host_port(host, port)}"
    assert str(parse_connect(text)) == format_host_port(host, port)


def test_zookeeper_connect_keeps_its_default_port_and_refuses_port_zero() -> None:
    assert parse_connect("zk,[::1]").hosts == (("zk", 2181), ("::1", 2181))
    with pytest.raises(ValueError, match="zookeeper.connect: 'zk:0' has no valid port"):
        parse_connect("zk:0")
    with pytest.raises(ValueError, match="zookeeper.connect: '\\[::1' must be HOST:PORT"):
        parse_connect("[::1")
