"""`causeway topics`: list, create, describe, alter and delete topics, like kafka-topics.sh.

    causeway topics --bootstrap-server HOST:PORT --list
    causeway topics --bootstrap-server HOST:PORT --create --topic T --partitions 3 [--config k=v]...
    causeway topics --bootstrap-server HOST:PORT --describe [--topic T]
    causeway topics --bootstrap-server HOST:PORT --alter --topic T [--partitions N]
                    [--config k=v]... [--delete-config k]...
    causeway topics --bootstrap-server HOST:PORT --delete --topic T

Works against any Kafka-compatible cluster (it uses broker.client). Errors are printed with
Kafka's error names and exit 1.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import trio

from broker.client import admin, open_client
from deploy.cli.client_config import add_command_config, command_security
from deploy.cli.command import UsageError, run

__all__ = ["register"]


def _configs(items: Sequence[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--config wants KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


async def _run(args: argparse.Namespace) -> None:
    async with open_client(args.bootstrap_server, client_id="causeway-topics", security=command_security(args),
                           request_timeout_s=args.timeout) as client:
        if args.list:
            for name in await admin.list_topics(client, include_internal=args.include_internal):
                print(name)
        elif args.create:
            await admin.create_topics(client, {args.topic: admin.NewTopic(
                args.partitions or 1, args.replication_factor or -1, _configs(args.config))},
                exist_ok=args.if_not_exists)
            print(f"Created topic {args.topic}.")
        elif args.describe:
            names = [args.topic] if args.topic else None
            topics = await admin.describe_topics(client, names)
            for name, topic in sorted(topics.items()):
                if topic.is_internal and not (args.include_internal or args.topic):
                    continue
                configs = await admin.describe_configs(client, name)
                overrides = ",".join(f"{k}={e.value}" for k, e in sorted(configs.items()) if not e.is_default)
                print(f"Topic: {name}\tPartitionCount: {topic.partition_count}\t"
                      f"ReplicationFactor: {len(topic.partitions[0].replicas) if topic.partitions else 0}\t"
                      f"Configs: {overrides}")
                for p in sorted(topic.partitions.values(), key=lambda p: p.partition):
                    print(f"\tTopic: {name}\tPartition: {p.partition}\tLeader: {p.leader}\t"
                          f"Replicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}")
        elif args.alter:
            if args.partitions:
                await admin.create_partitions(client, {args.topic: args.partitions})
            updates: dict[str, str | None] = {**_configs(args.config), **{k: None for k in args.delete_config}}
            if updates:
                await admin.alter_configs(client, args.topic, updates)
            print(f"Altered topic {args.topic}.")
        elif args.delete:
            await admin.delete_topics(client, [args.topic], missing_ok=args.if_exists)
            print(f"Deleted topic {args.topic}.")


def _main(args: argparse.Namespace) -> int:
    def body() -> None:
        if (args.create or args.alter or args.delete) and not args.topic:
            raise UsageError("--topic is required with --create, --alter and --delete")
        _configs(args.config)  # a bad --config is refused before connecting
        trio.run(_run, args)

    return run("causeway topics", body, bootstrap=args.bootstrap_server)


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser("topics", help="list, create, describe, alter and delete topics (like kafka-topics)")
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT")
    add_command_config(parser)
    action = parser.add_mutually_exclusive_group(required=True)
    for name in ("list", "create", "describe", "alter", "delete"):
        action.add_argument(f"--{name}", action="store_true")
    parser.add_argument("--topic")
    parser.add_argument("--partitions", type=int)
    parser.add_argument("--replication-factor", type=int)
    parser.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--delete-config", action="append", default=[], metavar="KEY")
    parser.add_argument("--if-not-exists", action="store_true")
    parser.add_argument("--if-exists", action="store_true")
    parser.add_argument("--include-internal", action="store_true")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per request (default 30)")
    parser.set_defaults(func=_main)
