"""The WAN-link emulator: a Toxiproxy-compatible HTTP API over TCP proxies with toxics.

Start it with :func:`serve_wan` (or ``causeway wan``); drive it with any Toxiproxy client.
"""

from deploy.wan.errors import ApiError
from deploy.wan.server import serve_wan

__all__ = ["ApiError", "serve_wan"]
