"""The ``causeway`` command.

Subcommands:
  broker  run one broker (standalone: metadata in its data dir)
  demo    what ``make up`` runs for now: a standalone broker with a demo topic
  wan     the WAN-link emulator (the Toxiproxy HTTP API)
  up, status, down   a whole topology on this machine
  topology           check, explain or draw a topology file
  topics             list, create, describe, alter, delete topics (like kafka-topics)
  groups             list, describe, reset, delete consumer groups (like kafka-consumer-groups)
  acls               list, add and remove ACLs (like kafka-acls)
  produce, consume   records from stdin / to stdout (like kafka-console-producer/-consumer)
  mirror             copy topics between clusters, as MirrorMaker 2
  pipeline           Spark jobs: audit a mirror, its lag, copy or export a topic
  zookeeper          a ZooKeeper ensemble (1 or 3 nodes) for ZooKeeper-mode clusters
  prometheus         Prometheus (Debian's package) with a given config, as `causeway up` runs it
  certs              a development CA and broker and client certificates (TLS, mutual TLS)
  drill              a disaster-recovery drill on a running topology (RPO, RTO, a timeline)

One module per command in this package (`deploy.cli.broker`, `deploy.cli.console`, ...), each
with a `register(subparsers)`; `deploy.cli.command` holds what they share: exceptions mapped to
exit codes and SIGINT/SIGTERM handling.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

__all__ = ["main"]

# The command modules, in the order `causeway --help` lists them, with the help line each module
# gives its command. Only the module of the command being run is imported (its imports, trio
# and the protocol among them, cost most of a second); the others appear as placeholders with
# the same help line, so `causeway --help` reads as before.
# tests/unit/deploy/test_cli_lazy.py checks these lines against the modules.
COMMAND_MODULES: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    ("deploy.cli.broker", (
        ("broker", "run a broker: standalone, or one of a ZooKeeper-mode cluster with --zookeeper"),
        ("demo", "a standalone broker with a 'demo' topic on 127.0.0.1:9092"),
    )),
    ("deploy.cli.launch", (
        ("up", "start every cluster, WAN link and mirror of a topology file"),
        ("status", "endpoints and health of a running topology"),
        ("down", "stop everything `causeway up` started"),
    )),
    ("deploy.cli.mirror", (("mirror", "copy topics from one cluster to another (MirrorMaker 2 conventions)"),)),
    ("deploy.cli.topics", (("topics", "list, create, describe, alter and delete topics (like kafka-topics)"),)),
    ("deploy.cli.groups", (
        ("groups", "list, describe, reset and delete consumer groups (like kafka-consumer-groups)"),
    )),
    ("deploy.cli.acls", (("acls", "list, add and remove ACLs (like kafka-acls)"),)),
    ("deploy.cli.console", (
        ("produce", "records from stdin, one per line (like kafka-console-producer)"),
        ("consume", "records to stdout (like kafka-console-consumer)"),
    )),
    ("deploy.cli.topology", (("topology", "check, explain or draw a topology file"),)),
    ("deploy.cli.wan", (("wan", "run the WAN-link emulator (Toxiproxy HTTP API)"),)),
    ("deploy.cli.pipeline", (("pipeline", "Spark jobs: audit a mirror, its lag, copy or export a topic"),)),
    ("deploy.cli.zookeeper", (("zookeeper", "run a ZooKeeper ensemble (1 or 3 nodes) for ZooKeeper-mode clusters"),)),
    ("deploy.cli.prometheus", (
        ("prometheus", "run Prometheus (Debian's package) with a given config, e.g. the one `causeway up` makes"),
    )),
    ("deploy.cli.certs", (("certs", "a development CA and broker and client certificates (TLS, mutual TLS)"),)),
    ("deploy.cli.users", (("users", "list, add and delete SCRAM users (like kafka-configs --entity-type users)"),)),
    ("deploy.cli.drill", (
        ("drill", "a disaster-recovery drill: switch-over or failover under load, with its RPO and RTO"),
    )),
)


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The `causeway` parser: every command's module registers its own (command None), or only
    the module of `command` does and the rest are placeholders with their help lines."""
    parser = argparse.ArgumentParser(prog="causeway", description="Causeway: Kafka-compatible brokers and mirrors")
    commands = parser.add_subparsers(dest="command", required=True)
    for module, entries in COMMAND_MODULES:
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


def main(argv: list[str] | None = None) -> int:
    parser = build_parser(_command_in(sys.argv[1:] if argv is None else argv))
    args = parser.parse_args(argv)
    # A command's INFO log lines are progress too (a cluster up, a group's offsets carried over):
    # its --quiet leaves warnings and errors (deploy/cli/command.py add_quiet).
    _setup_logging("warning" if getattr(args, "quiet", False) else getattr(args, "log_level", "info"))
    return int(args.func(args))
