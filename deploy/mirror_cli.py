"""`causeway mirror --config FILE`: run one MirrorMaker-2-style mirror until stopped."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path
from typing import Any

import trio

from mirror.config import MirrorConfig, load_mirror_config
from topology import TopologyError

__all__ = ["register"]

log = logging.getLogger("causeway.mirror")


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
    try:
        config = load_mirror_config(args.config)
    except TopologyError as exc:
        print(f"causeway mirror: {args.config} is not a valid mirror config:\n{exc}", file=sys.stderr)
        return 2
    try:
        trio.run(_serve, config, args.status_file)
    except KeyboardInterrupt:
        return 130
    return 0


async def _serve(config: MirrorConfig, status_file: Path | None) -> None:
    from mirror.daemon import run_mirror

    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            mirror = await nursery.start(lambda task_status: run_mirror(config, status_file=status_file,
                                                                        task_status=task_status))
            # One machine-readable line on stdout: launchers and tests wait for it.
            print(f"causeway mirror ready: {config.display_name}", flush=True)
            async for signum in signals:
                log.info("received %s; stopping the mirror", signal.Signals(signum).name)
                mirror.stop()  # positions are checkpointed once more before it returns
                break
