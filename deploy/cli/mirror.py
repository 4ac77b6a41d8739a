"""`causeway mirror --config FILE`: run one MirrorMaker-2-style mirror until stopped."""

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path
from typing import Any

import trio

from deploy.cli.command import run, until_signalled
from mirror.config import MirrorConfig, load_mirror_config
from topology import TopologyError

__all__ = ["register"]


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "mirror", help="copy topics from one cluster to another (MirrorMaker 2 conventions)",
        description="Run one mirror from a YAML config: source and target bootstrap, topic and group "
                    "patterns, naming, and MirrorMaker 2's knobs by their MM2 names. See README, 'causeway mirror'.")
    parser.add_argument("--config", type=Path, required=True, help="the mirror's YAML file")
    parser.add_argument("--status-file", type=Path, help="write the mirror's status (JSON) here every second")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    return run("causeway mirror", lambda: trio.run(_serve, load_mirror_config(args.config), args.status_file),
               errors=[(TopologyError, 2,
                        lambda exc: f"causeway mirror: {args.config} is not a valid mirror config:\n{exc}")])


async def _serve(config: MirrorConfig, status_file: Path | None) -> None:
    from mirror.daemon import run_mirror

    async with until_signalled("stopping the mirror") as stop:
        mirror = await stop.nursery.start(partial(run_mirror, config, status_file=status_file))
        stop.on_signal = mirror.stop  # positions are checkpointed once more before it returns
        # One machine-readable line on stdout: launchers and tests wait for it.
        print(f"causeway mirror ready: {config.display_name}", flush=True)
