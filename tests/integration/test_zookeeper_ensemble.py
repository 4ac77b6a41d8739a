"""Real ZooKeeper (Debian's package, a JVM per node) run by deploy/zookeeper: a lone node and
3-node ensembles serve kazoo, elect one leader and a new one when it dies, and leave no JVM
behind: not when stopped, not when their parent is SIGKILLed. Ports taken between pick and bind
are picked again; a JVM that cannot run is a clear error, never a hang."""

from __future__ import annotations

import os
import selectors
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import trio
from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError

from deploy.child_process import ChildProcess
from deploy.cli.zookeeper import READY_PREFIX
from deploy.process_identity import is_running
from deploy.zookeeper.config import pick_free_port
from deploy.zookeeper.ensemble import Ensemble, open_ensemble
from deploy.zookeeper.node import NodeFailed
from tests.support.descriptors import no_descriptor_left_open
from tests.support.polling import wait_for, wait_until
from tests.support.zookeeper import TEST_TUNING, ZooKeeperServer, zookeeper_server

REPO = Path(__file__).resolve().parents[2]


@contextmanager
def kazoo(hosts: str) -> Iterator[KazooClient]:
    # A request in flight when the connection drops (a JVM that paused on a loaded machine, a
    # server that closed it) fails with ConnectionLoss though the session lives: `client.retry`
    # sends it again on the new connection, for up to 30 s, as a careful ZooKeeper client does.
    client = KazooClient(hosts=hosts, timeout=10, command_retry={"max_tries": -1, "deadline": 30, "max_delay": 1})
    client.start(timeout=20)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def write(hosts: str, path: str, data: bytes) -> None:
    with kazoo(hosts) as client:

        def create() -> None:
            try:
                client.create(path, data, makepath=True)
            except NodeExistsError:  # an earlier try was applied before its answer was lost
                if client.get(path)[0] != data:
                    raise

        client.retry(create)


def read(hosts: str, path: str) -> bytes:
    with kazoo(hosts) as client:
        client.retry(client.sync, path)  # a follower answers reads from its copy: catch up with the leader first
        value: bytes = client.retry(client.get, path)[0]
        return value


def test_a_single_node_serves_kazoo_and_keeps_its_data_across_a_crash(zookeeper: ZooKeeperServer) -> None:
    state = zookeeper.state()
    assert state is not None and state.mode == "standalone"
    write(zookeeper.connect, "/causeway/probe", b"kept")
    zookeeper.kill()
    assert zookeeper.state() is None
    zookeeper.restart()  # same port, same data dir
    assert read(zookeeper.connect, "/causeway/probe") == b"kept"


def test_stopping_the_fixture_leaves_no_jvm_and_no_descriptor(tmp_path: Path) -> None:
    with no_descriptor_left_open(), zookeeper_server(tmp_path / "zk") as server:
        pid = server.pid
        assert pid is not None and is_running(pid)
        assert server.stop() == 143  # the JVM's exit code for SIGTERM: it ran its shutdown hooks
        server.start()
        pid = server.pid
    assert pid is not None and not is_running(pid)


async def leader_of(ensemble: Ensemble) -> int:
    states = await ensemble.wait_ready()
    leaders = [node_id for node_id, state in states.items() if state.mode == "leader"]
    assert len(leaders) == 1, states
    assert sorted(state.mode for state in states.values()) == ["follower"] * (len(states) - 1) + ["leader"]
    return leaders[0]


async def test_three_nodes_elect_one_leader_and_replace_it_when_it_dies(tmp_path: Path) -> None:
    with no_descriptor_left_open():  # no pidfd, log file or client socket of the ensemble's left open
        async with open_ensemble(tmp_path / "zk", nodes=3, tuning=TEST_TUNING) as ensemble:
            assert ensemble.connect == ",".join(node.address for node in ensemble.nodes)
            leader = await leader_of(ensemble)
            follower_a, follower_b = (node for node in ensemble.nodes if node.node_id != leader)
            # Written through one node, read through another: one replicated tree.
            await trio.to_thread.run_sync(write, follower_a.address, "/brokers/ids/0", b"broker 0")
            assert await trio.to_thread.run_sync(read, follower_b.address, "/brokers/ids/0") == b"broker 0"

            await ensemble.kill(leader)
            new_leader = await leader_of(ensemble)  # the two survivors are a quorum
            assert new_leader != leader
            for node in (follower_a, follower_b):
                assert await trio.to_thread.run_sync(read, node.address, "/brokers/ids/0") == b"broker 0"
            await trio.to_thread.run_sync(write, ensemble.connect, "/written/without/the/old/leader", b"x")

            state = await ensemble.start_node(leader)  # rejoins as a follower, and catches up
            assert state.mode == "follower"
            assert await trio.to_thread.run_sync(read, ensemble.node(leader).address,
                                                 "/written/without/the/old/leader") == b"x"
            pids = [node.pid for node in ensemble.nodes]
        assert all(pid is not None and not is_running(pid) for pid in pids)
        assert all(node.proc is None for node in ensemble.nodes)


async def test_a_supervised_node_that_crashes_is_started_again(tmp_path: Path) -> None:
    async with open_ensemble(tmp_path / "zk", nodes=1, tuning=TEST_TUNING, supervise=True) as ensemble:
        (node,) = ensemble.nodes
        await trio.to_thread.run_sync(write, ensemble.connect, "/before", b"crash")
        crashed = node.pid
        assert crashed is not None
        os.kill(crashed, signal.SIGKILL)  # not through the ensemble: a crash it must notice itself

        async def serving_again() -> bool:
            return node.pid not in (None, crashed) and (await ensemble.states())[1] is not None

        await wait_for(serving_again, what="the crashed node to be started again", timeout_s=30)
        assert node.starts == 2 and node.ports.client == int(ensemble.connect.rsplit(":", 1)[1])
        assert await trio.to_thread.run_sync(read, ensemble.connect, "/before") == b"crash"
        pid = node.pid
    assert pid is not None and not is_running(pid)


async def test_a_port_taken_between_pick_and_bind_is_picked_again(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        picks = [taken]  # the first pick collides, as when another process binds the port first

        def pick() -> int:
            return picks.pop() if picks else pick_free_port()

        async with open_ensemble(tmp_path / "zk", nodes=1, tuning=TEST_TUNING, pick_port=pick) as ensemble:
            (node,) = ensemble.nodes
            assert node.ports.client != taken
            assert await trio.to_thread.run_sync(read, ensemble.connect, "/") == b""
            assert node.starts == 1  # this node object is the second attempt's
    log = (tmp_path / "zk" / "node-1" / "zookeeper.log").read_text()
    assert "BindException" in log  # the first attempt failed to bind, and said so


async def test_a_jvm_that_cannot_run_is_a_clear_error(tmp_path: Path) -> None:
    fake_java = tmp_path / "java"
    fake_java.write_text("#!/bin/sh\necho 'Error: could not create the Java Virtual Machine.' >&2\nexit 1\n")
    fake_java.chmod(0o755)
    with pytest.raises(NodeFailed) as failed:
        async with open_ensemble(tmp_path / "zk", nodes=3, java=str(fake_java)):
            raise AssertionError("started")
    message = str(failed.value)
    assert "exited with 1 before it served" in message and "could not create the Java Virtual Machine" in message
    assert not failed.value.bind_failed


def start_cli(tmp_path: Path, *args: str) -> tuple[ChildProcess, str, list[int]]:
    """`causeway zookeeper` in its own process: its ready line's connect string and the pids of
    its nodes (from the lines that follow)."""
    proc = ChildProcess.start("causeway zookeeper", [sys.executable, "-m", "deploy.cli", "zookeeper", "--data-dir",
                                                     str(tmp_path / "zk"), "--tick-time", "500", *args],
                              log_path=tmp_path / "cli.log", cwd=REPO)
    assert proc.stdout is not None
    fd = proc.stdout.fileno()  # read raw: a buffered reader would hide lines from select
    output = b""
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while b"Ctrl-C" not in output:
            if not sel.select(timeout=60):
                proc.kill()
                raise AssertionError(f"not ready: {output!r}; stderr:\n{(tmp_path / 'cli.log').read_text()}")
            chunk = os.read(fd, 65536)
            if not chunk:
                raise AssertionError(f"exited: {output!r}; stderr:\n{(tmp_path / 'cli.log').read_text()}")
            output += chunk
    lines = [line.strip() for line in output.decode().splitlines()]
    assert lines[0].startswith(READY_PREFIX), lines
    pids = [int(line.split(", pid ")[1].split(",")[0]) for line in lines if line.startswith("node ")]
    return proc, lines[0].removeprefix(READY_PREFIX), pids


def test_the_cli_prints_the_connect_string_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    proc, connect, pids = start_cli(tmp_path, "--nodes", "3")
    assert len(connect.split(",")) == 3 and len(pids) == 3
    write(connect, "/causeway/cli", b"up")
    assert proc.stop(30) == 0
    assert not any(is_running(pid) for pid in pids)
    for node in ("node-1", "node-2", "node-3"):
        assert (tmp_path / "zk" / node / "data" / "myid").read_text().strip() == node[-1]
        assert "server.3=127.0.0.1:" in (tmp_path / "zk" / node / "zoo.cfg").read_text()


def test_a_killed_parent_leaves_no_jvm(tmp_path: Path) -> None:
    proc, connect, pids = start_cli(tmp_path)
    assert len(pids) == 1 and is_running(pids[0])
    proc.send_signal(signal.SIGKILL)  # no chance to stop its children: the kernel tells them
    proc.wait()
    wait_until(lambda: not is_running(pids[0]), what="the JVM of a SIGKILLed `causeway zookeeper` to exit",
               timeout_s=30)


def test_the_cli_refuses_a_client_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "deploy.cli", "zookeeper", "--data-dir", str(tmp_path / "zk"),
                               "--port", str(port)], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.returncode == 1
    assert f"client port {port} is already in use" in done.stderr


async def test_the_launcher_gives_a_zookeeper_cluster_its_own_ensemble(tmp_path: Path) -> None:
    from deploy.launcher.control import status
    from deploy.launcher.launch import LaunchState, run_plan
    from deploy.launcher.plan import ClusterPlan, LaunchPlan

    plan = LaunchPlan("zk", (ClusterPlan("east", "east", coordination="zookeeper"),))
    state_dir = tmp_path / "state"
    async with trio.open_nursery() as nursery:
        state: LaunchState = await nursery.start(run_plan, plan, state_dir)
        east = state.clusters["east"]
        assert east.zookeeper is not None
        hosts, _, chroot = east.zookeeper_connect.partition("/")
        assert chroot == "east"

        def chrooted_write() -> None:
            with kazoo(hosts) as client:
                client.ensure_path("/east")
            write(east.zookeeper_connect, "/brokers/ids/0", b"in the chroot")

        await trio.to_thread.run_sync(chrooted_write)
        assert await trio.to_thread.run_sync(read, hosts, "/east/brokers/ids/0") == b"in the chroot"

        report = await trio.to_thread.run_sync(status, state_dir)
        zk = report["clusters"]["east"]["zookeeper"]
        assert zk["connect"] == east.zookeeper_connect and zk["healthy"] and report["healthy"]
        assert list(zk["nodes"].values()) == ["standalone"]

        # `causeway zookeeper` killed: the supervisor starts it again on the same port, same data.
        first = east.zookeeper.pid
        assert first is not None
        jvms = _children(first)
        os.kill(first, signal.SIGKILL)
        await wait_for(lambda: east.zookeeper is not None and east.zookeeper.healthy and east.zookeeper.pid != first,
                       what="the launcher to start ZooKeeper again", timeout_s=60)
        assert all(not is_running(pid) for pid in jvms)  # the old JVM died with its parent
        assert await trio.to_thread.run_sync(read, east.zookeeper_connect, "/brokers/ids/0") == b"in the chroot"
        report = await trio.to_thread.run_sync(status, state_dir)
        assert report["clusters"]["east"]["zookeeper"]["restarts"] == 1
        last = east.zookeeper.pid
        jvms = _children(last) if last else []
        nursery.cancel_scope.cancel()
    assert jvms and not any(is_running(pid) for pid in [*jvms, last])


def _children(pid: int) -> list[int]:
    """The pids of a process's children, from /proc."""
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        found += [int(child) for child in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
    return found


def test_a_topology_with_zookeeper_coordination_compiles_to_a_plan(tmp_path: Path) -> None:
    from deploy.launcher.from_topology import plan_from_file
    from topology import TopologyError

    path = tmp_path / "zk.yaml"
    path.write_text("name: zk\ndatacenters: {east: {}}\nclusters:\n"
                    "  east: {datacenter: east, coordination: zookeeper}\n  west: {datacenter: east}\n")
    plan = plan_from_file(path)
    assert [(c.name, c.coordination) for c in plan.clusters] == [("east", "zookeeper"), ("west", "standalone")]
    path.write_text("name: zk\ndatacenters: {east: {}}\nclusters:\n"
                    "  east: {datacenter: east, coordination: zookeeper, brokers: 3}\n")
    assert plan_from_file(path).clusters[0].broker_ids == (1, 2, 3)
    path.write_text("name: zk\ndatacenters: {east: {}}\nclusters:\n"
                    "  east: {datacenter: east, brokers: 3}\n")
    with pytest.raises(TopologyError, match="3 brokers need coordination: zookeeper"):
        plan_from_file(path)
