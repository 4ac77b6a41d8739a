"""``--command-config FILE``: a Kafka client properties file for the tools, as Kafka's tools take
it (``security.protocol``, ``ssl.*``, ``sasl.mechanism``, ``sasl.jaas.config``), turned into the
TLS and SASL settings of Causeway's client."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from deploy.cli.command import Refused

if TYPE_CHECKING:
    from security.client import ClientSecurity

__all__ = ["add_command_config", "command_security", "file_security"]


def add_command_config(parser: argparse.ArgumentParser, *aliases: str) -> None:
    parser.add_argument("--command-config", *aliases, dest="command_config", type=Path, metavar="FILE",
                        help="Kafka client properties: security.protocol, ssl.*, sasl.mechanism, sasl.jaas.config")


def command_security(args: argparse.Namespace) -> ClientSecurity | None:
    """The client security of `args.command_config`, or None without one. Raises Refused naming
    the file and the key that cannot be used."""
    path: Path | None = getattr(args, "command_config", None)
    return None if path is None else file_security(path, "--command-config")


def file_security(path: Path, what: str) -> ClientSecurity:
    """The client security of the Kafka client properties file `path` (`what` names it in the
    error). Raises Refused naming the file and the key that cannot be used."""
    # Imported here: the commands that take no --command-config do not load TLS and SCRAM.
    from broker.config import ConfigError, load_properties
    from security.client import client_security

    try:
        props = load_properties(path)
    except (OSError, ConfigError) as exc:
        raise Refused(f"cannot read {what} {path}: {exc}") from None
    try:
        return client_security(props, str(path))
    except ConfigError as exc:
        raise Refused(str(exc)) from None
