"""The topology language: datacenters, clusters, WAN links and mirrors in one YAML file."""

from topology.errors import Problem, TopologyError
from topology.model import Topology, load_topology

__all__ = ["Problem", "Topology", "TopologyError", "load_topology"]
