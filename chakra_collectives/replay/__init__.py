"""Replay a workload's Chakra ETs with collective algorithms on a modeled topology.

* :mod:`~chakra_collectives.replay.algorithms` -- which algorithm each collective runs;
* :mod:`~chakra_collectives.replay.groups` -- process groups (``pg_name``);
* :mod:`~chakra_collectives.replay.expand` -- lower workload + algorithms to engine tasks;
* :mod:`~chakra_collectives.replay.replayer` -- :func:`replay` and its statistics;
* :mod:`~chakra_collectives.replay.trace` -- Chrome-trace / Perfetto output;
(Workload ETs are read and written by :mod:`chakra_collectives.converters.chakra_et`.)
"""

from chakra_collectives.replay.algorithms import AlgorithmCatalog, load_algorithms
from chakra_collectives.replay.groups import ProcessGroups
from chakra_collectives.replay.replayer import ReplayDeadlock, ReplayResult, replay
from chakra_collectives.replay.trace import write_trace

__all__ = [
    "AlgorithmCatalog",
    "ProcessGroups",
    "ReplayDeadlock",
    "ReplayResult",
    "load_algorithms",
    "replay",
    "write_trace",
]
