"""Replay a workload's Chakra ETs with collective algorithms on a modeled topology.

* :mod:`~chakra_collectives.replay.workload` -- read workload ETs (all node types);
* :mod:`~chakra_collectives.replay.algorithms` -- which algorithm each collective runs;
* :mod:`~chakra_collectives.replay.groups` -- process groups (``pg_name``);
* :mod:`~chakra_collectives.replay.expand` -- lower workload + algorithms to engine tasks;
* :mod:`~chakra_collectives.replay.replayer` -- :func:`replay` and its statistics;
* :mod:`~chakra_collectives.replay.trace` -- Chrome-trace / Perfetto output;
* :mod:`~chakra_collectives.replay.writer` -- write small workload ETs.
"""

from chakra_collectives.replay.algorithms import AlgorithmCatalog, load_algorithms
from chakra_collectives.replay.groups import ProcessGroups
from chakra_collectives.replay.replayer import ReplayDeadlock, ReplayResult, replay
from chakra_collectives.replay.trace import write_trace
from chakra_collectives.replay.workload import Workload, read_workload
from chakra_collectives.replay.writer import WorkloadBuilder, single_collective_workload

__all__ = [
    "AlgorithmCatalog",
    "ProcessGroups",
    "ReplayDeadlock",
    "ReplayResult",
    "Workload",
    "WorkloadBuilder",
    "load_algorithms",
    "read_workload",
    "replay",
    "single_collective_workload",
    "write_trace",
]
