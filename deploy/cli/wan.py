"""``causeway wan``: run the WAN-link emulator (a Toxiproxy-compatible server) in the foreground."""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import trio

from broker.tasks import leaves
from deploy.cli.command import UsageError, until_signalled
from deploy.cli.command import run as run_command
from deploy.wan.errors import ApiError
from deploy.wan.http import REQUEST_TIMEOUT_SECONDS
from deploy.wan.proxy import MAX_CONNECTIONS, format_hostport, split_hostport
from deploy.wan.server import serve_wan

__all__ = ["register", "run"]

DEFAULT_API = "127.0.0.1:8474"
T = TypeVar("T", int, float)


def _api_address(text: str) -> tuple[str, int]:
    try:
        return split_hostport(text, "--api")
    except ApiError as error:
        raise argparse.ArgumentTypeError(error.message.removeprefix("bad request body: ")) from None


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``wan`` subcommand to the ``causeway`` parser."""
    parser = subparsers.add_parser(
        "wan",
        help="run the WAN-link emulator (Toxiproxy HTTP API)",
        description=(
            "Serve the Toxiproxy HTTP API so that toxiproxy-python, toxiproxy-cli or any Toxiproxy "
            "client can create proxies and add latency, bandwidth limits and faults to them. "
            "Prints 'causeway wan ready: http://HOST:PORT' once it answers; stops on Ctrl-C or SIGTERM."
        ),
    )
    parser.add_argument(
        "--api",
        type=_api_address,
        default=DEFAULT_API,
        metavar="HOST:PORT",
        help=f"address of the HTTP API (port 0: a free port, shown in the ready line; default {DEFAULT_API})",
    )
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE.json",
        help="proxies to create at start, in Toxiproxy's populate format (a JSON list of "
        '{"name", "listen", "upstream", "enabled"})',
    )
    parser.add_argument(
        "--request-timeout",
        type=_positive_seconds,
        default=REQUEST_TIMEOUT_SECONDS,
        metavar="SECONDS",
        help="an API request must arrive whole within this time, else it gets 408 and its connection is "
        f"closed (default {REQUEST_TIMEOUT_SECONDS:g})",
    )
    parser.add_argument(
        "--max-connections-per-proxy",
        type=_positive_count,
        default=MAX_CONNECTIONS,
        metavar="N",
        help="client connections one proxy serves at once; a new one past it is closed at once, as Kafka's "
        f"max.connections.per.ip does (default {MAX_CONNECTIONS})",
    )
    parser.set_defaults(func=run)


def _positive(parse: Callable[[str], T], what: str, most: T) -> Callable[[str], T]:
    """An argparse type: `parse(text)`, more than 0 and at most `most` (`what` names the unit)."""

    def convert(text: str) -> T:
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of {what}") from None
        if not 0 < value <= most:
            raise argparse.ArgumentTypeError(f"{text!r} must be more than 0 and at most {most:.0f} {what}")
        return value

    return convert


_positive_seconds = _positive(float, "seconds", float(86400))
_positive_count = _positive(int, "connections", 1_000_000)


def _load_config(path: Path) -> list[dict[str, Any]]:
    """The --config file's proxies; UsageError (exit 2) when it cannot be read or is not a list."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise UsageError(f"{path}: cannot read: {error.strerror or error}") from None
    except ValueError as error:
        raise UsageError(f"{path}: not valid JSON: {error}") from None
    if not isinstance(value, list) or not all(isinstance(entry, dict) for entry in value):
        raise UsageError(f"{path}: expected a JSON list of proxy objects")
    return value


async def _serve_until_signalled(host: str, port: int, proxies: list[dict[str, Any]], request_timeout_s: float,
                                 max_connections: int) -> None:
    async with until_signalled() as stop:
        bound_host, bound_port = await stop.nursery.start(functools.partial(
            serve_wan, host, port, proxies=proxies, request_timeout_s=request_timeout_s,
            max_connections=max_connections))
        print(f"causeway wan ready: http://{format_hostport(bound_host, bound_port)}", flush=True)


def run(args: argparse.Namespace) -> int:
    """Run the emulator until SIGINT or SIGTERM. Returns 0 then; 2 for a bad config file, 1 when
    the API or a configured proxy cannot listen."""
    host, port = args.api

    def body() -> int:
        proxies = _load_config(args.config) if args.config is not None else []
        try:
            trio.run(_serve_until_signalled, host, port, proxies, args.request_timeout, args.max_connections_per_proxy)
        except (ApiError, OSError, BaseExceptionGroup) as error:
            # Every proxy that cannot be created is named, not only the first.
            failures = leaves(error)
            if not all(isinstance(leaf, ApiError | OSError) for leaf in failures):
                raise
            code = 1
            for leaf in failures:
                if isinstance(leaf, ApiError):
                    where = f"{args.config}: " if args.config is not None else ""
                    print(f"causeway wan: {where}{leaf.message}", file=sys.stderr)
                    code = 2 if leaf.status == 400 else code
                else:
                    print(f"causeway wan: cannot listen on {format_hostport(host, port)}: {leaf}", file=sys.stderr)
            return code
        return 0

    return run_command("causeway wan", body)
