"""`causeway mirror --config FILE`: run one mirror (mm2 or link mode) until stopped.

`causeway mirror promote | failover ...` promotes a link-mode mirror's topics (deploy/cli/mirror_promote.py);
`causeway mirror truncate-and-restore | reverse-and-start ...` fail back (deploy/cli/mirror_failback.py);
`causeway mirror list | describe | pause | resume ...` are link operations (deploy/cli/mirror_links.py).
"""

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path
from typing import Any

import trio

from deploy.cli.command import UsageError, run, until_signalled
from mirror.config import MirrorConfig, load_mirror_config
from mirror.errors import MirrorRefused
from topology import TopologyError

__all__ = ["register"]


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "mirror", help="copy topics from one cluster to another (MirrorMaker 2 conventions)",
        description="Run one mirror from a YAML config: source and target bootstrap, topic and group "
                    "patterns, naming, mode (mm2 or link), and MirrorMaker 2's knobs by their MM2 names. "
                    "`causeway mirror promote` (or `failover`) makes a link-mode mirror's topics writable; "
                    "`list`, `describe`, `pause` and `resume` show and change their link state. "
                    "See docs/operations/mirror.md and docs/operations/mirror-link.md.")
    parser.add_argument("--config", type=Path, help="the mirror's YAML file (required to run a mirror)")
    parser.add_argument("--status-file", type=Path, help="write the mirror's status (JSON) here every second")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    parser.set_defaults(func=_run)
    from deploy.cli.mirror_failback import register_failback
    from deploy.cli.mirror_links import register_links
    from deploy.cli.mirror_promote import register_promote

    commands = parser.add_subparsers(
        dest="mirror_command",
        metavar="{list,describe,pause,resume,promote,failover,truncate-and-restore,reverse-and-start}")
    register_links(commands)
    register_promote(commands)
    register_promote(commands, name="failover")
    register_failback(commands)


def _run(args: argparse.Namespace) -> int:
    if args.config is None:
        return run("causeway mirror", lambda: _missing_config())
    return run("causeway mirror", lambda: trio.run(_serve, load_mirror_config(args.config), args.status_file),
               errors=[(TopologyError, 2,
                        lambda exc: f"causeway mirror: {args.config} is not a valid mirror config:\n{exc}"),
                       (MirrorRefused, 1, lambda exc: f"causeway mirror: {exc}")])


def _missing_config() -> int:
    raise UsageError("--config FILE is required to run a mirror (or `causeway mirror promote ...`)")


async def _serve(config: MirrorConfig, status_file: Path | None) -> None:
    from mirror.driver import run_mirror

    async with until_signalled("stopping the mirror") as stop:
        mirror = await stop.nursery.start(partial(run_mirror, config, status_file=status_file))
        stop.on_signal = mirror.stop  # positions are checkpointed once more before it returns
        # One machine-readable line on stdout: launchers and tests wait for it.
        print(f"causeway mirror ready: {config.display_name}", flush=True)
