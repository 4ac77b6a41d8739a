"""Apache Kafka as a peer: its jars fetched by Maven (`make peers`), its tools run by main class,
a KRaft broker started on free loopback ports. Shared by the interop tests and the benchmarks."""

from bench.peers.cache import Peer, PeerMissing, fetch, peer, peers
from bench.peers.kraft import KafkaBroker
from bench.peers.tools import TOOLS, ToolFailed, ToolRun, main_class, run_tool

__all__ = ["TOOLS", "KafkaBroker", "Peer", "PeerMissing", "ToolFailed", "ToolRun", "fetch", "main_class", "peer",
           "peers", "run_tool"]
