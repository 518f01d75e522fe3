"""Topologies: NPUs, switches and directed links (bandwidth GB/s, latency ns).

* :mod:`~chakra_collectives.topology.core` -- :class:`Topology`, :class:`Link`, routes;
* :mod:`~chakra_collectives.topology.builders` -- rings, meshes, tori, hypercubes, switches, DGX-like,
  ForestColl's A100 and MI250 platforms;
* :mod:`~chakra_collectives.topology.symmetry` -- automorphisms that move every NPU (classes of alike NPUs);
* :mod:`~chakra_collectives.topology.loaders` -- :func:`load_topology` (specs and files);
* :mod:`~chakra_collectives.topology.dump` -- :func:`dump_topology` (a Topology as our YAML file).
"""

from chakra_collectives.topology.builders import (
    a100,
    dgx,
    fully_connected,
    hetero_mesh2d,
    hypercube,
    mesh2d,
    mesh3d,
    mi250,
    ring,
    switch,
    torus2d,
    torus3d,
)
from chakra_collectives.topology.core import Link, Topology
from chakra_collectives.topology.dump import dump_topology
from chakra_collectives.topology.loaders import BUILDERS, load_topology, load_topology_file

__all__ = [
    "BUILDERS",
    "a100",
    "Link",
    "Topology",
    "dgx",
    "dump_topology",
    "fully_connected",
    "hetero_mesh2d",
    "hypercube",
    "load_topology",
    "load_topology_file",
    "mesh2d",
    "mesh3d",
    "mi250",
    "ring",
    "switch",
    "torus2d",
    "torus3d",
]
