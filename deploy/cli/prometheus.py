"""``causeway prometheus``: a Prometheus server (Debian's package) with a given config, in the foreground."""

from __future__ import annotations

import argparse
import os
from functools import partial
from pathlib import Path

import trio

from broker.address import parse_host_port
from deploy.child_process import ChildFailed
from deploy.cli.command import ErrorRule, run, until_signalled
from deploy.prometheus_process import READY_PREFIX, PrometheusExited, PrometheusMissing, run_prometheus

__all__ = ["register"]

_ERRORS: tuple[ErrorRule, ...] = (
    ((ChildFailed, PrometheusMissing), 1, lambda exc: f"causeway prometheus: cannot start: {exc}"),
    (PrometheusExited, 1, lambda exc: f"causeway prometheus: {exc}"),
    (OSError, 1, lambda exc: f"causeway prometheus: {exc}"),
)


def _listen(text: str) -> str:
    try:
        host, port = parse_host_port(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not host or port == 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a host and a port other than 0 (the scrape config and "
                                         "the URL printed name it)")
    return text


async def _serve(args: argparse.Namespace) -> None:
    config_file, data_dir, log_path = args.paths
    async with until_signalled("stopping Prometheus") as stop:
        url = await stop.nursery.start(partial(run_prometheus, config_file, data_dir, args.listen, log_path,
                                               retention=args.retention))
        print(f"{READY_PREFIX}{url}", flush=True)
        print(f"  config {args.config_file}, data {data_dir}, log {log_path}; Ctrl-C stops it.", flush=True)


def _prometheus(args: argparse.Namespace) -> int:
    log_path = args.log if args.log is not None else args.data_dir / "prometheus.log"
    # Absolute: Prometheus reads relative paths in its config against the config's directory.
    args.paths = tuple(Path(os.path.abspath(p)) for p in (args.config_file, args.data_dir, log_path))
    return run("causeway prometheus", lambda: trio.run(_serve, args), errors=_ERRORS)


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = commands.add_parser(
        "prometheus", help="run Prometheus (Debian's package) with a given config, e.g. the one `causeway up` makes",
        description="Start Prometheus (/usr/bin/prometheus, Debian's prometheus package) with its own config file, "
        "data dir and address, never the package's service. Prints "
        f"'{READY_PREFIX}http://HOST:PORT' once it answers /-/ready; stops it on Ctrl-C or SIGTERM, and exits 1 if "
        "it exits by itself. `causeway up` runs it this way for a topology with `monitoring: prometheus`.")
    parser.add_argument("--config-file", type=Path, required=True, help="Prometheus's config (prometheus.yml)")
    parser.add_argument("--data-dir", type=Path, required=True, help="its time series database (--storage.tsdb.path)")
    parser.add_argument("--listen", type=_listen, required=True, metavar="HOST:PORT",
                        help="address of its web UI and HTTP API (--web.listen-address)")
    parser.add_argument("--retention", default="15d", metavar="TIME",
                        help="how long it keeps samples (--storage.tsdb.retention.time; default 15d)")
    parser.add_argument("--log", type=Path, default=None, help="its log file (default DATA_DIR/prometheus.log)")
    parser.set_defaults(func=_prometheus)
