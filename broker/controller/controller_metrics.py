"""Kafka's controller metrics: whether this broker is the active controller, and what the
controller sees of the cluster (offline partitions, topic and partition counts, leader elections).

As in Kafka, every broker serves them: a broker that is not the controller says 0, so summing
``kafka_controller_kafkacontroller_activecontrollercount`` over a cluster's brokers gives 1 when
all is well, and ``offlinepartitionscount`` is the controller's alone. The counts are read at
scrape from the state the controller keeps (``ControllerContext.topics``) in the metrics
endpoint's thread, by copying each table in one step and only reading: nothing is maintained on
the controller's path but the leader election counter.

Names are the Prometheus JMX exporter's: ``kafka.controller:type=KafkaController,
name=OfflinePartitionsCount`` is ``kafka_controller_kafkacontroller_offlinepartitionscount``;
``kafka.controller:type=ControllerStats,name=LeaderElectionRateAndTimeMs`` (a timer whose count
the exporter names ``..._count``) is ``kafka_controller_controllerstats_leaderelectionrateandtimems_count``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Protocol

from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, UnknownMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

__all__ = ["NO_LEADER", "count_leader_change", "resigned", "serving"]

NO_LEADER = -1

# What the active controller's view gives, counted: topics, partitions, partitions without a
# leader, partitions not led by their preferred replica. Counted, not listed: a list of every
# partition would be thousands of new objects per scrape for the garbage collector.
Leaders = Callable[[], tuple[int, int, int, int]]


class _State(Protocol):
    @property
    def leader(self) -> int: ...
    @property
    def isr(self) -> tuple[int, ...]: ...


class _ControllerCollector(Collector):
    def __init__(self) -> None:
        self.owner: object | None = None
        self.leaders: Leaders | None = None
        # Counted on the controller's loop, read by the metrics thread (an int is read whole).
        # Per partition whose leader the controller moved to a live broker: Kafka's timer counts
        # election rounds, and its count is what dashboards rate.
        self.elections = 0
        self.unclean = 0

    def collect(self) -> Iterator[Metric]:
        leaders = self.leaders
        topics, partitions, offline, preferred = leaders() if leaders is not None else (0, 0, 0, 0)
        for name, help_text, value in (
            ("activecontrollercount", "1 on the broker that is the active controller, else 0.",
             1 if leaders is not None else 0),
            ("offlinepartitionscount", "Partitions without a live leader, as the active controller sees them.",
             offline),
            ("globaltopiccount", "Topics, as the active controller sees them.", topics),
            ("globalpartitioncount", "Partitions, as the active controller sees them.", partitions),
            ("preferredreplicaimbalancecount", "Partitions not led by their preferred (first) replica.", preferred),
        ):
            family = GaugeMetricFamily(f"kafka_controller_kafkacontroller_{name}", help_text)
            family.add_metric([], float(value))
            yield family
        # The exporter's names for a timer's count and a meter's: `_count` and `_total`, exactly.
        elections = UnknownMetricFamily("kafka_controller_controllerstats_leaderelectionrateandtimems_count",
                                        "Partition leader elections the controller on this broker made (Kafka's "
                                        "LeaderElectionRateAndTimeMs count).")
        elections.add_metric([], float(self.elections))
        yield elections
        unclean = CounterMetricFamily("kafka_controller_controllerstats_uncleanleaderelections",
                                      "Leaders the controller on this broker elected from outside the ISR (Kafka's "
                                      "UncleanLeaderElectionsPerSec).")
        unclean.add_metric([], float(self.unclean))
        yield unclean


_COLLECTOR = _ControllerCollector()
REGISTRY.register(_COLLECTOR)


def serving(owner: object, leaders: Leaders) -> None:
    """`owner` is the active controller now; `leaders()` reads its view (called from the metrics
    thread: it must copy, never change, what it reads)."""
    _COLLECTOR.owner, _COLLECTOR.leaders = owner, leaders


def resigned(owner: object) -> None:
    """`owner`'s term ended (a later term may already have begun: then nothing changes)."""
    if _COLLECTOR.owner is owner:
        _COLLECTOR.owner, _COLLECTOR.leaders = None, None


def count_leader_change(old: _State | None, new: _State) -> None:
    """The controller wrote partition state `new` over `old`: an election when the leader moved
    to a live broker; unclean when that broker was not in the ISR before."""
    if new.leader == NO_LEADER or (old is not None and new.leader == old.leader):
        return
    _COLLECTOR.elections += 1
    if old is not None and old.isr and new.leader not in old.isr:
        _COLLECTOR.unclean += 1
