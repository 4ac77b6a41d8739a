"""A cluster whose connects hang (its hosts down, or a link dropping packets) as the real
`causeway pipeline` CLI meets it: the client's deadline passes while it connects, and the command
says in one line which broker it was connecting to and for how long, with no traceback.

Before commit 52395b5's race was fixed, the caller's `trio.fail_after` got the deadline as a bare
trio.TooSlowError (the Cancelled came out of trio's open_tcp_stream wrapped in an exception group,
which the client's deadline check missed), so the command could only say "did not answer". The
connects here cannot complete (tests/support/stalled.py), so the deadline always passes inside
one, however loaded the machine.
"""

from __future__ import annotations

import re
from contextlib import ExitStack
from pathlib import Path

import pytest

from pipeline.planning import CHECK_TIMEOUT_S
from tests.pipeline.cli import causeway_pipeline
from tests.support.stalled import stalled_port


@pytest.mark.parametrize("brokers", [1, 2], ids=["one broker", "two brokers"])
def test_export_from_a_cluster_whose_connects_hang_names_the_stalled_connect(brokers: int, tmp_path: Path) -> None:
    with ExitStack() as stack:
        addresses = [f"127.0.0.1:{stack.enter_context(stalled_port())}" for _ in range(brokers)]
        bootstrap = ",".join(addresses)
        run = causeway_pipeline("export", "--bootstrap", bootstrap, "--topic", "t", "--to", str(tmp_path / "out"),
                                timeout_s=120)
    assert run.returncode == 1 and run.stdout == "", (run.returncode, run.stdout, run.stderr)
    assert "Traceback" not in run.stderr
    (line,) = run.stderr.splitlines()
    # Whichever broker it tried first held the connect until the deadline.
    tried = "|".join(re.escape(a) for a in addresses)
    expected = (rf"Error: cluster {re.escape(bootstrap)} is unreachable or did not answer in time: "
                rf"connect to ({tried}): no answer within {CHECK_TIMEOUT_S:g}s")
    assert re.fullmatch(expected, line), line
    assert not (tmp_path / "out").exists()
