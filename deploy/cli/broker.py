"""`causeway broker` and `causeway demo`: one broker, standalone (metadata in its data dir) or, with
``--zookeeper``, one broker of a ZooKeeper-mode cluster."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import trio

from broker.config import BrokerConfig, ConfigError, StartupError, ignored_keys, load_properties, parse_overrides
from broker.log_limits import limit_call_sites
from broker.server.broker import RunningBroker, run_broker
from deploy.cli.command import ErrorRule, run, until_signalled

__all__ = ["register"]

log = logging.getLogger("causeway")

# Start-up failures as one clear line each (stderr), with the exit code the manual gives (docs/reference/cli/).
_ERRORS: tuple[ErrorRule, ...] = (
    (StartupError, 1, lambda exc: f"causeway: cannot start: {exc}"),
    (ConfigError, 2, lambda exc: f"causeway: config error: {exc}"),
    (OSError, 1, lambda exc: f"causeway: {exc}"),
)


def _broker_config(args: argparse.Namespace) -> BrokerConfig:
    props: dict[str, str] = {}
    if args.config is not None:
        props.update(load_properties(Path(args.config)))
    props.update(parse_overrides(args.override))
    if args.data_dir is not None:
        props["log.dirs"] = str(args.data_dir)
    if args.listen:
        props["listeners"] = ",".join(
            listen if "://" in listen else f"PLAINTEXT://{listen}" for listen in args.listen
        )
    if args.broker_id is not None:
        props["node.id"] = str(args.broker_id)
    if getattr(args, "zookeeper", None):
        props["zookeeper.connect"] = args.zookeeper
    for key in ignored_keys(props):
        log.warning("config %s has no effect in Causeway; ignored", key)
    return BrokerConfig.from_properties(props)


async def _serve_until_signalled(config: BrokerConfig, initial_topics: dict[str, int], banner: bool) -> None:
    # Every line of this process's log is bounded per call site: a line nobody thought a peer
    # could repeat cannot flood it either (broker.log_limits).
    limit_call_sites()
    async with until_signalled("shutting down") as stop:
        running: RunningBroker = await stop.nursery.start(
            partial(run_broker, config, initial_topics=initial_topics)
        )
        urls = ", ".join(b.url for b in running.listeners)
        # One machine-readable line on stdout: launchers and tests wait for it.
        print(f"causeway broker {running.broker_id} ready: {urls}", flush=True)
        if banner:
            bootstrap = running.bootstrap()
            print(
                f"\nBootstrap servers: {bootstrap}\n"
                f"Topics: {', '.join(sorted(initial_topics))}\n\n"
                f"Try it:\n"
                f"  echo hello | kcat -b {bootstrap} -P -t demo\n"
                f"  kcat -b {bootstrap} -C -t demo -o beginning -e\n\n"
                "Ctrl-C stops the broker.",
                flush=True,
            )


def _parse_topics(items: Sequence[str]) -> dict[str, int]:
    topics: dict[str, int] = {}
    for item in items:
        name, _, count = item.partition(":")
        try:
            topics[name] = int(count) if count else 1
        except ValueError:
            raise ConfigError(f"--topic {item}: partitions must be a number") from None
    return topics


def _broker(args: argparse.Namespace) -> int:
    return run("causeway broker", lambda: trio.run(_serve_until_signalled, _broker_config(args),
                                                   _parse_topics(args.topic), False), errors=_ERRORS)


def _demo(args: argparse.Namespace) -> int:
    args.data_dir = args.data_dir or Path(".causeway/demo")
    args.listen = args.listen or ["127.0.0.1:9092"]
    return run("causeway demo", lambda: trio.run(_serve_until_signalled, _broker_config(args), {"demo": 3}, True),
               errors=_ERRORS)


def _add_broker_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, help="log directory (log.dirs)")
    parser.add_argument(
        "--listen",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="listen address (repeatable; NAME://HOST:PORT for a named listener); port 0 binds a free port",
    )
    parser.add_argument("--config", type=Path, help="server.properties-style file with Kafka config keys")
    parser.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE", help="a config key (repeatable)"
    )
    parser.add_argument("--broker-id", type=int, help="node.id / broker.id")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    broker = commands.add_parser(
        "broker", help="run a broker: standalone, or one of a ZooKeeper-mode cluster with --zookeeper")
    _add_broker_arguments(broker)
    broker.add_argument(
        "--zookeeper", metavar="HOST:PORT[,HOST:PORT...][/CHROOT]",
        help="join the cluster coordinated by this ZooKeeper (zookeeper.connect); without it the broker is "
             "standalone, its metadata in its data dir")
    broker.add_argument(
        "--topic", action="append", default=[], metavar="NAME[:PARTITIONS]", help="create a topic at start if missing"
    )
    broker.set_defaults(func=_broker)

    demo = commands.add_parser("demo", help="a standalone broker with a 'demo' topic on 127.0.0.1:9092")
    _add_broker_arguments(demo)
    demo.set_defaults(func=_demo)
