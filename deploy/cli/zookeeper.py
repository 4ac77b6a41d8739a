"""``causeway zookeeper``: a managed ZooKeeper ensemble (1 or 3 nodes) in the foreground."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from functools import partial
from pathlib import Path

import trio

from deploy.cli.command import ErrorRule, run, until_signalled
from deploy.zookeeper.config import Tuning
from deploy.zookeeper.ensemble import Ensemble, run_ensemble
from deploy.zookeeper.node import NodeFailed, ZooKeeperMissing

__all__ = ["READY_PREFIX", "register"]

READY_PREFIX = "causeway zookeeper ready: "  # then the connect string; launchers and tests wait for it
DEFAULT_DATA_DIR = Path(".causeway/zookeeper")

_ERRORS: tuple[ErrorRule, ...] = (
    ((NodeFailed, ZooKeeperMissing), 1, lambda exc: f"causeway zookeeper: cannot start: {exc}"),
    (OSError, 1, lambda exc: f"causeway zookeeper: {exc}"),
)


def _int_between(low: int, high: int, what: str, within: str) -> Callable[[str], int]:
    """An argparse type: a whole number from `low` to `high`; `what` names one in the error for
    text that is not a number, `within` (formatted with low and high) the error for one out of range."""

    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text!r} must be {within.format(low=low, high=high)}")
        return value

    return convert


_port = _int_between(1, 65533, "a port number", "a port from {low} to {high}")
_tick = _int_between(50, 60000, "a number of milliseconds", "from {low} to {high} ms")


async def _serve(args: argparse.Namespace) -> None:
    async with until_signalled("stopping ZooKeeper") as stop:
        ensemble: Ensemble = await stop.nursery.start(partial(
            run_ensemble, args.data_dir.resolve(), nodes=args.nodes, client_port=args.port,
            tuning=Tuning(tick_time_ms=args.tick_time), supervise=True))
        # One machine-readable line first (what `causeway up` and tests wait for), then the nodes.
        print(f"{READY_PREFIX}{ensemble.connect}", flush=True)
        states = await ensemble.states()
        for node in ensemble.nodes:
            state = states.get(node.node_id)
            print(f"  node {node.node_id}: {node.address} {state.mode if state else 'starting'}, pid {node.pid}, "
                  f"dir {node.node_dir}, log {node.log_path}", flush=True)
        print("Ctrl-C stops the ensemble.", flush=True)


def _zookeeper(args: argparse.Namespace) -> int:
    return run("causeway zookeeper", lambda: trio.run(_serve, args), errors=_ERRORS)


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = commands.add_parser(
        "zookeeper", help="run a ZooKeeper ensemble (1 or 3 nodes) for ZooKeeper-mode clusters",
        description="Start Apache ZooKeeper (Debian's zookeeper package) as an ensemble of 1 or 3 nodes on "
        "127.0.0.1, each with a generated zoo.cfg, data dir and log under --data-dir/node-N. Prints "
        f"'{READY_PREFIX}HOST:PORT[,...]' (the zookeeper.connect string) once every node serves and, with "
        "3 nodes, one leads; restarts a node that dies; stops every node on Ctrl-C or SIGTERM.")
    parser.add_argument("--nodes", type=int, choices=(1, 3), default=1, help="ensemble size (default 1)")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR,
                        help=f"where the nodes keep their config, data and log (default {DEFAULT_DATA_DIR})")
    parser.add_argument("--port", type=_port, default=None,
                        help="client port of node 1 (node N gets PORT+N-1); default: free ports")
    parser.add_argument("--tick-time", type=_tick, default=Tuning().tick_time_ms, metavar="MS",
                        help=f"ZooKeeper's tickTime (default {Tuning().tick_time_ms}); sessions may last 2 to 20 ticks "
                        "at least, up to 60 s")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    parser.set_defaults(func=_zookeeper)
