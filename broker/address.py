"""HOST:PORT addresses: one parser for the broker's configs, the client's bootstrap list, the
tools and the WAN emulator, and for Kafka's endpoints (``NAME://host:port``: listeners, and the
endpoints of a broker's registration znode). No imports beyond the standard library, so any
layer may use it."""

from __future__ import annotations

import ipaddress
import re

__all__ = ["format_host_port", "parse_endpoint", "parse_host_port"]

MAX_HOST_CHARS = 253  # DNS: a name's longest text form
# The characters Kafka's EndPoint takes in an endpoint's host (EndPoint.scala's uriParseExp).
_ENDPOINT_HOST = re.compile(r"[0-9a-zA-Z\-%._:]*")


def parse_host_port(text: str, what: str = "address") -> tuple[str, int]:
    """``"host:port"`` or ``"[v6 address]:port"`` as ``(host, port)``, brackets removed.

    The host may be empty (``":9092"``: every interface, for a listener); a caller that needs
    one checks. An IPv6 address without brackets is read up to its last colon.
    Raises ValueError naming `what` when there is no port, the port is not 0..65535 in ASCII
    digits, or the host is one no resolver could take (over 253 characters, a control
    character or space, a label too long for IDNA): here, rather than inside a later connect.
    """
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        if not rest.startswith(":"):
            raise ValueError(f"{what} {_short(text)} must be HOST:PORT")
        port_text = rest[1:]
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            raise ValueError(f"{what} {_short(text)} must be HOST:PORT")
    if not (port_text.isascii() and port_text.isdigit() and len(port_text) <= 5 and int(port_text) <= 65535):
        raise ValueError(f"{what} {_short(text)} has a bad port")
    _check_host(host, text, what)
    return host, int(port_text)


def parse_endpoint(text: str, what: str = "endpoint") -> tuple[str, str, int]:
    """Kafka's ``NAME://host:port`` as ``(name, host, port)``: a listener name (any text without
    ':' or '/', as Kafka's EndPoint; a caller with a stricter rule checks), then HOST:PORT as
    `parse_host_port` reads it, with a host of the characters Kafka allows there (letters,
    digits, '-', '%', '.', '_', ':'). Raises ValueError naming `what`.
    """
    name, sep, address = text.partition("://")
    if not sep or not name or ":" in name or "/" in name:
        raise ValueError(f"{what} {_short(text)} must be NAME://HOST:PORT")
    host, port = parse_host_port(address, what)
    if _ENDPOINT_HOST.fullmatch(host) is None:
        raise ValueError(f"{what} {_short(text)} has a bad host")
    return name, host, port


def format_host_port(host: str, port: int) -> str:
    """The inverse of `parse_host_port`: an IPv6 address goes in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _check_host(host: str, text: str, what: str) -> None:
    if len(host) > MAX_HOST_CHARS or any(ord(c) < 0x21 or c == "\x7f" for c in host):
        raise ValueError(f"{what} {_short(text)} has a bad host")
    try:
        ipaddress.ip_address(host)
        return
    except ValueError:
        pass
    try:
        host.encode("idna")  # a label over 63 characters raises here, not in a connection task
    except UnicodeError:
        raise ValueError(f"{what} {_short(text)} has a bad host") from None


def _short(text: str) -> str:
    shown = repr(text)
    return shown if len(shown) <= 80 else shown[:77] + "..."
