"""A model of ASTRA-sim's system layer and analytical backends (astra-sim 518bd51).

Given ASTRA-sim's own inputs -- workload ETs, the system JSON, the analytical network and
(optionally) communicator groups -- :func:`simulate` predicts what each rank's
``sys[i] finished, T cycles`` line will say, for both binaries:

* :class:`~chakra_collectives.converters.astra_sim.SystemConfig` -- the system JSON (a format: in converters/);
* :mod:`~chakra_collectives.astra_system.kernel` -- event ordering, timers, send/recv matching;
* :mod:`~chakra_collectives.astra_system.backends` -- congestion-aware and -unaware networks;
* :mod:`~chakra_collectives.astra_system.logical` -- rings and trees per dimension;
* :mod:`~chakra_collectives.astra_system.native` -- ring, direct, halvingDoubling, doubleBinaryTree;
* :mod:`~chakra_collectives.astra_system.custom` -- custom collectives (Chakra ETs);
* :mod:`~chakra_collectives.astra_system.system` -- splits, phases, queues, scheduling policy;
* :mod:`~chakra_collectives.astra_system.driver` -- the workload layer and :func:`simulate`.

A library user replays a workload through :func:`chakra_collectives.workload_replay.replay_workload`,
which runs this model when given a system JSON.
"""

from chakra_collectives.converters.astra_sim.system import SystemConfig
from chakra_collectives.astra_system.driver import AstraSimRun, read_comm_groups, simulate
from chakra_collectives.astra_system.kernel import AstraSimAbort

__all__ = ["AstraSimAbort", "AstraSimRun", "SystemConfig", "read_comm_groups", "simulate"]
