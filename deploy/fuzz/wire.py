"""One well-formed request and its answer over a blocking socket, with a deadline.

What the fuzzer needs besides its hostile traffic: set up its topics, learn their ids, and
check between bursts that the broker still answers an ApiVersions request, and how fast.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from typing import Any

from broker.address import parse_host_port
from broker.protocol.api import API_SPECS, ApiKey
from broker.protocol.errors import ProtocolError
from broker.protocol.messages import ApiVersionsRequest
from deploy import kafka_socket

__all__ = ["LoopbackOnly", "call", "loopback_address", "ping"]


class LoopbackOnly(ValueError):
    """The fuzzer attacks brokers on this machine only."""


def loopback_address(bootstrap: str) -> tuple[str, int]:
    """`host:port` as a (host, port) pair, refused unless every address of host is loopback."""
    host, port = parse_host_port(bootstrap, "bootstrap")  # ValueError saying what is wrong
    if not host:
        raise ValueError(f"bootstrap {bootstrap!r} names no host")
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    for info in infos:
        address = ipaddress.ip_address(info[4][0])
        if not address.is_loopback:
            raise LoopbackOnly(f"{bootstrap} resolves to {address}, which is not a loopback address; "
                               "the fuzzer only attacks brokers on this machine")
    return str(infos[0][4][0]), port


def call(address: tuple[str, int], message: Any, version: int, *, timeout_s: float = 10.0,
         correlation_id: int = 1) -> Any:
    """Send `message` (a generated request) at `version` on a new connection; return the decoded
    response. Raises OSError (ConnectionError, TimeoutError) on any failure."""
    try:
        return kafka_socket.ask(address, message, version, correlation_id=correlation_id, timeout_s=timeout_s,
                                client_id="causeway-fuzz")
    except ProtocolError as exc:  # an OSError, like every other way this request can fail
        name = API_SPECS[message.API_KEY].name
        raise ConnectionError(f"the answer to {name} v{version} does not decode: {exc}") from None


def ping(address: tuple[str, int], *, timeout_s: float = 10.0) -> float:
    """Seconds an ApiVersions round trip on a new connection takes; raises OSError when none."""
    start = time.monotonic()
    response = call(address, ApiVersionsRequest(client_software_name="causeway-fuzz",
                                                client_software_version="1"), 3, timeout_s=timeout_s)
    if response.error_code != 0 or not any(k.api_key == ApiKey.API_VERSIONS for k in response.api_keys):
        raise ConnectionError(f"ApiVersions answered error {response.error_code}")
    return time.monotonic() - start
