"""The one network model, shared by the synthesizer (cost model), ``best`` and the replayer.

* :mod:`~chakra_collectives.network.events` -- the discrete-event core (SimPy-shaped);
* :mod:`~chakra_collectives.network.model` -- :class:`NetworkModel`: the link arrays, the hop
  cost (:meth:`NetworkModel.hop_ns`), routes, local-operation costs, and the two modes
  (``"default"``, ``"astra-sim"``) with exactly where they differ;
* :mod:`~chakra_collectives.network.graph` / :mod:`~chakra_collectives.network.engine` --
  tasks as flat arrays and the simulation that times them;
* :mod:`~chakra_collectives.network.collective` -- the one lowering of an algorithm to tasks
  (:func:`~chakra_collectives.network.collective.collective_task_graph`, which the replayer
  reuses per collective call), :func:`predict_time` and :func:`simulate_collective`.
"""

from chakra_collectives.network.collective import CollectiveTiming, predict_time, simulate_collective
from chakra_collectives.network.engine import Hops, Timing, run
from chakra_collectives.network.events import EventLoop
from chakra_collectives.network.graph import TaskGraph
from chakra_collectives.network.model import Mode, NetworkModel

__all__ = [
    "CollectiveTiming",
    "EventLoop",
    "Hops",
    "Mode",
    "NetworkModel",
    "TaskGraph",
    "Timing",
    "predict_time",
    "run",
    "simulate_collective",
]
