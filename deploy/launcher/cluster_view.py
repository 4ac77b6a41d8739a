"""A running cluster as its brokers describe it: Metadata through the project's admin client.

`read_view` is what `causeway status` shows of a cluster (registered brokers, the controller,
under-replicated and offline partitions); `wait_for_controller` and `create_topics` are the last
steps of `causeway up` for a cluster. The partition states are Kafka's: a partition whose ISR is
smaller than its replica set is under-replicated, one without a leader (-1) is offline.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import trio

from broker.client import ClientError, KafkaError
from broker.client.admin import NewTopic
from broker.client.admin import create_topics as admin_create_topics
from broker.client.cluster import ClusterMetadata, open_client
from broker.tasks import gather
from deploy.launcher.plan import TopicPlan
from deploy.supervisor import StartFailed
from security.client import ClientSecurity

__all__ = ["ClusterView", "PartitionProblem", "create_topics", "read_view", "read_views", "view_of",
           "wait_for_controller"]

log = logging.getLogger(__name__)

#: How long `up` waits for a ZooKeeper cluster's controller once every broker is ready (they
#: registered before saying so; the election is one znode write).
CONTROLLER_TIMEOUT_S = 60.0
#: How long `up` gives the creation of a cluster's topics (leaders elected on every partition).
TOPICS_TIMEOUT_S = 60.0
_POLL_S = 0.2


@dataclass(frozen=True)
class PartitionProblem:
    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]

    def __str__(self) -> str:
        return (f"{self.topic}-{self.partition} (leader {self.leader}, replicas {_ids(self.replicas)}, "
                f"isr {_ids(self.isr)})")


def _ids(ids: tuple[int, ...]) -> str:
    return ",".join(map(str, ids)) or "none"


@dataclass(frozen=True)
class ClusterView:
    controller_id: int  # -1: none
    brokers: tuple[int, ...]  # registered (listed in Metadata), sorted
    partitions: int
    under_replicated: list[PartitionProblem] = field(default_factory=list)
    offline: list[PartitionProblem] = field(default_factory=list)


def view_of(metadata: ClusterMetadata) -> ClusterView:
    """Kafka's partition health from one Metadata answer (every topic, internal ones included)."""
    under: list[PartitionProblem] = []
    offline: list[PartitionProblem] = []
    count = 0
    for name in sorted(metadata.topics):
        topic = metadata.topics[name]
        for index in sorted(topic.partitions):
            p = topic.partitions[index]
            count += 1
            problem = PartitionProblem(name, index, p.leader, tuple(p.replicas), tuple(p.isr))
            if p.leader < 0:
                offline.append(problem)
            elif len(p.isr) < len(p.replicas):
                under.append(problem)
    return ClusterView(metadata.controller_id, tuple(sorted(metadata.brokers)), count, under, offline)


async def read_view(bootstrap: str, *, timeout_s: float = 5.0, security: ClientSecurity | None = None) -> ClusterView:
    """Metadata for every topic from any broker of `bootstrap`, logged in with `security` when
    the cluster's LOCAL listener asks for it. Raises ClientError (no broker answered in
    `timeout_s`)."""
    with trio.fail_after(timeout_s + 1):  # the client's own deadline comes first
        async with open_client(bootstrap, client_id="causeway-status", request_timeout_s=timeout_s,
                               connect_timeout_s=min(2.0, timeout_s), security=security) as client:
            return view_of(await client.refresh_metadata())


async def _view_or_reason(address: str, timeout_s: float, security: ClientSecurity | None) -> ClusterView | str:
    with trio.move_on_after(timeout_s):  # the client's requests end by this deadline too
        try:
            return await read_view(address, timeout_s=timeout_s, security=security)
        except (ClientError, KafkaError, OSError, ValueError, trio.TooSlowError) as exc:
            return f"no answer to Metadata from {address}: {exc or type(exc).__name__}"
    return f"no answer to Metadata from {address} within {timeout_s:g} s"


async def read_views(addresses: Sequence[str], *, timeout_s: float = 3.0,
                     security: ClientSecurity | None = None) -> list[ClusterView | str]:
    """Each broker's own view (`causeway status`), asked of all at once, each for at most
    `timeout_s`, in `addresses`' order; a string says why a broker gave none. Each broker
    separately, not any one of them: a broker that just restarted answers before it has
    rejoined, and the others may still list its previous run until ZooKeeper expires that
    run's session."""
    calls = [partial(_view_or_reason, address, timeout_s, security) for address in addresses]
    return await gather(calls, collect=())


async def wait_for_controller(bootstrap: str, broker_ids: set[int], *, what: str, log_path: Path,
                              timeout_s: float = CONTROLLER_TIMEOUT_S,
                              security: ClientSecurity | None = None) -> ClusterView:
    """Poll Metadata until the cluster has a controller and lists every broker of `broker_ids`.
    Raises StartFailed naming what is missing after `timeout_s`."""
    last: ClusterView | str = "no answer yet"
    with trio.move_on_after(timeout_s):
        while True:
            try:
                last = await read_view(bootstrap, timeout_s=min(5.0, timeout_s), security=security)
            except (ClientError, KafkaError, trio.TooSlowError) as exc:
                last = f"Metadata failed: {exc}"
            if isinstance(last, ClusterView) and last.controller_id >= 0 and broker_ids <= set(last.brokers):
                return last
            await trio.sleep(_POLL_S)
    if isinstance(last, ClusterView):
        missing = sorted(broker_ids - set(last.brokers))
        reason = (f"no controller after {timeout_s:.0f} s" if last.controller_id < 0 else
                  f"brokers {_ids(tuple(missing))} not registered after {timeout_s:.0f} s")
        reason += f" (Metadata lists brokers {_ids(last.brokers)}, controller {last.controller_id})"
    else:
        reason = f"no controller after {timeout_s:.0f} s ({last})"
    raise StartFailed(what, reason, log_path)


async def create_topics(bootstrap: str, topics: Mapping[str, TopicPlan], *, what: str, log_path: Path,
                        timeout_s: float = TOPICS_TIMEOUT_S, security: ClientSecurity | None = None) -> None:
    """Create the plan's topics that are missing (a restarted topology finds them in its data).
    Raises StartFailed with the broker's answer (an invalid config, say)."""
    if not topics:
        return
    wanted = {name: NewTopic(t.partitions, -1 if t.replication_factor is None else t.replication_factor,
                             dict(t.configs))
              for name, t in topics.items()}
    try:
        with trio.fail_after(timeout_s):
            async with open_client(bootstrap, client_id="causeway-up", request_timeout_s=timeout_s,
                                   security=security) as client:
                await admin_create_topics(client, wanted, exist_ok=True)
    except (ClientError, KafkaError, trio.TooSlowError) as exc:
        raise StartFailed(what, f"cannot create its topics {', '.join(topics)}: {exc or 'timed out'}",
                          log_path) from exc
    log.info("%s: topics %s ready", what, ", ".join(topics))
