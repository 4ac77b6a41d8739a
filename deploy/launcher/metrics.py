"""The launcher's own Prometheus metrics: every child it supervises, whether it is up, and how
often it died and was started again.

A broker or mirror that crash-loops shows little of it in its own metrics (each new process
starts its counters at zero, and a process that is down serves nothing); the launcher is the
one that saw every death. `causeway up` serves these at its metrics listener (`--metrics-listener`,
a free port by default), `status` shows the address, and the Prometheus of `monitoring:
prometheus` scrapes it as job `causeway-launcher`, where two alert rules read it.

The endpoint answers from its own thread while the launcher's children change on the event loop:
the loop replaces `LauncherCollector.rows` whole (a tuple) on every start and exit, and a scrape
reads that one reference, never the launcher's live state.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from broker.metrics import MetricsServer, serve_metrics

__all__ = ["DEFAULT_LISTENER", "LISTENER_FLAG", "ChildRow", "LauncherCollector", "MetricsListenerError",
           "serve_launcher_metrics"]

#: Where the launcher serves by default: loopback, a port the kernel picks (shown by `status`).
DEFAULT_LISTENER = "127.0.0.1:0"
#: The `causeway up` option that moves it; named in the error when it cannot bind.
LISTENER_FLAG = "--metrics-listener"


class MetricsListenerError(Exception):
    """The launcher's metrics listener cannot be bound (a port taken, an address not ours)."""


@dataclass(frozen=True)
class ChildRow:
    """One supervised child as a scrape sees it."""

    process: str  # the supervisor's name for it: `broker east-1`, `mirror east-to-west`, `wan emulator`
    kind: str  # broker, zookeeper, mirror, wan, prometheus
    up: bool  # running and past its ready line
    restarts: int  # times it died on its own and was started again


class LauncherCollector(Collector):
    """The children's rows, replaced whole by the launcher; served as two families."""

    def __init__(self) -> None:
        self.rows: tuple[ChildRow, ...] = ()

    def update(self, rows: Iterable[ChildRow]) -> None:
        """Called on the event loop whenever a child starts or exits."""
        self.rows = tuple(rows)

    def collect(self) -> Iterator[Metric]:
        rows = self.rows  # one read: the loop may replace it meanwhile, never change it
        up = GaugeMetricFamily("causeway_launcher_process_up",
                               "1 while the supervised process runs and has said it is ready, else 0",
                               labels=["process", "kind"])
        restarts = CounterMetricFamily("causeway_launcher_process_restarts",
                                       "Times the supervised process died on its own and was started again",
                                       labels=["process", "kind"])
        for row in rows:
            up.add_metric([row.process, row.kind], 1.0 if row.up else 0.0)
            restarts.add_metric([row.process, row.kind], float(row.restarts))
        yield up
        yield restarts


def serve_launcher_metrics(listener: str, collector: LauncherCollector) -> MetricsServer:
    """Serve `collector` and the launcher process's own `process_*` series at `listener`
    (HOST:PORT, port 0 for a free one), in a registry of its own: a test that runs several
    launchers in one process gets each its own series. Raises MetricsListenerError naming the
    flag and the system's reason."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    registry.register(collector)
    try:
        return serve_metrics(listener, registry=registry, key=LISTENER_FLAG)
    except (OSError, ValueError) as exc:
        raise MetricsListenerError(str(exc)) from None
