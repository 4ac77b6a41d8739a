"""`causeway acls`: list, add and remove ACLs, like kafka-acls.sh (its --bootstrap-server form).

    causeway acls --bootstrap-server HOST:PORT [--command-config FILE] --list
                  [--topic T | --group G | --cluster | --transactional-id X]...
                  [--resource-pattern-type literal|prefixed|match|any] [--principal P]...
    causeway acls --bootstrap-server HOST:PORT --add|--remove
                  --allow-principal P... [--allow-host H...] --deny-principal P... [--deny-host H...]
                  [--operation OP...] --topic T... --group G... --cluster --transactional-id X...
                  [--resource-pattern-type literal|prefixed] [--producer [--idempotent]] [--consumer] [--force]

Over the admin APIs (CreateAcls, DescribeAcls, DeleteAcls) of any Kafka-compatible cluster, as
kafka-acls's AclCommand builds them: each resource option names a resource pattern (literal unless
--resource-pattern-type says otherwise); --operation defaults to All; a principal without hosts
applies from every host (``*``); --producer stands for Write, Describe and Create on the topics
(and Write, Describe on the transactional ids, IdempotentWrite on the cluster with --idempotent),
--consumer for Read and Describe on the topics and Read on the groups. --remove without a
principal removes every ACL of the resource, after a confirmation --force skips. What is printed
is what kafka-acls prints. Errors carry Kafka's names (``Error: CLUSTER_AUTHORIZATION_FAILED: ...``)
and exit 1; a command line that cannot be run exits 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import trio

from broker.client import Client, admin, open_client
from deploy.cli.client_config import add_command_config, command_security
from deploy.cli.command import UsageError, run
from security.acl import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    WILDCARD,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclError,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)

__all__ = ["register"]

_PATTERN_TYPES = {"literal": PatternType.LITERAL, "prefixed": PatternType.PREFIXED, "match": PatternType.MATCH,
                  "any": PatternType.ANY}


@dataclass(frozen=True, slots=True)
class _Resource:
    """What one resource option names: a pattern, or (for --list and --remove) a pattern filter."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    def __str__(self) -> str:  # as kafka-acls prints a ResourcePatternFilter
        return (f"ResourcePatternFilter(resourceType={self.resource_type.name}, name={self.name}, "
                f"patternType={self.pattern_type.name})")

    def pattern(self) -> ResourcePattern:
        return ResourcePattern(self.resource_type, self.name, self.pattern_type)

    def selecting(self, entry: AccessControlEntry | None = None) -> AclBindingFilter:
        if entry is None:
            return AclBindingFilter(self.resource_type, self.name, self.pattern_type)
        return AclBindingFilter(self.resource_type, self.name, self.pattern_type, entry.principal, entry.host,
                                entry.operation, entry.permission)


def _pattern_text(pattern: ResourcePattern) -> str:
    return (f"ResourcePattern(resourceType={pattern.resource_type.name}, name={pattern.name}, "
            f"patternType={pattern.pattern_type.name})")


def _entry_text(entry: AccessControlEntry) -> str:
    return (f"(principal={entry.principal}, host={entry.host}, operation={entry.operation.name}, "
            f"permissionType={entry.permission.name})")


def _entries_block(entries: Iterable[AccessControlEntry]) -> str:
    # kafka-acls's layout, spaces and all: "<title>: \n \t(e1)\n\t(e2) \n"
    return "\n".join("\t" + _entry_text(e) for e in sorted(entries))


def _resources(args: argparse.Namespace, *, required: bool) -> list[_Resource]:
    pattern_type = _PATTERN_TYPES[args.resource_pattern_type]
    found = [_Resource(ResourceType.TOPIC, t.strip(), pattern_type) for t in args.topic]
    if args.cluster or args.idempotent:
        found.append(_Resource(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL))
    found += [_Resource(ResourceType.GROUP, g.strip(), pattern_type) for g in args.group]
    found += [_Resource(ResourceType.TRANSACTIONAL_ID, x.strip(), pattern_type) for x in args.transactional_id]
    if required and not found:
        raise UsageError("You must provide at least one resource: --topic <topic> or --cluster or --group <group> "
                         "or --transactional-id <id>")
    return list(dict.fromkeys(found))


def _operation(name: str) -> Operation:
    try:
        operation = Operation.from_title(name.strip())
    except AclError:
        operation = Operation.UNKNOWN
    if operation in (Operation.UNKNOWN, Operation.ANY):
        valid = ", ".join(o.title for o in Operation if o not in (Operation.UNKNOWN, Operation.ANY))
        raise UsageError(f"unknown --operation {name!r}; valid ones: {valid}")
    return operation


def _entries(args: argparse.Namespace, operations: Iterable[Operation]) -> set[AccessControlEntry]:
    """kafka-acls's getAcl: each principal from each of its hosts (``*`` without --*-host), each operation."""
    entries = set()
    for principals, hosts, permission in ((args.allow_principal, args.allow_host, Permission.ALLOW),
                                          (args.deny_principal, args.deny_host, Permission.DENY)):
        for principal in principals:
            for host in hosts or [WILDCARD]:
                for operation in operations:
                    entry = AccessControlEntry(principal.strip(), host.strip(), operation, permission)
                    try:
                        entry.check()
                    except AclError as exc:
                        raise UsageError(str(exc)) from None
                    entries.add(entry)
    return entries


def _resource_acls(args: argparse.Namespace) -> dict[_Resource, set[AccessControlEntry]]:
    """What --add or --remove is about: resource -> entries (kafka-acls's getResourceFilterToAcls)."""
    resources = _resources(args, required=True)
    plan: dict[_Resource, set[AccessControlEntry]] = {}
    if not args.producer and not args.consumer:
        operations = [_operation(o) for o in args.operation or ["All"]]
        for resource in resources:
            plan[resource] = _entries(args, operations)
    if args.producer:
        for resource in resources:
            if resource.resource_type is ResourceType.TOPIC:
                plan.setdefault(resource, set()).update(
                    _entries(args, (Operation.WRITE, Operation.DESCRIBE, Operation.CREATE)))
            elif resource.resource_type is ResourceType.TRANSACTIONAL_ID:
                plan.setdefault(resource, set()).update(_entries(args, (Operation.WRITE, Operation.DESCRIBE)))
            elif resource.resource_type is ResourceType.CLUSTER and args.idempotent:
                plan.setdefault(resource, set()).update(_entries(args, (Operation.IDEMPOTENT_WRITE,)))
    if args.consumer:
        for resource in resources:
            if resource.resource_type is ResourceType.TOPIC:
                plan.setdefault(resource, set()).update(_entries(args, (Operation.READ, Operation.DESCRIBE)))
            elif resource.resource_type is ResourceType.GROUP:
                plan.setdefault(resource, set()).update(_entries(args, (Operation.READ,)))
    for resource, entries in plan.items():
        supported = SUPPORTED_OPERATIONS[resource.resource_type]
        refused = sorted({e.operation.title for e in entries if e.operation is not Operation.ALL} -
                         {o.title for o in supported})
        if refused:
            raise UsageError(f"ResourceType {resource.resource_type.title} only supports operations "
                             f"{', '.join(o.title for o in (Operation.ALL, *supported))}, not {', '.join(refused)}")
    return plan


async def _list(client: Client, resources: Sequence[_Resource], principals: Sequence[str]) -> None:
    found: list[AclBinding] = []
    for selected in [r.selecting() for r in resources] or [AclBindingFilter()]:
        found += await admin.describe_acls(client, selected)
    by_pattern: dict[ResourcePattern, set[AccessControlEntry]] = {}
    for binding in found:
        by_pattern.setdefault(binding.pattern, set()).add(binding.entry)
    shown_principals: Sequence[str | None] = principals or [None]
    for principal in shown_principals:
        if principal is not None:
            print(f"ACLs for principal `{principal}`")
        for pattern, entries in sorted(by_pattern.items()):
            shown = [e for e in entries if principal is None or e.principal == principal]
            if shown:
                print(f"Current ACLs for resource `{_pattern_text(pattern)}`: \n {_entries_block(shown)} \n")


def _confirmed(args: argparse.Namespace, question: str) -> bool:
    if args.force:
        return True
    print(question, flush=True)
    return sys.stdin.readline().strip().lower() == "y"


async def _run(args: argparse.Namespace, plan: dict[_Resource, set[AccessControlEntry]]) -> None:
    async with open_client(args.bootstrap_server, client_id="causeway-acls", security=command_security(args),
                           request_timeout_s=args.timeout) as client:
        resources = _resources(args, required=False)
        if args.list:
            await _list(client, resources, [p.strip() for p in args.principal])
            return
        for resource, entries in plan.items():
            if args.add:
                title = f"Adding ACLs for resource `{_pattern_text(resource.pattern())}`"
                print(f"{title}: \n {_entries_block(entries)} \n")
                refused = await admin.create_acls(client, [AclBinding(resource.pattern(), e) for e in sorted(entries)])
                first = next((error for error in refused if error is not None), None)
                if first is not None:
                    raise first
            elif not entries:
                question = f"Are you sure you want to delete all ACLs for resource filter `{resource}`? (y/n)"
                if _confirmed(args, question):
                    await admin.delete_acls(client, [resource.selecting()])
            elif _confirmed(args, f"Are you sure you want to remove ACLs: \n {_entries_block(entries)} \n from "
                                  f"resource filter `{resource}`? (y/n)"):
                await admin.delete_acls(client, [resource.selecting(e) for e in sorted(entries)])
        await _list(client, resources, [])


def _main(args: argparse.Namespace) -> int:
    def body() -> None:
        plan: dict[_Resource, set[AccessControlEntry]] = {}
        principals = args.allow_principal or args.deny_principal
        if args.list:
            if principals or args.operation or args.producer or args.consumer:
                raise UsageError("--list takes resources, --resource-pattern-type and --principal only")
        else:
            if args.principal:
                raise UsageError("--principal goes with --list; --add and --remove take --allow-principal and "
                                 "--deny-principal")
            plan = _resource_acls(args)
            if args.add:
                if args.resource_pattern_type not in ("literal", "prefixed"):
                    raise UsageError(f"A '--resource-pattern-type' value of '{args.resource_pattern_type}' is not "
                                     "valid when adding acls.")
                if not principals:
                    raise UsageError("You must specify one of: --allow-principal, --deny-principal when trying to "
                                     "add ACLs.")
        trio.run(_run, args, plan)

    return run("causeway acls", body, bootstrap=args.bootstrap_server)


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser("acls", help="list, add and remove ACLs (like kafka-acls)")
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT")
    add_command_config(parser)
    action = parser.add_mutually_exclusive_group(required=True)
    for name in ("list", "add", "remove"):
        action.add_argument(f"--{name}", action="store_true")
    parser.add_argument("--topic", action="append", default=[], metavar="TOPIC")
    parser.add_argument("--group", action="append", default=[], metavar="GROUP")
    parser.add_argument("--cluster", action="store_true", help="the cluster resource")
    parser.add_argument("--transactional-id", action="append", default=[], metavar="ID")
    parser.add_argument("--resource-pattern-type", choices=tuple(_PATTERN_TYPES), default="literal",
                        type=str.lower, help="literal (default), prefixed; match and any select with --list/--remove")
    parser.add_argument("--allow-principal", action="append", default=[], metavar="TYPE:NAME")
    parser.add_argument("--deny-principal", action="append", default=[], metavar="TYPE:NAME")
    parser.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                        help="(default * when an --allow-principal is given)")
    parser.add_argument("--deny-host", action="append", default=[], metavar="HOST",
                        help="(default * when a --deny-principal is given)")
    parser.add_argument("--operation", action="append", default=[], metavar="OP",
                        help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
                             "AlterConfigs, IdempotentWrite, All (default All)")
    parser.add_argument("--principal", action="append", default=[], metavar="TYPE:NAME",
                        help="with --list: only the ACLs of this principal")
    parser.add_argument("--producer", action="store_true",
                        help="Write, Describe, Create on the topics (Write, Describe on transactional ids)")
    parser.add_argument("--idempotent", action="store_true", help="with --producer: IdempotentWrite on the cluster")
    parser.add_argument("--consumer", action="store_true",
                        help="Read, Describe on the topics, Read on the groups")
    parser.add_argument("--force", action="store_true", help="remove without asking")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per request (default 30)")
    parser.set_defaults(func=_main)
