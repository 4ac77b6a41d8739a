"""``causeway certs create``: a development CA and the broker and client certificates it signs."""

from __future__ import annotations

import argparse
from pathlib import Path

from deploy.cli.command import ErrorRule, UsageError, run
from security.certs import (
    CA_CERT,
    DEFAULT_DAYS,
    DEFAULT_HOSTS,
    CertsError,
    Identity,
    check_identity,
    create_certificates,
)

__all__ = ["register"]

DEFAULT_DIR = Path(".causeway/certs")

_ERRORS: tuple[ErrorRule, ...] = (
    (CertsError, 1, lambda exc: f"causeway certs: {exc}"),
    (OSError, 1, lambda exc: f"causeway certs: {exc}"),
)


def _broker(text: str) -> Identity:
    # NAME or NAME=HOST[,HOST...]: a broker without hosts is reached by its name and on loopback.
    name, equals, hosts = text.partition("=")
    listed = tuple(host.strip() for host in hosts.split(",") if host.strip())
    if equals and not listed:
        raise argparse.ArgumentTypeError(f"{text!r}: no host after '='")
    return _checked(Identity(name, "broker", listed or (name, *DEFAULT_HOSTS)))


def _client(text: str) -> Identity:
    if "=" in text:
        raise argparse.ArgumentTypeError(f"{text!r}: a client certificate names no hosts, only its principal")
    return _checked(Identity(text, "client"))


def _checked(identity: Identity) -> Identity:
    try:
        check_identity(identity)
    except CertsError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return identity


def _create(args: argparse.Namespace) -> int:
    identities = [*args.broker, *args.client]
    if not identities:
        identities = [_broker("broker"), _client("client")]
    if args.days < 1:
        raise UsageError("--days must be at least 1")
    ca, issued = create_certificates(args.dir, identities, days=args.days, renew=args.renew)
    print(f"CA: {'created' if ca.created else 'kept'} {args.dir / CA_CERT} "
          f"(valid until {ca.certificate.not_valid_after_utc:%Y-%m-%d})", flush=True)
    for result in issued:
        identity = result.identity
        where = f" for {', '.join(identity.hosts)}" if identity.role == "broker" else f" (User:CN={identity.name})"
        print(f"{identity.role} {identity.name}: {'issued' if result.issued else 'kept'}{where}: "
              f"{result.certificate}, {result.key}, {result.keystore_p12}, {result.properties}", flush=True)
    return 0


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = commands.add_parser(
        "certs", help="a development CA and broker and client certificates (TLS, mutual TLS)",
        description="Certificates for development and tests, made with the cryptography library. See "
        "docs/reference/cli/certs.md.")
    actions = parser.add_subparsers(dest="action", required=True)
    create = actions.add_parser(
        "create", help="make (or reuse) a CA and sign broker and client certificates",
        description="Make a CA in --dir (or reuse the one there) and sign a certificate for each --broker and "
        "--client: PEM key and chain, a PKCS12 keystore with its password, and a client.properties in Kafka's "
        "keys for each. An identity whose certificate is still good is kept (--renew issues all anew). "
        "Without --broker or --client: a broker 'broker' for localhost and 127.0.0.1, and a client 'client'.")
    create.add_argument("--dir", type=Path, default=DEFAULT_DIR,
                        help=f"where the CA and the certificates go (default {DEFAULT_DIR})")
    create.add_argument("--broker", type=_broker, action="append", default=[], metavar="NAME[=HOST,...]",
                        help="a broker certificate naming every host and address it is reached at "
                        f"(default hosts: NAME, {', '.join(DEFAULT_HOSTS)}); repeatable")
    create.add_argument("--client", type=_client, action="append", default=[], metavar="NAME",
                        help="a client certificate with the principal User:CN=NAME (mutual TLS); repeatable")
    create.add_argument("--days", type=int, default=DEFAULT_DAYS,
                        help=f"validity of new certificates, up to 3650 (default {DEFAULT_DAYS})")
    create.add_argument("--renew", action="store_true", help="issue every named identity anew (the CA is kept)")
    create.set_defaults(func=lambda args: run("causeway certs", lambda: _create(args), errors=_ERRORS))
