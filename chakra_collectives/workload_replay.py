"""Replay a workload: the one entry point that chooses between the network model and the ASTRA-sim twin.

:func:`replay_workload` is what ``chakra-coll replay`` calls, and what a library user calls:

* without ``system`` -- the network model's replay (:func:`chakra_collectives.replay.replay`):
  every collective expanded into its algorithm's messages on the topology, under the network
  model ``network_model`` and the ``concurrency`` rule;
* with ``system`` (ASTRA-sim's system JSON; needs ``network_model="astra-sim"``) -- the model
  of ASTRA-sim as a whole (:func:`chakra_collectives.astra_system.report.replay_astra_sim`):
  native collectives with their splits, phases and queues, custom ones, either backend.

Both apply ASTRA-sim's per-rank rule the same way (:func:`chakra_collectives.ir.workload.execution_units`).
The result's ``as_dict()`` is the document ``replay --json`` prints (the CLI adds
``schema_version``).

>>> from chakra_collectives.topology import load_topology
>>> from chakra_collectives.workload import microbenchmark
>>> import tempfile, pathlib
>>> with tempfile.TemporaryDirectory() as tmp:
...     _ = microbenchmark("all-reduce", 4, 2**20).write(pathlib.Path(tmp) / "ar")
...     result = replay_workload(pathlib.Path(tmp) / "ar", load_topology("ring:4"), default_algorithm="*=ring")
>>> result.as_dict()["network_model"], len(result.ranks)
('default', 4)
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from chakra_collectives import progress
from chakra_collectives.astra_system.report import AstraSimReplay, replay_astra_sim
from chakra_collectives.converters.chakra_et.workload_reader import read_workload
from chakra_collectives.errors import InputError
from chakra_collectives.ir.workload import Workload
from chakra_collectives.replay import ProcessGroups, ReplayResult, load_algorithms, replay
from chakra_collectives.replay.algorithms import DEFAULT_ALGORITHMS
from chakra_collectives.replay.expand import CONCURRENCY
from chakra_collectives.topology import Topology

ASTRA_SIM = "astra-sim"


def check_replay_options(*, network_model: str | None, system: str | Path | None, astra_sim_backend: str | None, concurrency: str = "unlimited") -> None:
    """Refuse combinations :func:`replay_workload` cannot run (before any file is read)."""
    if system is not None or astra_sim_backend is not None:
        if network_model != ASTRA_SIM:
            raise InputError("--system and --astra-sim-backend model ASTRA-sim: add --network-model astra-sim")
        if system is None:
            raise InputError("--astra-sim-backend needs --system (ASTRA-sim's system JSON)")
        return
    if concurrency not in CONCURRENCY:
        raise InputError(f"unknown --concurrency {concurrency!r} (valid: {', '.join(CONCURRENCY)})")


def replay_workload(
    workload: Workload | str | Path,
    topology: Topology,
    *,
    network_model: str | None = None,
    system: str | Path | None = None,
    astra_sim_backend: str | None = None,
    algorithms: Sequence[str] = (),
    override_collective: bool = False,
    default_algorithm: str = DEFAULT_ALGORITHMS,
    in_step_choice: bool = True,
    comm_groups: str | Path | None = None,
    concurrency: str = "unlimited",
    reduce_bandwidth_gbps: float | None = None,
    rescale: bool = False,
    record_links: bool = False,
) -> ReplayResult | AstraSimReplay:
    """Time ``workload`` (a :class:`Workload` or an ET prefix) on ``topology``; see the module docstring.

    Parameters
    ----------
    network_model:
        ``default`` (None) or ``astra-sim``: the network model of the replay.
    system, astra_sim_backend:
        ASTRA-sim's system JSON and the backend (``aware`` / ``unaware``; default: what ASTRA-sim
        runs for the network): model ASTRA-sim as a whole (``network_model`` must be ``astra-sim``).
    algorithms:
        ``TYPE=PREFIX`` (or ``PREFIX``) algorithm files; under ``system`` they become custom
        collectives. Files that implement another type are refused unless ``override_collective``.
    default_algorithm, in_step_choice, concurrency, reduce_bandwidth_gbps, record_links:
        The network model's replay only (:func:`chakra_collectives.replay.replay`).
    comm_groups:
        The communicator-group file (default: none, every collective over all ranks).
    rescale:
        Scale algorithm files to each call's size (ASTRA-sim runs a custom collective at the
        size it was written for).
    """
    check_replay_options(network_model=network_model, system=system, astra_sim_backend=astra_sim_backend, concurrency=concurrency)
    if system is not None:
        return replay_astra_sim(workload, topology, system, backend=astra_sim_backend, comm_groups=comm_groups, collectives=list(algorithms),
                                rescale=rescale, override=override_collective)
    loaded = [load_algorithms(list(algorithms), override=override_collective)]
    groups = None
    if comm_groups:
        if not isinstance(workload, Workload):
            with progress.task("read the workload"):
                workload = read_workload(workload)
        groups = ProcessGroups.load(comm_groups, num_ranks=workload.num_ranks)
    return replay(
        workload,
        topology,
        algorithms=loaded.pop(),  # replay holds the only reference: it lets go of them once they are expanded
        default_algorithm=default_algorithm,
        in_step_choice=in_step_choice,
        groups=groups,
        network_model=network_model,
        reduce_bandwidth_gbps=reduce_bandwidth_gbps,
        concurrency=concurrency,
        record_links=record_links,
        rescale=True if rescale else None,
    )


__all__ = ["check_replay_options", "replay_workload"]
