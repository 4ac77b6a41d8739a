"""`causeway produce` and `causeway consume`: records from stdin and to stdout, like
kafka-console-producer.sh and kafka-console-consumer.sh.

    causeway produce --bootstrap-server HOST:PORT --topic T [--partition N]
                     [--property parse.key=true] [--property key.separator=:]
                     [--compression-type none|gzip|snappy|lz4|zstd] [--acks all|1|0] [--no-idempotence]
    causeway consume --bootstrap-server HOST:PORT --topic T [--partition N]
                     [--from-beginning | --offset N|earliest|latest] [--group G]
                     [--max-messages N] [--timeout-ms MS] [--property print.key=true]...

Both work against any Kafka-compatible cluster (they use broker.client). The producer sends
whatever stdin has delivered so far as one record batch per partition, so a file or a pipe
costs a handful of requests, not one per line; it is idempotent (producer id and sequence
numbers, acks=all) unless told otherwise. The consumer reads every partition unless given
one. With --group it joins no group: it starts from the group's committed offsets and, on
exit, commits the position after the last record it printed (an admin commit, which Kafka
accepts only while the group has no active members).

Exit 0 on success, 1 when the cluster refused or could not be reached, 2 for a bad command line.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

import trio

from broker.client import (
    Client,
    ErrorCode,
    KafkaError,
    TopicPartition,
    admin,
    commit_offsets,
    fetch,
    fetch_offsets,
    init_idempotent_producer,
    open_client,
    produce,
)
from broker.client.batching import DEFAULT_BATCH_BYTES, size_batches
from broker.client.connection import ClientError
from broker.client.partitioner import kafka_partition
from broker.clock import now_ms
from broker.protocol.records import Compression, Record, TimestampType, build_batch, decode_batch, split_batches
from broker.tasks import gather
from deploy.cli.client_config import add_command_config, command_security
from deploy.cli.command import Refused, UsageError, run, stdout_reader_gone, until_signalled

__all__ = ["register"]

_READ_SIZE = 1 << 20

_PRODUCER_PROPERTIES = {"parse.key": "false", "key.separator": "\t", "ignore.error": "false"}
_CONSUMER_PROPERTIES = {
    "print.key": "false",
    "print.value": "true",
    "print.timestamp": "false",
    "print.offset": "false",
    "print.partition": "false",
    "print.headers": "false",
    "key.separator": "\t",
    "line.separator": "\n",
    "headers.separator": ",",
    "null.literal": "null",
}


def parse_properties(items: Sequence[str], known: Mapping[str, str], command: str) -> dict[str, str]:
    """`--property KEY=VALUE` items over the defaults in `known`; unknown keys are refused
    (with the list of known ones) rather than silently ignored. Escapes \\t and \\n are read
    as a tab and a newline, so `key.separator=\\t` works from a shell."""
    out = dict(known)
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"--property wants KEY=VALUE, got {item!r}")
        if key not in known:
            raise UsageError(f"{command} does not know property {key!r}; known: {', '.join(sorted(known))}")
        out[key] = value.replace("\\t", "\t").replace("\\n", "\n")
    return out


def _flag(props: Mapping[str, str], key: str) -> bool:
    value = props[key].strip().lower()
    if value not in ("true", "false"):
        raise UsageError(f"property {key} must be true or false, not {props[key]!r}")
    return value == "true"


# -- produce ----------------------------------------------------------------------------------


@dataclass
class LineSplitter:
    """Bytes in, whole lines out (without their "\\n" or "\\r\\n"); a last line without a
    newline comes out at `finish`."""

    pending: bytes = b""

    def feed(self, data: bytes) -> list[bytes]:
        *lines, self.pending = (self.pending + data).split(b"\n")
        return [line.removesuffix(b"\r") for line in lines]

    def finish(self) -> list[bytes]:
        last, self.pending = self.pending.removesuffix(b"\r"), b""
        return [last] if last else []


def line_to_record(line: bytes, number: int, *, parse_key: bool, separator: bytes, ignore_error: bool,
                   timestamp: int) -> Record:
    """One stdin line as a record: the whole line is the value, or with parse.key the part
    before the first separator is the key. Raises Refused for a line without a separator
    (unless ignore.error, which sends it whole with no key), as kafka-console-producer does."""
    if not parse_key:
        return Record(None, line, timestamp=timestamp)
    key, sep, value = line.partition(separator)
    if not sep:
        if ignore_error:
            return Record(None, line, timestamp=timestamp)
        raise Refused(f"no key separator {separator.decode(errors='replace')!r} on line {number}: "
                      f"{line.decode(errors='replace')!r}")
    return Record(key, value, timestamp=timestamp)


async def _produce(args: argparse.Namespace, props: dict[str, str]) -> int:
    parse_key = _flag(props, "parse.key")
    ignore_error = _flag(props, "ignore.error")
    separator = props["key.separator"].encode()
    if parse_key and not separator:
        raise UsageError("key.separator must not be empty")
    compression = Compression[args.compression_type.upper()]
    acks = {"all": -1, "-1": -1, "1": 1, "0": 0}[args.acks]
    idempotent = acks == -1 if args.idempotence is None else args.idempotence
    stdin = sys.stdin.fileno()
    async with open_client(args.bootstrap_server, client_id="causeway-console-producer",
                           security=command_security(args), request_timeout_s=args.request_timeout) as client:
        count = (await admin.describe_topics(client, [args.topic]))[args.topic].partition_count
        if args.partition is not None and not 0 <= args.partition < count:
            raise Refused(f"topic {args.topic!r} has partitions 0..{count - 1}, not {args.partition}")
        producer = await init_idempotent_producer(client) if idempotent else None
        sticky = random.randrange(count)  # records without a key: one partition per batch, in turn

        async def send(partition: int, records: list[Record]) -> None:
            for batch in size_batches(records, args.max_batch_bytes):
                if producer is not None:
                    await producer.send(args.topic, partition, batch, compression=compression)
                else:
                    await produce(client, args.topic, partition, build_batch(batch, compression=compression),
                                  acks=acks)

        splitter = LineSplitter()
        number = 0
        while True:
            # Whatever stdin has now (one read), then send it: lines typed by hand go at once,
            # a file or a busy pipe goes in large batches.
            chunk = await trio.to_thread.run_sync(os.read, stdin, _READ_SIZE, abandon_on_cancel=True)
            lines = splitter.feed(chunk) if chunk else splitter.finish()
            now = now_ms()
            by_partition: dict[int, list[Record]] = {}
            bad_line: Refused | None = None
            for line in lines:
                number += 1
                try:
                    record = line_to_record(line, number, parse_key=parse_key, separator=separator,
                                            ignore_error=ignore_error, timestamp=now)
                except Refused as exc:
                    bad_line = exc  # the lines before it are still sent, as Kafka's producer does
                    break
                if args.partition is not None:
                    partition = args.partition
                elif record.key is not None:
                    partition = kafka_partition(record.key, count)
                else:
                    partition = sticky
                by_partition.setdefault(partition, []).append(record)
            if by_partition:
                sticky = (sticky + 1) % count
                await gather([partial(send, partition, records) for partition, records in by_partition.items()],
                             collect=(KafkaError, ClientError))
            if bad_line is not None:
                raise bad_line
            if not chunk:
                return 0


# -- consume ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Formatter:
    """Kafka's DefaultMessageFormatter: [timestamp] [partition] [offset] [headers] [key] value,
    separated by key.separator, each record ended by line.separator."""

    key: bool = False
    value: bool = True
    timestamp: bool = False
    offset: bool = False
    partition: bool = False
    headers: bool = False
    separator: bytes = b"\t"
    line_separator: bytes = b"\n"
    headers_separator: bytes = b","
    null: bytes = b"null"

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> Formatter:
        return cls(_flag(props, "print.key"), _flag(props, "print.value"), _flag(props, "print.timestamp"),
                   _flag(props, "print.offset"), _flag(props, "print.partition"), _flag(props, "print.headers"),
                   props["key.separator"].encode(), props["line.separator"].encode(),
                   props["headers.separator"].encode(), props["null.literal"].encode())

    def format(self, partition: int, offset: int, timestamp: int, timestamp_type: TimestampType,
               key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes | None]]) -> bytes:
        fields: list[bytes] = []
        if self.timestamp:
            kind = "CreateTime" if timestamp_type == TimestampType.CREATE_TIME else "LogAppendTime"
            fields.append(f"{kind}:{timestamp}".encode() if timestamp >= 0 else b"NO_TIMESTAMP")
        if self.partition:
            fields.append(b"Partition:%d" % partition)
        if self.offset:
            fields.append(b"Offset:%d" % offset)
        if self.headers:
            fields.append(self.headers_separator.join(
                name.encode() + b":" + (self.null if v is None else v) for name, v in headers) or b"NO_HEADERS")
        if self.key:
            fields.append(self.null if key is None else key)
        if self.value:
            fields.append(self.null if value is None else value)
        return self.separator.join(fields) + self.line_separator


@dataclass
class ConsumeState:
    positions: dict[TopicPartition, int]  # the next offset to fetch
    printed_until: dict[TopicPartition, int]  # the offset after the last record printed
    count: int = 0


async def _start_positions(client: Client, args: argparse.Namespace, tps: list[TopicPartition]
                           ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
    """Where to start in each partition, and the group's committed offsets (with --group)."""
    committed: dict[TopicPartition, int] = {}
    if args.group:
        committed = {tp: c.offset for tp, c in (await fetch_offsets(client, args.group, tps)).items()}
    if args.offset not in (None, "earliest", "latest"):
        return {tps[0]: int(args.offset)}, committed
    reset = admin.EARLIEST if args.from_beginning or args.offset == "earliest" else admin.LATEST
    missing = [tp for tp in tps if tp not in committed]
    listed = await admin.list_offsets(client, dict.fromkeys(missing, reset)) if missing else {}
    return {tp: committed[tp] if tp in committed else listed[tp].offset for tp in tps}, committed


async def _consume_loop(client: Client, args: argparse.Namespace, state: ConsumeState, formatter: Formatter,
                        write: Callable[[bytes], None]) -> None:
    reset_to = admin.EARLIEST if args.from_beginning or args.offset == "earliest" else admin.LATEST
    idle_since = trio.current_time()
    failures = 0
    while args.max_messages is None or state.count < args.max_messages:
        wait_s = 0.5
        if args.timeout_ms is not None:
            left = idle_since + args.timeout_ms / 1000 - trio.current_time()
            if left <= 0:
                return
            wait_s = min(wait_s, left)
        fetched = await fetch(client, state.positions, max_wait_ms=max(1, int(wait_s * 1000)))
        out = bytearray()
        errors = 0
        for tp in sorted(fetched):
            part = fetched[tp]
            if part.error == ErrorCode.OFFSET_OUT_OF_RANGE:
                moved = (await admin.list_offsets(client, {tp: reset_to}))[tp].offset
                print(f"Offset {state.positions[tp]} is out of range for {tp.topic}-{tp.partition}; "
                      f"resetting to {moved}", file=sys.stderr)
                state.positions[tp] = moved
                continue
            if part.error != ErrorCode.NONE:
                errors += 1
                continue
            position = state.positions[tp]
            for pos, header in split_batches(part.records, allow_partial_tail=True):
                if header.is_control:
                    state.positions[tp] = state.printed_until[tp] = header.last_offset + 1
                    continue
                _, records = decode_batch(part.records, pos)
                for r in records:
                    if r.offset < position:
                        continue  # a fetch starts at the batch holding the fetch offset
                    out += formatter.format(tp.partition, r.offset, r.timestamp, header.timestamp_type,
                                            r.key, r.value, r.headers)
                    state.count += 1
                    state.printed_until[tp] = r.offset + 1
                    if args.max_messages is not None and state.count >= args.max_messages:
                        write(bytes(out))
                        return
                state.positions[tp] = state.printed_until[tp] = header.last_offset + 1
        if out:
            write(bytes(out))
            idle_since = trio.current_time()
        # Every partition failing (leader moving, topic being created): do not spin.
        failures = failures + 1 if errors and errors == len(fetched) else 0
        if failures:
            await trio.sleep(client.backoff.delay(failures))


def _stdout_writer() -> Callable[[bytes], None]:
    out = sys.stdout.buffer

    def write(data: bytes) -> None:
        out.write(data)
        out.flush()

    return write


async def _consume(args: argparse.Namespace, props: dict[str, str]) -> int:
    formatter = Formatter.from_properties(props)
    write = _stdout_writer()
    async with open_client(args.bootstrap_server, client_id="causeway-console-consumer",
                           security=command_security(args), request_timeout_s=args.request_timeout) as client:
        topic = (await admin.describe_topics(client, [args.topic]))[args.topic]
        if args.partition is not None:
            if args.partition not in topic.partitions:
                raise Refused(f"topic {args.topic!r} has no partition {args.partition}")
            tps = [TopicPartition(args.topic, args.partition)]
        else:
            tps = [TopicPartition(args.topic, p) for p in sorted(topic.partitions)]
        start, committed = await _start_positions(client, args, tps)
        state = ConsumeState(dict(start), dict(start))
        # Signals stay caught until the end, commit included: the first one stops the reading,
        # later ones (`timeout` sends SIGTERM twice) must not kill the commit that follows.
        async with until_signalled() as stop:
            with trio.CancelScope() as reading:
                stop.on_signal = reading.cancel
                try:
                    await _consume_loop(client, args, state, formatter, write)
                except BrokenPipeError:
                    stdout_reader_gone()
                finally:
                    print(f"Processed a total of {state.count} messages", file=sys.stderr)
            if args.group:
                # Partitions read past where they started; the others keep what the group had.
                done = {tp: offset for tp, offset in state.printed_until.items()
                        if offset != start[tp] and offset != committed.get(tp)}
                if done:
                    await commit_offsets(client, args.group, done)
            stop.finish()
    return 0


# -- the command line -------------------------------------------------------------------------


def _run(command: Callable[[argparse.Namespace, dict[str, str]], Awaitable[int]], known: Mapping[str, str],
         name: str) -> Callable[[argparse.Namespace], int]:
    def body(args: argparse.Namespace) -> int:
        props = parse_properties(args.property, known, name)
        _check(args, name)
        return trio.run(command, args, props)

    return lambda args: run(f"causeway {name}", partial(body, args), bootstrap=args.bootstrap_server)


def _check(args: argparse.Namespace, name: str) -> None:
    if args.partition is not None and args.partition < 0:
        raise UsageError("--partition must be >= 0")
    if name == "produce":
        if args.idempotence and args.acks not in ("all", "-1"):
            raise UsageError("an idempotent producer needs --acks all (or pass --no-idempotence)")
        if args.max_batch_bytes <= 0:
            raise UsageError("--max-batch-bytes must be > 0")
        return
    if args.offset is not None:
        if args.from_beginning:
            raise UsageError("--offset and --from-beginning exclude each other")
        if args.group:
            raise UsageError("--offset and --group exclude each other (with --group it starts at the "
                             "group's committed offsets)")
        if args.offset not in ("earliest", "latest"):
            try:
                offset = int(args.offset)
            except ValueError:
                raise UsageError(f"--offset wants a number, earliest or latest, not {args.offset!r}") from None
            if offset < 0:
                raise UsageError("--offset must be >= 0")
            if args.partition is None:
                raise UsageError("--offset N needs --partition")
    if args.max_messages is not None and args.max_messages <= 0:
        raise UsageError("--max-messages must be > 0")
    if args.timeout_ms is not None and args.timeout_ms <= 0:
        raise UsageError("--timeout-ms must be > 0")


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "produce", help="records from stdin, one per line (like kafka-console-producer)",
        description="Send stdin to a topic, one record per line, as kafka-console-producer does. Lines are sent "
                    "in batches (whatever stdin has delivered, one batch per partition), through an idempotent "
                    "producer (acks=all) unless --acks 0/1 or --no-idempotence. Keyed records go to Kafka's "
                    "murmur2 partition of their key; records without a key fill one partition per batch, in turn.")
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT")
    add_command_config(p, "--producer.config")
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, help="send every record to this partition")
    p.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                   help="parse.key=true, key.separator=SEP (default tab), ignore.error=true (repeatable)")
    p.add_argument("--compression-type", default="none", choices=[c.name.lower() for c in Compression])
    p.add_argument("--acks", default="all", choices=["all", "-1", "1", "0"])
    p.add_argument("--idempotence", action=argparse.BooleanOptionalAction, default=None,
                   help="producer id and sequence numbers, so retries never duplicate (default: on with acks all)")
    p.add_argument("--max-batch-bytes", type=int, default=DEFAULT_BATCH_BYTES, metavar="N",
                   help=f"most bytes of records per batch (default {DEFAULT_BATCH_BYTES})")
    p.add_argument("--request-timeout", type=float, default=30.0, metavar="S",
                   help="seconds per request (default 30)")
    p.set_defaults(func=_run(_produce, _PRODUCER_PROPERTIES, "produce"))

    c = subparsers.add_parser(
        "consume", help="records to stdout (like kafka-console-consumer)",
        description="Print a topic's records, one per line, as kafka-console-consumer does: every partition "
                    "unless --partition, from the log end unless --from-beginning or --offset. --group G joins "
                    "no group (no rebalance, no other members): it only starts from G's committed offsets "
                    "(the log start or end where G has none) and, on exit (--max-messages, --timeout-ms, "
                    "Ctrl-C), commits the position after the last record printed. Like any commit from outside "
                    "a group, Kafka refuses it while G has active members.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT")
    add_command_config(c, "--consumer.config")
    c.add_argument("--topic", required=True)
    c.add_argument("--partition", type=int, help="read only this partition")
    c.add_argument("--from-beginning", action="store_true",
                   help="start at the log start (with --group: where the group has no committed offset)")
    c.add_argument("--offset", metavar="N|earliest|latest", help="where to start (a number needs --partition)")
    c.add_argument("--group", metavar="G", help="start from G's committed offsets and commit on exit (joins no group)")
    c.add_argument("--max-messages", type=int, metavar="N", help="exit after printing N records")
    c.add_argument("--timeout-ms", type=int, metavar="MS", help="exit when no record arrived for MS milliseconds")
    c.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                   help="print.key, print.value, print.timestamp, print.offset, print.partition, print.headers "
                        "(true/false), key.separator, line.separator, headers.separator, null.literal (repeatable)")
    c.add_argument("--request-timeout", type=float, default=30.0, metavar="S",
                   help="seconds per request (default 30)")
    c.set_defaults(func=_run(_consume, _CONSUMER_PROPERTIES, "consume"))
