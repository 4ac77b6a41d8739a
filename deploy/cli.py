"""The ``causeway`` command.

Subcommands:
  broker  run one broker (standalone: metadata in its data dir)
  demo    what ``make up`` runs for now: a standalone broker with a demo topic
  wan     the WAN-link emulator (the Toxiproxy HTTP API)
  up, status, down   a whole topology on this machine
  topology           check, explain or draw a topology file
  topics             list, create, describe, alter, delete topics (like kafka-topics)
  groups             list, describe, reset, delete consumer groups (like kafka-consumer-groups)
  produce, consume   records from stdin / to stdout (like kafka-console-producer/-consumer)
  mirror             copy topics between clusters, as MirrorMaker 2
"""

from __future__ import annotations

import argparse
import importlib
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.config import BrokerConfig

__all__ = ["main"]

log = logging.getLogger("causeway")

# The commands other modules register, in the order `causeway --help` lists them, with the help
# line each module gives its command. Only the module of the command being run is imported (its
# imports, trio and the protocol among them, cost most of a second); the others appear as
# placeholders with the same help line, so `causeway --help` reads as before.
# tests/unit/deploy/test_cli_lazy.py checks these lines against the modules.
_COMMAND_MODULES: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    ("deploy.launch_cli", (
        ("up", "start every cluster, WAN link and mirror of a topology file"),
        ("status", "endpoints and health of a running topology"),
        ("down", "stop everything `causeway up` started"),
    )),
    ("deploy.mirror_cli", (("mirror", "copy topics from one cluster to another (MirrorMaker 2 conventions)"),)),
    ("deploy.topics_cli", (("topics", "list, create, describe, alter and delete topics (like kafka-topics)"),)),
    ("deploy.groups_cli", (
        ("groups", "list, describe, reset and delete consumer groups (like kafka-consumer-groups)"),
    )),
    ("deploy.console_cli", (
        ("produce", "records from stdin, one per line (like kafka-console-producer)"),
        ("consume", "records to stdout (like kafka-console-consumer)"),
    )),
    ("deploy.topology_cli", (("topology", "check, explain or draw a topology file"),)),
    ("deploy.wan_cli", (("wan", "run the WAN-link emulator (Toxiproxy HTTP API)"),)),
)


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def _broker_config(args: argparse.Namespace) -> BrokerConfig:
    from broker.config import BrokerConfig, ignored_keys, load_properties, parse_overrides

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
    for key in ignored_keys(props):
        log.warning("config %s has no effect in Causeway; ignored", key)
    return BrokerConfig.from_properties(props)


async def _serve_until_signalled(config: BrokerConfig, initial_topics: dict[str, int], banner: bool) -> None:
    import trio

    from broker.server.broker import RunningBroker, run_broker

    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            running: RunningBroker = await nursery.start(
                lambda task_status: run_broker(config, initial_topics=initial_topics, task_status=task_status)
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
            async for signum in signals:
                log.info("received %s; shutting down", signal.Signals(signum).name)
                nursery.cancel_scope.cancel()
                break


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


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The `causeway` parser: every command's module registers its own (command None), or only
    the module of `command` does and the rest are placeholders with their help lines."""
    parser = argparse.ArgumentParser(prog="causeway", description="Causeway: Kafka-compatible brokers and mirrors")
    commands = parser.add_subparsers(dest="command", required=True)

    broker = commands.add_parser("broker", help="run a standalone broker")
    _add_broker_arguments(broker)
    broker.add_argument(
        "--topic", action="append", default=[], metavar="NAME[:PARTITIONS]", help="create a topic at start if missing"
    )

    demo = commands.add_parser("demo", help="a standalone broker with a 'demo' topic on 127.0.0.1:9092")
    _add_broker_arguments(demo)

    for module, entries in _COMMAND_MODULES:
        if command is None or any(name == command for name, _ in entries):
            importlib.import_module(module).register(commands)
        else:
            for name, help_text in entries:
                commands.add_parser(name, help=help_text)
    return parser


def _command_in(argv: Sequence[str]) -> str:
    """The command word of `argv`: its first argument that is not an option (the top-level
    parser has no option that takes a value); "" when there is none."""
    return next((arg for arg in argv if not arg.startswith("-")), "")


def _parse_topics(items: Sequence[str]) -> dict[str, int]:
    from broker.config import ConfigError

    topics: dict[str, int] = {}
    for item in items:
        name, _, count = item.partition(":")
        try:
            topics[name] = int(count) if count else 1
        except ValueError:
            raise ConfigError(f"--topic {item}: partitions must be a number") from None
    return topics


def _run_unwrapped(*args: object) -> None:
    """trio.run, re-raising a start-up failure by itself rather than inside the nurseries'
    exception groups, so `main` can print it as one clear line."""
    import trio

    from broker.config import ConfigError, StartupError

    try:
        trio.run(*args)  # type: ignore[arg-type]
    except BaseExceptionGroup as group:
        leaf: BaseException = group
        while isinstance(leaf, BaseExceptionGroup) and len(leaf.exceptions) == 1:
            leaf = leaf.exceptions[0]
        if isinstance(leaf, (StartupError, ConfigError, OSError)):
            raise leaf from None
        raise


def main(argv: list[str] | None = None) -> int:
    parser = build_parser(_command_in(sys.argv[1:] if argv is None else argv))
    args = parser.parse_args(argv)
    _setup_logging(getattr(args, "log_level", "info"))
    if hasattr(args, "func"):
        # Commands that register themselves (deploy/*_cli.py) run their own function.
        return int(args.func(args))
    from broker.config import ConfigError, StartupError  # the broker commands' errors

    try:
        if args.command == "demo":
            args.data_dir = args.data_dir or Path(".causeway/demo")
            args.listen = args.listen or ["127.0.0.1:9092"]
            config = _broker_config(args)
            _run_unwrapped(_serve_until_signalled, config, {"demo": 3}, True)
        elif args.command == "broker":
            config = _broker_config(args)
            _run_unwrapped(_serve_until_signalled, config, _parse_topics(args.topic), False)
    except StartupError as exc:
        print(f"causeway: cannot start: {exc}", file=sys.stderr)
        return 1
    except ConfigError as exc:
        print(f"causeway: config error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"causeway: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
