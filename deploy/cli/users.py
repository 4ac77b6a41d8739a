"""`causeway users`: list, add and delete SCRAM users, like `kafka-configs --entity-type users`.

    causeway users --bootstrap-server HOST:PORT [--command-config F] --list
    causeway users --bootstrap-server HOST:PORT --add --user alice [--mechanism SCRAM-SHA-512]
                   [--iterations 4096] [--password-file F]
    causeway users --bootstrap-server HOST:PORT --delete --user alice [--mechanism M]

The password is read from --password-file or stdin (prompted for on a terminal), never from the
command line, where `ps` and shell history would keep it. It is salted here (KIP-554) and only
the salted form crosses the wire; the broker stores Kafka's credential (ZooKeeper's
/config/users/<user>, or a standalone broker's users file). Errors name Kafka's error and exit 1.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from pathlib import Path

import trio

from broker.client import admin, open_client
from deploy.cli.client_config import add_command_config, command_security
from deploy.cli.command import Refused, UsageError, run
from security.scram import MAX_ITERATIONS, MECHANISMS, MIN_ITERATIONS, salt_password

__all__ = ["register"]

_NAMES = {number: name for name, (number, _) in MECHANISMS.items()}


def _password(args: argparse.Namespace) -> str:
    if args.password_file is not None:
        try:
            text = Path(args.password_file).read_text(encoding="utf-8")
        except OSError as exc:
            raise Refused(f"cannot read --password-file {args.password_file}: {exc.strerror or exc}") from None
        password = text.rstrip("\r\n")
    elif sys.stdin.isatty():
        password = getpass.getpass(f"password for {args.user}: ")
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        raise UsageError("the password is empty")
    return password


def upsertion(user: str, mechanism: str, password: str, iterations: int) -> admin.ScramUpsertion:
    salt, salted = salt_password(mechanism, password, iterations)
    return admin.ScramUpsertion(user, MECHANISMS[mechanism][0], iterations, salt, salted)


async def _run(args: argparse.Namespace, password: str | None) -> None:
    async with open_client(args.bootstrap_server, client_id="causeway-users", security=command_security(args),
                           request_timeout_s=args.timeout) as client:
        if args.list:
            users = await admin.describe_user_scram_credentials(client, [args.user] if args.user else None)
            for user, infos in sorted(users.items()):
                described = ", ".join(f"{_NAMES.get(m, m)}(iterations={i})" for m, i in infos)
                print(f"SCRAM credential configs for user-principal '{user}' are {described}")
        elif args.add:
            assert password is not None
            await admin.alter_user_scram_credentials(
                client, [upsertion(args.user, args.mechanism, password, args.iterations)])
            print(f"Completed updating config for user {args.user}.")
        else:
            mechanisms = [args.mechanism] if args.mechanism_given else list(MECHANISMS)
            if not args.mechanism_given:
                existing = await admin.describe_user_scram_credentials(client, [args.user])
                have = {m for m, _ in existing.get(args.user, [])}
                mechanisms = [name for name in mechanisms if MECHANISMS[name][0] in have]
            await admin.alter_user_scram_credentials(
                client, deletions=[(args.user, MECHANISMS[name][0]) for name in mechanisms])
            print(f"Completed updating config for user {args.user}.")


def _main(args: argparse.Namespace) -> int:
    def body() -> None:
        if (args.add or args.delete) and not args.user:
            raise UsageError("--user is required with --add and --delete")
        if not MIN_ITERATIONS <= args.iterations <= MAX_ITERATIONS:
            raise UsageError(f"--iterations must be from {MIN_ITERATIONS} to {MAX_ITERATIONS}, as Kafka allows")
        args.mechanism_given = args.mechanism is not None
        args.mechanism = args.mechanism or "SCRAM-SHA-512"
        password = _password(args) if args.add else None
        trio.run(_run, args, password)

    return run("causeway users", body, bootstrap=args.bootstrap_server)


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser("users", help="list, add and delete SCRAM users (like kafka-configs "
                                                 "--entity-type users)")
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT")
    add_command_config(parser)
    action = parser.add_mutually_exclusive_group(required=True)
    for name in ("list", "add", "delete"):
        action.add_argument(f"--{name}", action="store_true")
    parser.add_argument("--user", help="the user name (with --list: only this user)")
    parser.add_argument("--mechanism", choices=sorted(MECHANISMS),
                        help="SCRAM-SHA-512 when adding; every mechanism the user has when deleting")
    parser.add_argument("--iterations", type=int, default=MIN_ITERATIONS,
                        help=f"PBKDF2 iterations, {MIN_ITERATIONS} to {MAX_ITERATIONS} (default {MIN_ITERATIONS})")
    parser.add_argument("--password-file", metavar="FILE",
                        help="read the password from FILE (default: stdin, prompted for on a terminal)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per request (default 30)")
    parser.set_defaults(func=_main)
