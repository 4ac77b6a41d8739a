"""deploy/ports.py: a process never hands out one port twice. The kernel's pick for port 0 is
random within the ephemeral range, so 2,000 picks in a row repeat some port dozens of times
(the birthday bound over ~28,000 ports); a launcher handing two of its children one port made
`causeway up` fail now and then."""

from __future__ import annotations

import socket

from deploy.ports import free_port


def test_two_thousand_ports_in_a_row_are_all_different_and_free() -> None:
    ports = [free_port() for _ in range(2000)]
    assert len(set(ports)) == len(ports)
    with socket.socket() as s:  # and the last one is free to bind
        s.bind(("127.0.0.1", ports[-1]))
