"""Issue 10, items 4, 5 and 12: what a hostile or careless peer can make the broker hold.

Each test attacks a real broker process over loopback and checks the outcome from outside:
RSS and descriptors from /proc, the broker closing the attacker's socket, a real client's
data arriving, the broker's own log.
"""

from __future__ import annotations

import os
import re
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from broker.protocol.messages import (
    ApiVersionsRequest,
    FetchRequest,
    JoinGroupRequest,
    ProduceRequest,
)
from broker.protocol.records import Record, build_batch
from deploy.broker_process import BrokerProcess
from deploy.child_process import fd_count, rss_bytes
from deploy.fuzz.proc import CLOSE_WAIT, ESTABLISHED, tcp_sockets
from deploy.kafka_socket import call, connect, message_frame, read_frame
from tests.support.polling import wait_until

TOPIC = "hardening"


def _fill(bootstrap: str, megabytes: int) -> None:
    """About `megabytes` MB in partition 0 of TOPIC, as pre-built 1 MB batches."""
    batch = build_batch([Record(None, b"v" * 1000) for _ in range(1000)])
    request = ProduceRequest(acks=1, timeout_ms=30_000, topic_data=[ProduceRequest.TopicProduceData(
        name=TOPIC, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)])])
    frame = message_frame(request, 9)
    with _connect(bootstrap) as sock:
        for _ in range(megabytes):
            sock.sendall(frame)
            read_frame(sock)


def _fetch_frame(*, offset: int, max_bytes: int, max_wait_ms: int, min_bytes: int = 1) -> bytes:
    request = FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes, topics=[
        FetchRequest.FetchTopic(topic=TOPIC, partitions=[
            FetchRequest.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=max_bytes)])])
    return message_frame(request, 12)


def _connect(bootstrap: str, *, rcvbuf: int | None = None) -> socket.socket:
    """A blocking socket (no timeout): `_closed_by_peer` and `_pending` peek without waiting."""
    return connect(bootstrap, timeout_s=None, rcvbuf=rcvbuf)


def _closed_by_peer(sock: socket.socket) -> bool:
    """True once the broker has closed its end (we never expect bytes on these sockets)."""
    try:
        return sock.recv(1, socket.MSG_DONTWAIT | socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def _pending(sock: socket.socket) -> bool:
    """True when bytes from the broker wait unread on the socket."""
    try:
        return bool(sock.recv(1, socket.MSG_DONTWAIT | socket.MSG_PEEK))
    except BlockingIOError:
        return False


def _broker_sides(broker_port: int, client_ports: set[int]) -> dict[int, tuple[int, int]]:
    """client port -> (TCP state, receive queue) of the broker's socket to it, from the kernel's TCP tables."""
    return {s.peer_port: (s.state, s.receive_queue) for s in tcp_sockets(broker_port) if s.peer_port in client_ports}


def _pid(broker: BrokerProcess) -> int:
    assert broker.proc is not None
    return broker.proc.pid


@pytest.fixture
def start(tmp_path: Path) -> Iterator[object]:
    started: list[BrokerProcess] = []

    def run(*overrides: str) -> BrokerProcess:
        process = BrokerProcess(tmp_path / f"data{len(started)}", overrides=overrides, topics=(TOPIC,))
        started.append(process)
        return process.start()

    yield run
    for process in started:
        process.stop()


def test_clients_that_never_read_hold_no_fetch_memory_and_are_disconnected(start) -> None:  # type: ignore[no-untyped-def]
    # 12 clients ask for 2 GiB each and never read. The broker used to read up to fetch.max.bytes
    # (55 MB) into memory per client (750 MB) and keep it forever; now record data goes from the
    # file, and a peer that takes nothing for connections.max.idle.ms is disconnected.
    broker = start("connections.max.idle.ms=3000")
    pid = _pid(broker)
    _fill(broker.bootstrap, 64)
    baseline_rss, baseline_fds = rss_bytes(pid), fd_count(pid)
    clients = [_connect(broker.bootstrap, rcvbuf=4096) for _ in range(12)]
    peak = baseline_rss
    try:
        for sock in clients:
            sock.sendall(_fetch_frame(offset=0, max_bytes=2**31 - 1, max_wait_ms=500))


        def all_answering() -> bool:
            nonlocal peak
            peak = max(peak, rss_bytes(pid))
            return all(_pending(sock) for sock in clients)

        def all_disconnected() -> bool:
            nonlocal peak
            peak = max(peak, rss_bytes(pid))
            # The sockets and whatever else the broker held for them (pinned segment files).
            return fd_count(pid) <= baseline_fds

        wait_until(all_answering, what="the broker to start answering every client")
        wait_until(all_disconnected, what="the broker to close the clients that do not read", timeout_s=60)
        for sock in clients:  # what they were sent before the broker gave up, then end of stream
            sock.settimeout(10)
            while sock.recv(1 << 20):
                pass
    finally:
        for sock in clients:
            sock.close()
    assert peak - baseline_rss < 100 * 2**20, f"RSS grew by {(peak - baseline_rss) / 2**20:.0f} MiB"
    assert broker.proc is not None and broker.proc.poll() is None
    # A reading client still gets the same data.
    with _connect(broker.bootstrap) as sock:
        sock.sendall(_fetch_frame(offset=0, max_bytes=4 << 20, max_wait_ms=500))
        assert len(read_frame(sock)) > 4_000_000


def test_a_peer_that_closes_during_a_long_poll_is_let_go_at_once(start) -> None:  # type: ignore[no-untyped-def]
    # A fetch at the log end with a huge max_wait_ms, then the client closes: the broker used to
    # keep the request and a CLOSE_WAIT socket until max_wait_ms (days).
    broker = start()
    _fill(broker.bootstrap, 1)
    pollers = [_connect(broker.bootstrap) for _ in range(5)]
    ports = {sock.getsockname()[1] for sock in pollers}
    for sock in pollers:
        sock.sendall(_fetch_frame(offset=1000, max_bytes=1 << 20, max_wait_ms=2**31 - 1, min_bytes=1 << 30))

    def polling() -> bool:  # the broker's sockets to the pollers have taken the requests in
        sides = _broker_sides(broker.port, ports)
        return len(sides) == len(ports) and all(st == ESTABLISHED and rx == 0 for st, rx in sides.values())

    wait_until(polling, what="the broker to read every long poll")
    for sock in pollers:
        sock.close()
    wait_until(lambda: not any(st == CLOSE_WAIT for st, _ in _broker_sides(broker.port, ports).values()),
               what="the broker to close its end of the abandoned long polls (no CLOSE_WAIT)", timeout_s=20)
    # The same with a request queued behind each poll before the client closes: the queued bytes
    # keep the socket readable, so the end of stream hides behind them (found by deploy/fuzz).
    queued = [_connect(broker.bootstrap) for _ in range(3)]
    ports = {sock.getsockname()[1] for sock in queued}
    for sock in queued:
        sock.sendall(_fetch_frame(offset=1000, max_bytes=1 << 20, max_wait_ms=2**31 - 1, min_bytes=1 << 30))
    wait_until(polling, what="the broker to read every long poll")
    behind = message_frame(ApiVersionsRequest(client_software_name="x", client_software_version="1"), 3)
    for sock in queued:
        sock.sendall(behind)
    wait_until(lambda: all(rx == len(behind) for _, rx in _broker_sides(broker.port, ports).values()),
               what="the queued requests to wait in the broker's receive queues")
    for sock in queued:
        sock.close()
    wait_until(lambda: not any(st == CLOSE_WAIT for st, _ in _broker_sides(broker.port, ports).values()),
               what="the broker to close the long polls with requests queued behind them", timeout_s=20)
    # A long poll whose client stays still works, and is answered when data comes.
    with _connect(broker.bootstrap) as sock:
        sock.sendall(_fetch_frame(offset=1000, max_bytes=1 << 20, max_wait_ms=30_000))
        _fill(broker.bootstrap, 1)
        assert len(read_frame(sock)) > 1_000_000
    # A fetch that does not parse is still a protocol error (the connection closes with a
    # warning), not an internal one, though fetches now run beside their peer's watcher.
    with _connect(broker.bootstrap) as sock:
        frame = _fetch_frame(offset=0, max_bytes=1 << 20, max_wait_ms=0)
        sock.sendall(struct.pack(">i", len(frame) - 10) + frame[4:-6])
        sock.settimeout(10)
        assert sock.recv(1) == b""
    log = broker.log_path.read_text()
    assert "internal error" not in log and "Traceback" not in log, log[-3000:]


def test_trickling_huge_frames_hold_nothing_hostage_and_are_cut_off(start) -> None:  # type: ignore[no-untyped-def]
    # Two connections announce 100 MiB frames and trickle a byte at a time. They used to reserve
    # the whole request budget (2 x 100 MB), so a 2 MB produce of another client waited until
    # they finished (58 s in one run). Now the produce and a consume go through while they
    # trickle, and the broker closes them when causeway.request.arrival.timeout.ms passes.
    broker = start("causeway.request.arrival.timeout.ms=5000", "message.max.bytes=4000000")
    events: list[str] = []
    tricklers = [_connect(broker.bootstrap) for _ in range(2)]
    try:
        for sock in tricklers:
            # The largest frame socket.request.max.bytes allows: two fill queued.max.request.bytes.
            sock.sendall(struct.pack(">i", 104_857_600) + b"\x00")
        producer = Producer({"bootstrap.servers": broker.bootstrap, "message.max.bytes": 4_000_000,
                             "compression.type": "none", "linger.ms": 0})
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "hostage",
                             "fetch.message.max.bytes": 4_000_000, "enable.auto.commit": False})
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        value = bytes(range(256)) * 8192  # 2 MiB

        def delivered(err: object, msg: object) -> None:
            events.append("delivered" if err is None else f"failed: {err}")

        producer.produce(TOPIC, value, partition=0, on_delivery=delivered)
        closed = [False] * len(tricklers)
        for _ in range(600):  # bounded: each round waits at most 0.05 s in poll
            producer.poll(0.05)
            if "delivered" in events and "consumed" not in events:
                message = consumer.poll(0.05)
                if message is not None and message.error() is None and message.value() == value:
                    events.append("consumed")
            for i, sock in enumerate(tricklers):
                if closed[i]:
                    continue
                if _closed_by_peer(sock):
                    closed[i] = True
                    events.append("trickler closed")
                    continue
                try:
                    sock.send(b"\x00")
                except OSError:
                    closed[i] = True
                    events.append("trickler closed")
            if all(closed) and "consumed" in events:
                break
        consumer.close()
    finally:
        for sock in tricklers:
            sock.close()
    assert "delivered" in events and "consumed" in events, events
    assert events.count("trickler closed") == 2, events
    first_close = events.index("trickler closed")
    assert events.index("delivered") < first_close and events.index("consumed") < first_close, events
    assert "did not arrive within 5 s" in broker.log_path.read_text()


def test_a_flood_of_hostile_connections_writes_a_bounded_log(start) -> None:  # type: ignore[no-untyped-def]
    # Each hostile connection used to write its own warning: 122 MB of log in ten minutes.
    broker = start("causeway.log.repeat.window.ms=1000")
    before = broker.log_path.read_text().count("\n")
    attacks = 3000
    for _ in range(attacks):
        with _connect(broker.bootstrap) as sock:
            sock.sendall(b"\xff\xff\xff\xff")  # a negative frame size: a protocol error
    summary = re.compile(r"\.\.\. and ([\d,]+) more like this \(protocol error\)")

    def counted() -> int:
        text = broker.log_path.read_text()
        return text.count("frame size -1 outside") + sum(int(m.replace(",", "")) for m in summary.findall(text))

    wait_until(lambda: counted() >= attacks, what="every hostile connection to be logged or counted",
               timeout_s=30)
    text = broker.log_path.read_text()
    assert summary.search(text), text[-2000:]
    grown = text.count("\n") - before
    assert grown < 60, f"{grown} log lines for {attacks} hostile connections"
    assert broker.proc is not None and broker.proc.poll() is None


def _broker_sockets_without_a_connection(pid: int) -> int:
    """The broker's sockets that no longer appear in the kernel's TCP tables: a connection its
    peer reset, still held open by the broker."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    for table in ("/proc/net/tcp", "/proc/net/tcp6", "/proc/net/unix"):
        with open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                inode_field = fields[6] if table.endswith("unix") else fields[9]
                inodes.discard(int(inode_field))
    return len(inodes)


def test_group_joins_whose_peers_went_away_let_go_of_their_sockets(start) -> None:  # type: ignore[no-untyped-def]
    # A JoinGroup parks until the group's rebalance completes (here: a long initial delay). A
    # client that closes or resets meanwhile used to leave the broker holding its socket (in
    # CLOSE_WAIT, or out of the TCP tables after a reset) for the rest of the wait (found by
    # deploy/fuzz).
    broker = start("group.initial.rebalance.delay.ms=600000")
    pid = _pid(broker)
    baseline = _broker_sockets_without_a_connection(pid)

    def parked_join(group: str) -> socket.socket:
        sock = _connect(broker.bootstrap)
        request = JoinGroupRequest(group_id=group, session_timeout_ms=30_000, rebalance_timeout_ms=600_000,
                                   member_id="", protocol_type="consumer",
                                   protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")])
        request.member_id = call(sock, request, 6, 1).member_id  # v4+: MEMBER_ID_REQUIRED with the id to join with
        sock.sendall(message_frame(request, 6, 2))
        return sock

    closed = [parked_join(f"closed-{i}") for i in range(3)]
    reset = [parked_join(f"reset-{i}") for i in range(3)]
    ports = {sock.getsockname()[1] for sock in closed}

    def parked() -> bool:  # the broker has read every second JoinGroup and answered none yet
        sides = _broker_sides(broker.port, ports | {sock.getsockname()[1] for sock in reset})
        return len(sides) == 6 and all(rx == 0 for _, rx in sides.values()) and not any(map(_pending, closed + reset))

    wait_until(parked, what="the broker to park every JoinGroup")
    for sock in closed:
        sock.close()
    for sock in reset:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with RST
        sock.close()
    wait_until(lambda: not any(st == CLOSE_WAIT for st, _ in _broker_sides(broker.port, ports).values()),
               what="the broker to close the joins whose clients closed (no CLOSE_WAIT)", timeout_s=20)
    wait_until(lambda: _broker_sockets_without_a_connection(pid) <= baseline,
               what="the broker to close the joins whose clients reset", timeout_s=20)
    log = broker.log_path.read_text()
    assert "internal error" not in log and "Traceback" not in log, log[-3000:]
