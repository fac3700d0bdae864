"""Cluster topologies: node designs (YAML) built into networkx graphs with routes."""

from scalesim.topology.build import build_node_graph
from scalesim.topology.cluster import FABRICS, Fabric, build_cluster
from scalesim.topology.design import NodeDesign, builtin_topology_names, load_node_design
from scalesim.topology.topology import Topology

__all__ = ["FABRICS", "Fabric", "NodeDesign", "Topology", "build_cluster", "build_node_graph",
           "builtin_topology_names", "load_node_design"]
