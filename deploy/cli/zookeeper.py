"""``causeway zookeeper``: a managed ZooKeeper ensemble (1 or 3 nodes) in the foreground."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path

import trio

from deploy.cli.command import ErrorRule, UsageError, run, until_signalled
from deploy.zookeeper.config import Tuning, ZkTls
from deploy.zookeeper.ensemble import Ensemble, run_ensemble
from deploy.zookeeper.node import NodeFailed, ZooKeeperMissing
from security.certs import CertsError, ZookeeperCertificates, create_zookeeper_certificates

__all__ = ["READY_PREFIX", "TLS_READY_PREFIX", "broker_properties", "register"]

READY_PREFIX = "causeway zookeeper ready: "  # then the connect string; launchers and tests wait for it
TLS_READY_PREFIX = "causeway zookeeper TLS: "  # then the connect string of the TLS client ports (--tls)
DEFAULT_DATA_DIR = Path(".causeway/zookeeper")

_ERRORS: tuple[ErrorRule, ...] = (
    ((NodeFailed, ZooKeeperMissing), 1, lambda exc: f"causeway zookeeper: cannot start: {exc}"),
    (CertsError, 1, lambda exc: f"causeway zookeeper: cannot make the TLS certificates: {exc}"),
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


def broker_properties(certs: ZookeeperCertificates, secure_connect: str) -> str:
    """The server.properties lines a broker needs to use a TLS ensemble with znode ACLs."""
    keys = {"zookeeper.connect": secure_connect, **certs.broker_properties()}
    return "\n".join(["# ZooKeeper over TLS with znode ACLs: written by `causeway zookeeper --tls`",
                      *(f"{key}={value}" for key, value in keys.items()), ""])


async def _serve(args: argparse.Namespace) -> None:
    data_dir: Path = args.data_dir.resolve()
    tuning = Tuning(tick_time_ms=args.tick_time)
    certs: ZookeeperCertificates | None = None
    if args.tls:
        certs = await trio.to_thread.run_sync(create_zookeeper_certificates, data_dir / "tls")
        tuning = replace(tuning, tls=ZkTls(keystore=certs.server_keystore, truststore=certs.truststore))
    async with until_signalled("stopping ZooKeeper") as stop:
        ensemble: Ensemble = await stop.nursery.start(partial(
            run_ensemble, data_dir, nodes=args.nodes, client_port=args.port, secure_client_port=args.secure_port,
            tuning=tuning, supervise=True))
        # One machine-readable line first (what `causeway up` and tests wait for), then the nodes.
        print(f"{READY_PREFIX}{ensemble.connect}", flush=True)
        if certs is not None and ensemble.secure_connect is not None:
            properties = data_dir / "tls" / "broker-zookeeper.properties"
            await trio.to_thread.run_sync(properties.write_text, broker_properties(certs, ensemble.secure_connect))
            print(f"{TLS_READY_PREFIX}{ensemble.secure_connect}", flush=True)
            print(f"  brokers connect over TLS as User {certs.client_principal} with the keys in {properties}; "
                  "with zookeeper.set.acl=true only they may write the znodes they create", flush=True)
        states = await ensemble.states()
        for node in ensemble.nodes:
            state = states.get(node.node_id)
            print(f"  node {node.node_id}: {node.address} {state.mode if state else 'starting'}, pid {node.pid}, "
                  f"dir {node.node_dir}, log {node.log_path}", flush=True)
        print("Ctrl-C stops the ensemble.", flush=True)


def _zookeeper(args: argparse.Namespace) -> int:
    def serve() -> None:
        if args.secure_port is not None and not args.tls:
            raise UsageError("--secure-port needs --tls")
        trio.run(_serve, args)

    return run("causeway zookeeper", serve, errors=_ERRORS)


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
    parser.add_argument("--tls", action="store_true",
                        help="also serve clients over mutual TLS on a second port per node, with certificates made "
                        "in DATA_DIR/tls (a CA, ZooKeeper's, and one client certificate for the brokers, CN=kafka-"
                        "brokers), and write the broker keys that use them (zookeeper.ssl.*, zookeeper.set.acl) to "
                        "DATA_DIR/tls/broker-zookeeper.properties")
    parser.add_argument("--secure-port", type=_port, default=None, metavar="PORT",
                        help="TLS client port of node 1 with --tls (node N gets PORT+N-1); default: free ports")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    parser.set_defaults(func=_zookeeper)
