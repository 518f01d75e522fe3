"""Topologies: NPUs, switches and directed links (bandwidth GB/s, latency ns)."""

from chakra_collectives.topology.core import Link, Topology

__all__ = ["Link", "Topology"]
