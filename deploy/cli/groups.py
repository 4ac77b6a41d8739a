"""`causeway groups`: list, describe, reset and delete consumer groups, like kafka-consumer-groups.sh.

    causeway groups --bootstrap-server HOST:PORT --list [--state]
    causeway groups --bootstrap-server HOST:PORT --describe (--group G... | --all-groups)
                    [--offsets | --members [--verbose] | --state]
    causeway groups --bootstrap-server HOST:PORT --reset-offsets (--group G... | --all-groups)
                    (--topic T[:P,P]... | --all-topics)
                    (--to-earliest | --to-latest | --to-offset N | --shift-by N | --to-datetime ISO)
                    [--dry-run | --execute]
    causeway groups --bootstrap-server HOST:PORT --delete (--group G... | --all-groups)
    causeway groups --bootstrap-server HOST:PORT --delete-offsets --group G --topic T[:P,P]...

Works against any Kafka-compatible cluster (it uses broker.client.groups). Output follows
kafka-consumer-groups: the same columns, "-" where there is no value. Kafka's error names in
messages; exit 0 on success, 1 when the cluster refused or could not be reached, 2 for a bad
command line.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from collections.abc import Iterable, Sequence

import trio

from broker.client import (
    Client,
    ErrorCode,
    GroupDescription,
    KafkaError,
    TopicPartition,
    admin,
    commit_offsets,
    delete_groups,
    delete_offsets,
    describe_groups,
    fetch_offsets,
    list_groups,
    open_client,
)
from deploy.cli.client_config import add_command_config, command_security
from deploy.cli.command import Refused, UsageError, run

__all__ = ["register"]

PROG = "causeway groups"
# Kafka's rule for --reset-offsets: only a group nobody consumes in may be moved.
_INACTIVE = frozenset({"Empty", "Dead"})
_RESET_SCENARIOS = ("to_earliest", "to_latest", "to_offset", "shift_by", "to_datetime")


def parse_topic_spec(spec: str) -> tuple[str, list[int] | None]:
    """"orders" -> ("orders", None: every partition); "orders:0,2" -> ("orders", [0, 2]).

    Raises UsageError for an empty topic or a partition that is not a number.
    """
    topic, sep, parts = spec.rpartition(":") if ":" in spec else (spec, "", "")
    topic = topic.strip()
    if not topic:
        raise UsageError(f"--topic wants TOPIC or TOPIC:PARTITION,PARTITION, got {spec!r}")
    if not sep:
        return topic, None
    try:
        partitions = sorted({int(p) for p in parts.split(",") if p.strip()})
    except ValueError:
        raise UsageError(f"--topic {spec!r}: partitions must be numbers") from None
    if not partitions or any(p < 0 for p in partitions):
        raise UsageError(f"--topic {spec!r}: partitions must be numbers >= 0")
    return topic, partitions


def parse_datetime(text: str) -> int:
    """An ISO 8601 date-time as Unix milliseconds: "2024-05-01T12:00:00.000" (local time, as
    kafka-consumer-groups reads it), with "Z" or "+02:00" for another zone."""
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--to-datetime wants YYYY-MM-DDTHH:mm:SS[.sss][Z|+HH:MM], got {text!r}") from None
    return int(when.timestamp() * 1000)  # naive means local time, as in Kafka


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Left-aligned columns, as kafka-consumer-groups prints them; the last one unpadded."""
    cells = [list(header), *([str(c) for c in row] for row in rows)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header) - 1)]
    lines = [" ".join([*(c.ljust(w) for c, w in zip(r, widths, strict=False)), r[-1]]).rstrip() for r in cells]
    return "\n".join(lines)


def _dash(value: object) -> str:
    return "-" if value is None else str(value)


# -- the actions ----------------------------------------------------------------------------


async def _group_ids(client: Client, args: argparse.Namespace) -> list[str]:
    if args.all_groups:
        return [g.group_id for g in await list_groups(client)]
    return list(dict.fromkeys(args.group))


async def _log_end_offsets(client: Client, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
    """Log end offsets, asked per topic, so a topic deleted since its commit only loses its own
    column ("-") rather than failing the whole description."""
    by_topic: dict[str, list[TopicPartition]] = {}
    for tp in tps:
        by_topic.setdefault(tp.topic, []).append(tp)
    out: dict[TopicPartition, int] = {}
    for group in by_topic.values():
        try:
            listed = await admin.list_offsets(client, {tp: admin.LATEST for tp in group})
        except KafkaError:
            continue
        out.update({tp: found.offset for tp, found in listed.items()})
    return out


def _group_notes(description: GroupDescription) -> None:
    if description.state == "Empty":
        print(f"\nConsumer group '{description.group_id}' has no active members.")
    elif description.state in ("PreparingRebalance", "CompletingRebalance"):
        print(f"\nWarning: Consumer group '{description.group_id}' is rebalancing.", file=sys.stderr)


async def _describe(client: Client, args: argparse.Namespace) -> int:
    groups = await _group_ids(client, args)
    if not groups:
        return 0
    described = await describe_groups(client, groups)
    status = 0
    for group_id, description in described.items():
        if not description.exists:
            print(f"Error: Consumer group '{group_id}' does not exist.", file=sys.stderr)
            status = 1
            continue
        if args.state:
            coordinator = f"{description.coordinator.address} ({description.coordinator.node_id})"
            print()
            print(table(["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
                        [[group_id, coordinator, description.protocol or "", description.state,
                          len(description.members)]]))
        elif args.members:
            _group_notes(description)
            header = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
            if args.verbose:
                header.append("ASSIGNMENT")
            rows = []
            for m in sorted(description.members, key=lambda m: m.member_id):
                row: list[object] = [group_id, m.member_id, m.client_host, m.client_id, len(m.assignment)]
                if args.verbose:
                    by_topic: dict[str, list[int]] = {}
                    for tp in sorted(m.assignment):
                        by_topic.setdefault(tp.topic, []).append(tp.partition)
                    row.append(",".join(f"{t}({','.join(map(str, ps))})" for t, ps in by_topic.items()) or "-")
                rows.append(row)
            if rows:
                print()
                print(table(header, rows))
        else:
            _group_notes(description)
            await _describe_offsets(client, description)
    return status


async def _describe_offsets(client: Client, description: GroupDescription) -> None:
    group_id = description.group_id
    committed = await fetch_offsets(client, group_id)
    owner = {tp: m for m in description.members for tp in m.assignment}
    partitions = sorted(set(committed) | set(owner))
    log_end = await _log_end_offsets(client, partitions)
    rows: list[list[object]] = []
    for tp in partitions:
        current = committed[tp].offset if tp in committed else None
        end = log_end.get(tp)
        lag = end - current if end is not None and current is not None else None
        m = owner.get(tp)
        rows.append([group_id, tp.topic, tp.partition, _dash(current), _dash(end), _dash(lag),
                     m.member_id if m else "-", m.client_host if m else "-", m.client_id if m else "-"])
    # Members with nothing assigned still show, as in kafka-consumer-groups.
    for m in sorted(description.members, key=lambda m: m.member_id):
        if not m.assignment:
            rows.append([group_id, "-", "-", "-", "-", "-", m.member_id, m.client_host, m.client_id])
    if rows:
        print()
        print(table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                     "HOST", "CLIENT-ID"], rows))


async def _list(client: Client, args: argparse.Namespace) -> int:
    listed = await list_groups(client)
    if args.state:
        print(table(["GROUP", "STATE"], [[g.group_id, g.state or "-"] for g in listed]))
    else:
        for g in listed:
            print(g.group_id)
    return 0


async def _partitions(client: Client, specs: Sequence[str]) -> list[TopicPartition]:
    """The partitions that --topic names (every partition of a bare topic name).

    Raises KafkaError(UNKNOWN_TOPIC_OR_PARTITION) for a topic or partition the cluster lacks.
    """
    parsed = [parse_topic_spec(s) for s in specs]
    topics = await admin.describe_topics(client, sorted({t for t, _ in parsed}))
    out: list[TopicPartition] = []
    for topic, partitions in parsed:
        have = sorted(topics[topic].partitions)
        for p in have if partitions is None else partitions:
            if p not in topics[topic].partitions:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic!r} has no partition {p}")
            out.append(TopicPartition(topic, p))
    return sorted(set(out))


async def _plan_reset(client: Client, args: argparse.Namespace, group_id: str) -> dict[TopicPartition, int]:
    committed = await fetch_offsets(client, group_id)
    if args.all_topics:
        partitions = sorted(committed)
    else:
        partitions = await _partitions(client, args.topic)
    if not partitions:
        return {}
    earliest = await admin.list_offsets(client, {tp: admin.EARLIEST for tp in partitions})
    latest = await admin.list_offsets(client, {tp: admin.LATEST for tp in partitions})

    def clamp(tp: TopicPartition, offset: int) -> int:
        # As Kafka: an offset outside the log goes to its nearest end.
        return max(earliest[tp].offset, min(latest[tp].offset, offset))

    if args.to_earliest:
        return {tp: earliest[tp].offset for tp in partitions}
    if args.to_latest:
        return {tp: latest[tp].offset for tp in partitions}
    if args.to_offset is not None:
        return {tp: clamp(tp, args.to_offset) for tp in partitions}
    if args.shift_by is not None:
        missing = [f"{tp.topic}-{tp.partition}" for tp in partitions if tp not in committed]
        if missing:
            raise Refused(f"cannot shift the offsets of {', '.join(missing)}: group '{group_id}' "
                          "has no committed offset there")
        return {tp: clamp(tp, committed[tp].offset + args.shift_by) for tp in partitions}
    when = parse_datetime(args.to_datetime)
    found = await admin.list_offsets(client, dict.fromkeys(partitions, when))
    # No record at or after that time: the log end, as Kafka does.
    return {tp: found[tp].offset if found[tp].offset >= 0 else latest[tp].offset for tp in partitions}


async def _reset(client: Client, args: argparse.Namespace) -> int:
    groups = await _group_ids(client, args)
    described = await describe_groups(client, groups)
    status = 0
    for group_id, description in described.items():
        if description.state not in _INACTIVE:
            print(f"Error: Assignments can only be reset if the group '{group_id}' is inactive, but the current "
                  f"state is {description.state}.", file=sys.stderr)
            status = 1
            continue
        plan = await _plan_reset(client, args, group_id)
        if args.execute and plan:
            await commit_offsets(client, group_id, plan)
        print()
        print(table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                    [[group_id, tp.topic, tp.partition, offset] for tp, offset in sorted(plan.items())]))
    if not args.execute:
        print("\nDry run: nothing was committed. Add --execute to commit these offsets.", file=sys.stderr)
    return status


async def _delete(client: Client, args: argparse.Namespace) -> int:
    groups = await _group_ids(client, args)
    if not groups:
        return 0
    results = await delete_groups(client, groups)
    failed = {g: code for g, code in results.items() if code != ErrorCode.NONE}
    done = [g for g, code in results.items() if code == ErrorCode.NONE]
    if not failed:
        print(f"Deletion of requested consumer groups ({', '.join(repr(g) for g in done)}) was successful.")
        return 0
    if done:
        print(f"These consumer groups were deleted successfully: {', '.join(repr(g) for g in done)}")
    print("Deletion of some consumer groups failed:", file=sys.stderr)
    for g, code in failed.items():
        reason = {ErrorCode.NON_EMPTY_GROUP: "the group is not empty (it has active members)",
                  ErrorCode.GROUP_ID_NOT_FOUND: "the group does not exist"}.get(code, "")
        print(f"* Group '{g}' could not be deleted due to: {code.name}" + (f" ({reason})" if reason else ""),
              file=sys.stderr)
    return 1


async def _delete_offsets(client: Client, args: argparse.Namespace) -> int:
    group_id = args.group[0]
    partitions = await _partitions(client, args.topic)
    results = await delete_offsets(client, group_id, partitions)
    failed = any(code != ErrorCode.NONE for code in results.values())
    topics = ", ".join(sorted({tp.topic for tp in partitions}))
    verdict = "failed" if failed else "succeeded"
    print(f"Request {verdict} for deleting offsets with topic {topics} group {group_id}")
    print()
    print(table(["TOPIC", "PARTITION", "STATUS"],
                [[tp.topic, tp.partition, "Successful" if code == ErrorCode.NONE else f"Error: {code.name}"]
                 for tp, code in sorted(results.items())]))
    return 1 if failed else 0


async def _run(args: argparse.Namespace) -> int:
    async with open_client(args.bootstrap_server, client_id="causeway-groups", security=command_security(args),
                           request_timeout_s=args.timeout) as client:
        if args.list:
            return await _list(client, args)
        if args.describe:
            return await _describe(client, args)
        if args.reset_offsets:
            return await _reset(client, args)
        if args.delete:
            return await _delete(client, args)
        return await _delete_offsets(client, args)


def check_arguments(args: argparse.Namespace) -> None:
    """Raise UsageError for combinations kafka-consumer-groups would refuse."""
    has_groups = bool(args.group) or args.all_groups
    if args.group and args.all_groups:
        raise UsageError("--group and --all-groups exclude each other")
    if (args.describe or args.reset_offsets or args.delete) and not has_groups:
        raise UsageError("--group or --all-groups is required with --describe, --reset-offsets and --delete")
    if args.delete_offsets and (len(args.group) != 1 or args.all_groups):
        raise UsageError("--delete-offsets takes exactly one --group")
    if args.delete_offsets and not args.topic:
        raise UsageError("--delete-offsets needs --topic")
    if (args.members or args.offsets) and not args.describe:
        raise UsageError("--members and --offsets go with --describe")
    if sum(map(bool, (args.members, args.offsets, args.state))) > 1:
        raise UsageError("--offsets, --members and --state exclude each other")
    if args.state and not (args.describe or args.list):
        raise UsageError("--state goes with --describe or --list")
    if args.verbose and not args.members:
        raise UsageError("--verbose goes with --describe --members")
    if (args.topic or args.all_topics) and not (args.reset_offsets or args.delete_offsets):
        raise UsageError("--topic and --all-topics go with --reset-offsets and --delete-offsets")
    if args.reset_offsets:
        if bool(args.topic) == args.all_topics:
            raise UsageError("--reset-offsets needs --topic (repeatable) or --all-topics")
        chosen = [s for s in _RESET_SCENARIOS if getattr(args, s) not in (None, False)]
        if len(chosen) != 1:
            raise UsageError("--reset-offsets needs exactly one of --to-earliest, --to-latest, --to-offset, "
                             "--shift-by, --to-datetime")
        if args.to_offset is not None and args.to_offset < 0:
            raise UsageError("--to-offset must be >= 0")
        if args.to_datetime is not None:
            parse_datetime(args.to_datetime)
    elif any(getattr(args, s) not in (None, False) for s in _RESET_SCENARIOS) or args.execute or args.dry_run:
        raise UsageError("--to-*, --shift-by, --dry-run and --execute go with --reset-offsets")
    for spec in args.topic:
        parse_topic_spec(spec)


def _main(args: argparse.Namespace) -> int:
    def body() -> int:
        check_arguments(args)
        return trio.run(_run, args)

    return run(PROG, body, bootstrap=args.bootstrap_server)


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "groups", help="list, describe, reset and delete consumer groups (like kafka-consumer-groups)",
        description="Consumer groups of any Kafka-compatible cluster, as kafka-consumer-groups.sh shows and "
                    "changes them. --reset-offsets prints its plan unless --execute is given, and refuses a "
                    "group that has active members, as Kafka does.")
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT")
    add_command_config(parser)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="every group's id (with --state: and its state)")
    action.add_argument("--describe", action="store_true",
                        help="per partition: committed offset, log end offset, lag and owner")
    action.add_argument("--reset-offsets", action="store_true", help="move an inactive group's committed offsets")
    action.add_argument("--delete", action="store_true", help="delete groups that have no active members")
    action.add_argument("--delete-offsets", action="store_true", help="delete a group's offsets of some partitions")
    parser.add_argument("--group", action="append", default=[], metavar="GROUP", help="a group id (repeatable)")
    parser.add_argument("--all-groups", action="store_true", help="every group of the cluster")
    view = parser.add_argument_group("--describe views (default: --offsets)")
    view.add_argument("--offsets", action="store_true", help="per partition offsets and lag")
    view.add_argument("--members", action="store_true", help="per member: host, client id, partition count")
    view.add_argument("--verbose", action="store_true", help="with --members: each member's partitions")
    view.add_argument("--state", action="store_true", help="coordinator, assignor, state, member count")
    reset = parser.add_argument_group("--reset-offsets and --delete-offsets")
    reset.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,P]",
                       help="a topic, or some of its partitions (repeatable)")
    reset.add_argument("--all-topics", action="store_true", help="every topic the group has offsets for")
    reset.add_argument("--to-earliest", action="store_true", help="the log start offset")
    reset.add_argument("--to-latest", action="store_true", help="the log end offset")
    reset.add_argument("--to-offset", type=int, metavar="N", help="offset N (kept within the log)")
    reset.add_argument("--shift-by", type=int, metavar="N", help="the committed offset plus N (N may be negative)")
    reset.add_argument("--to-datetime", metavar="ISO",
                       help="the first offset at or after YYYY-MM-DDTHH:mm:SS.sss (local time; or add Z, +HH:MM)")
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="print the new offsets only (the default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per request (default 30)")
    parser.set_defaults(func=_main)
