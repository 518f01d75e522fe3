"""ASTRA-sim's configuration files: the analytical network (``network.yml``) and the system
configuration (``system.json``).

* :mod:`.network` -- :func:`parse_network` (a parsed file to an :class:`AnalyticalNetwork`,
  which :func:`~chakra_collectives.topology.load_topology` builds into a topology) and
  :func:`analytical_network` (a topology to the file, or why it has none);
* :mod:`.system` -- :func:`system_config`: custom collectives from Chakra ETs, native ones
  per dimension; :class:`SystemConfig`: a system file as ASTRA-sim reads it.

The directory ASTRA-sim runs (these files, the ETs, a workload, ``run.sh``) is written by
:func:`chakra_collectives.astra_sim.write_astra_sim_dir`.
"""

from chakra_collectives.converters.astra_sim.network import (
    AnalyticalNetwork,
    Dimension,
    NotExpressible,
    analytical_network,
    parse_network,
)
from chakra_collectives.converters.astra_sim.system import CUSTOM_KEYS, REMOTE_MEMORY, SystemConfig, system_config

__all__ = [
    "AnalyticalNetwork",
    "CUSTOM_KEYS",
    "Dimension",
    "NotExpressible",
    "REMOTE_MEMORY",
    "SystemConfig",
    "analytical_network",
    "parse_network",
    "system_config",
]
