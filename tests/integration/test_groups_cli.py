"""`causeway groups` against a real broker, with groups formed by real librdkafka consumers and
every figure cross-checked with confluent-kafka's own view (watermarks, committed offsets)."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from deploy.broker_process import BrokerProcess
from deploy.cli import main
from tests.support.consume import first_offsets, group_offsets
from tests.support.polling import wait_until

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 60.0
ENDS = {0: 5, 1: 7, 2: 9}  # records per partition of `orders`


def groups(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "deploy.cli", "groups", "--bootstrap-server", broker.bootstrap,
                           *args], capture_output=True, text=True, timeout=120, cwd=REPO)


def rows(output: str, first: str = "GROUP") -> list[dict[str, str]]:
    """The table rows of kafka-consumer-groups style output, as header -> cell (headers without
    spaces; the --state view's "COORDINATOR (ID)" is read as two cells)."""
    out: list[dict[str, str]] = []
    header: list[str] = []
    for line in output.splitlines():
        cells = line.split()
        if cells and cells[0] == first:
            header = cells
        elif header and cells:
            out.append(dict(zip(header, cells, strict=True)))
    return out


def setup_orders(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("orders", 3, 1), NewTopic("timed", 1, 1)])["orders"].result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for p, count in ENDS.items():
        for i in range(count):
            producer.produce("orders", key=b"k%d" % i, value=b"v%d" % i, partition=p)
    assert producer.flush(30) == 0


def member(bootstrap: str, group: str, **extra: object) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": f"{group}-client",
                     "enable.auto.commit": False, "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                     **extra})


def join(c: Consumer, topics: list[str], partitions: int) -> None:
    c.subscribe(topics)
    deadline = time.monotonic() + TIMEOUT_S
    while len(c.assignment()) < partitions and time.monotonic() < deadline:
        c.poll(0.1)
    assert len(c.assignment()) == partitions, c.assignment()


def group_state(bootstrap: str, group: str) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return str(admin.describe_consumer_groups([group])[group].result(30).state.name)


def wait_state(bootstrap: str, group: str, state: str) -> None:
    wait_until(lambda: group_state(bootstrap, group) == state, what=f"group {group} to become {state}",
               timeout_s=TIMEOUT_S)


def test_list_and_describe_a_live_group(group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    setup_orders(bootstrap)
    c = member(bootstrap, "shop")
    try:
        join(c, ["orders"], 3)
        c.commit(offsets=[CTopicPartition("orders", p, p + 2) for p in ENDS], asynchronous=False)

        listed = groups(group_broker, "--list")
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.split() == ["shop"]
        assert rows(groups(group_broker, "--list", "--state").stdout) == [{"GROUP": "shop", "STATE": "Stable"}]

        described = groups(group_broker, "--describe", "--group", "shop")
        assert described.returncode == 0, described.stderr
        table = {int(r["PARTITION"]): r for r in rows(described.stdout)}
        assert sorted(table) == [0, 1, 2]
        for p, row in table.items():
            low, high = c.get_watermark_offsets(CTopicPartition("orders", p), timeout=30)
            assert (row["GROUP"], row["TOPIC"]) == ("shop", "orders")
            assert int(row["CURRENT-OFFSET"]) == p + 2 == group_offsets(bootstrap, "shop", "orders")[p]
            assert int(row["LOG-END-OFFSET"]) == high == ENDS[p]
            assert int(row["LAG"]) == high - (p + 2)
            assert (row["CONSUMER-ID"], row["HOST"], row["CLIENT-ID"]) == (c.memberid(), "/127.0.0.1",
                                                                           "shop-client")

        members = rows(groups(group_broker, "--describe", "--group", "shop", "--members", "--verbose").stdout)
        assert members == [{"GROUP": "shop", "CONSUMER-ID": c.memberid(), "HOST": "/127.0.0.1",
                            "CLIENT-ID": "shop-client", "#PARTITIONS": "3", "ASSIGNMENT": "orders(0,1,2)"}]
        state = groups(group_broker, "--describe", "--group", "shop", "--state").stdout
        assert f"{bootstrap} (0)" in state
        assert [(r["GROUP"], r["STATE"], r["#MEMBERS"]) for r in rows(state)] == [("shop", "Stable", "1")]

        # A live group is left alone, as Kafka does.
        refused = groups(group_broker, "--reset-offsets", "--group", "shop", "--topic", "orders", "--to-earliest",
                         "--execute")
        assert refused.returncode == 1
        assert "can only be reset if the group 'shop' is inactive, but the current state is Stable" in refused.stderr
        deleted = groups(group_broker, "--delete", "--group", "shop")
        assert deleted.returncode == 1 and "NON_EMPTY_GROUP" in deleted.stderr
        assert group_offsets(bootstrap, "shop", "orders") == {0: 2, 1: 3, 2: 4}
    finally:
        c.close()

    wait_state(bootstrap, "shop", "EMPTY")
    described = groups(group_broker, "--describe", "--all-groups")
    assert "Consumer group 'shop' has no active members." in described.stdout
    assert [(r["PARTITION"], r["LAG"], r["CONSUMER-ID"]) for r in rows(described.stdout)] == [
        ("0", "3", "-"), ("1", "4", "-"), ("2", "5", "-")]
    missing = groups(group_broker, "--describe", "--group", "nobody")
    assert missing.returncode == 1 and "Consumer group 'nobody' does not exist." in missing.stderr


def test_reset_offsets_then_delete(group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    setup_orders(bootstrap)
    c = member(bootstrap, "shop")
    join(c, ["orders"], 3)
    c.commit(offsets=[CTopicPartition("orders", p, 4) for p in ENDS], asynchronous=False)
    c.close()
    wait_state(bootstrap, "shop", "EMPTY")

    # Dry run (the default): the plan is printed, nothing moves.
    plan = groups(group_broker, "--reset-offsets", "--group", "shop", "--topic", "orders:0,2", "--to-offset", "1")
    assert plan.returncode == 0, plan.stderr
    assert [(r["TOPIC"], r["PARTITION"], r["NEW-OFFSET"]) for r in rows(plan.stdout)] == [
        ("orders", "0", "1"), ("orders", "2", "1")]
    assert "nothing was committed" in plan.stderr
    assert group_offsets(bootstrap, "shop", "orders") == {0: 4, 1: 4, 2: 4}

    def execute(*args: str) -> dict[int, int]:
        """Run a reset with --execute; check that what it printed is what got committed."""
        before = group_offsets(bootstrap, "shop", "orders")
        done = groups(group_broker, "--reset-offsets", "--group", "shop", *args, "--execute")
        assert done.returncode == 0, done.stderr
        shown = {int(r["PARTITION"]): int(r["NEW-OFFSET"]) for r in rows(done.stdout)}
        assert group_offsets(bootstrap, "shop", "orders") == {**before, **shown}
        return shown

    assert execute("--topic", "orders", "--shift-by", "-3") == {0: 1, 1: 1, 2: 1}
    assert execute("--all-topics", "--shift-by", "5") == {0: 5, 1: 6, 2: 6}  # kept within the log: 0 ends at 5
    assert execute("--topic", "orders", "--to-earliest") == {0: 0, 1: 0, 2: 0}
    assert execute("--topic", "orders:1", "--to-latest") == {1: ENDS[1]}
    assert execute("--topic", "orders", "--to-offset", "3") == {0: 3, 1: 3, 2: 3}
    # A new librdkafka member of the group starts exactly there.
    assert first_offsets(member(bootstrap, "shop"), "orders", set(ENDS), TIMEOUT_S) == {0: 3, 1: 3, 2: 3}
    wait_state(bootstrap, "shop", "EMPTY")

    # By time: records stamped a second apart; the first at or after the instant.
    t0 = 1_700_000_000_000
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(6):
        producer.produce("timed", value=b"%d" % i, partition=0, timestamp=t0 + 1000 * i)
    assert producer.flush(30) == 0
    instant = dt.datetime.fromtimestamp((t0 + 2500) / 1000, dt.UTC).isoformat().replace("+00:00", "Z")
    timed = groups(group_broker, "--reset-offsets", "--group", "shop", "--topic", "timed", "--to-datetime", instant,
                   "--execute")
    assert timed.returncode == 0, timed.stderr
    assert [(r["TOPIC"], r["NEW-OFFSET"]) for r in rows(timed.stdout)] == [("timed", "3")]
    later = dt.datetime.fromtimestamp(t0 / 1000 + 3600, dt.UTC).isoformat()
    past_end = groups(group_broker, "--reset-offsets", "--group", "shop", "--topic", "timed", "--to-datetime", later)
    assert [r["NEW-OFFSET"] for r in rows(past_end.stdout)] == ["6"]  # nothing that late: the log end

    no_commit = groups(group_broker, "--reset-offsets", "--group", "fresh", "--topic", "orders", "--shift-by", "1")
    assert no_commit.returncode == 1 and "no committed offset" in no_commit.stderr
    unknown = groups(group_broker, "--reset-offsets", "--group", "shop", "--topic", "orders:7", "--to-earliest")
    assert unknown.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in unknown.stderr

    deleted_offsets = groups(group_broker, "--delete-offsets", "--group", "shop", "--topic", "orders:0")
    assert deleted_offsets.returncode == 0, deleted_offsets.stderr
    assert rows(deleted_offsets.stdout, first="TOPIC") == [
        {"TOPIC": "orders", "PARTITION": "0", "STATUS": "Successful"}]
    assert group_offsets(bootstrap, "shop", "orders") == {1: 3, 2: 3}

    deleted = groups(group_broker, "--delete", "--group", "shop")
    assert deleted.returncode == 0, deleted.stderr
    assert "Deletion of requested consumer groups ('shop') was successful." in deleted.stdout
    assert groups(group_broker, "--list").stdout.split() == []
    again = groups(group_broker, "--delete", "--group", "shop")
    assert again.returncode == 1 and "GROUP_ID_NOT_FOUND" in again.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["--describe"], "--group or --all-groups is required"),
    (["--reset-offsets", "--group", "g", "--topic", "t"], "exactly one of --to-earliest"),
    (["--reset-offsets", "--group", "g", "--topic", "t", "--to-earliest", "--to-latest"], "exactly one of"),
    (["--reset-offsets", "--group", "g", "--to-earliest"], "--topic (repeatable) or --all-topics"),
    (["--reset-offsets", "--group", "g", "--topic", "t:x", "--to-earliest"], "partitions must be numbers"),
    (["--reset-offsets", "--group", "g", "--topic", "t", "--to-datetime", "yesterday"], "--to-datetime wants"),
    (["--delete-offsets", "--group", "g"], "--delete-offsets needs --topic"),
    (["--list", "--members"], "--members and --offsets go with --describe"),
    (["--describe", "--group", "g", "--to-latest"], "go with --reset-offsets"),
])
def test_bad_command_lines_exit_2(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    # In-process: these fail before anything is contacted.
    assert main(["groups", "--bootstrap-server", "127.0.0.1:1", *args]) == 2
    assert message in capsys.readouterr().err


def test_an_unreachable_cluster_is_named() -> None:
    done = subprocess.run([sys.executable, "-m", "deploy.cli", "groups", "--bootstrap-server", "127.0.0.1:1",
                           "--list", "--timeout", "2"], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 1 and "127.0.0.1:1" in done.stderr
