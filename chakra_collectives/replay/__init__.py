"""Replay a workload's Chakra ETs with collective algorithms on a modeled topology.

* :mod:`~chakra_collectives.replay.algorithms` -- which algorithm each collective runs (files,
  or a producer of the synthesizer registry);
* :mod:`~chakra_collectives.replay.groups` -- process groups (``pg_name``);
* :mod:`~chakra_collectives.replay.expand` -- :func:`~chakra_collectives.replay.expand.expand_workload`:
  a workload and its collectives' algorithms as one engine TaskGraph (each algorithm lowered by
  the network model's :func:`~chakra_collectives.network.collective.collective_task_graph`);
* :mod:`~chakra_collectives.replay.replayer` -- :func:`replay` and its statistics;
* :mod:`~chakra_collectives.replay.step_choice` -- each producer's kind of call timed against the
  built-in in the step, the built-in kept where it is not beaten;
* :mod:`~chakra_collectives.replay.trace` / :mod:`~chakra_collectives.replay.timeline` --
  Chrome-trace / Perfetto output, the timeline ``chakra-coll plot`` draws.

Workload ETs are read and written by :mod:`chakra_collectives.converters.chakra_et`.
"""

from chakra_collectives.replay.algorithms import AlgorithmCatalog, GroupAlgorithms, load_algorithms
from chakra_collectives.replay.groups import ProcessGroups
from chakra_collectives.replay.replayer import ReplayDeadlock, ReplayResult, replay
from chakra_collectives.replay.trace import write_trace

__all__ = [
    "AlgorithmCatalog",
    "GroupAlgorithms",
    "ProcessGroups",
    "ReplayDeadlock",
    "ReplayResult",
    "load_algorithms",
    "replay",
    "write_trace",
]
