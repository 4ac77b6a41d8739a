"""Issue 19, item 11: which upstream reaches which listen address (a proxy loop), by table."""

from __future__ import annotations

import pytest

from deploy.wan.proxy import upstream_reaches


@pytest.mark.parametrize(("upstream", "listen", "reaches"), [
    ("127.0.0.1:9000", "127.0.0.1:9000", True),
    ("localhost:9000", "127.0.0.1:9000", True),
    ("127.0.0.1:9000", "localhost:9000", True),
    ("127.0.0.2:9000", "0.0.0.0:9000", True),  # a listener on every address takes all of loopback
    ("0.0.0.0:9000", "127.0.0.1:9000", True),  # connecting to 0.0.0.0 reaches this host
    ("[::1]:9000", "[::]:9000", True),
    ("[0:0:0:0:0:0:0:1]:9000", "[::1]:9000", True),  # one address, two spellings
    ("Example.COM:9000", "example.com:9000", True),
    ("127.0.0.1:9001", "127.0.0.1:9000", False),
    ("127.0.0.2:9000", "127.0.0.1:9000", False),  # another loopback address, another listener
    ("10.0.0.1:9000", "0.0.0.0:9000", False),  # maybe this host, maybe not: checked once connected
    ("db.internal:9000", "127.0.0.1:9000", False),  # a name: checked once connected
    ("127.0.0.1:0", "127.0.0.1:0", False),  # port 0 is not bound yet: checked once it is
])
def test_which_upstream_reaches_which_listener(upstream: str, listen: str, reaches: bool) -> None:
    assert upstream_reaches(upstream, listen) is reaches
