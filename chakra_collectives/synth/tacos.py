"""TACOS: topology-aware All-Gather, Reduce-Scatter and All-Reduce by link-chunk matching.

* All-Gather: :func:`~chakra_collectives.synth.matcher.match_all_gather` on the topology's
  channels (:mod:`~chakra_collectives.synth.channels`), ``chunks_per_npu`` chunks per NPU.
* Reduce-Scatter: the All-Gather of the *reversed* channels, run backwards in time with
  reductions (TACOS's time-reversal argument: a Reduce-Scatter is an All-Gather mirrored).
* All-Reduce: that Reduce-Scatter, then an All-Gather.

Switches are *not* unwound: a chunk between two NPUs that share only switches crosses the
switch hops of the topology's route, store-and-forward, with FIFO queues, exactly as the
network model replays it (see :mod:`~chakra_collectives.synth.matcher`).

``trials`` runs the matcher with seeds ``seed, seed+1, ...`` and keeps the fastest schedule
(ties: the lowest seed), so a result is reproducible from ``(seed, trials)``.

>>> from chakra_collectives.topology import torus2d
>>> from chakra_collectives.verify import verify_algorithm
>>> result = tacos(torus2d(3, 3), Collective.ALL_REDUCE, 9 * 2**20, chunks_per_npu=2)
>>> result.algorithm.num_ranks, result.algorithm.chunk_count, verify_algorithm(result.algorithm).ok
(9, 18, True)
"""

from __future__ import annotations

from dataclasses import dataclass

from chakra_collectives.errors import InputError
from chakra_collectives.ir import Collective, CollectiveAlgorithm
from chakra_collectives.synth.channels import Channels, build_channels
from chakra_collectives.synth.lowering import all_gather_algorithm, all_reduce_algorithm, reduce_scatter_algorithm
from chakra_collectives.synth.matcher import Schedule, match_all_gather
from chakra_collectives.topology.core import Topology

SUPPORTED = (Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_REDUCE)

SWITCH_HANDLING = (
    "switches are routed, not unwound: a chunk crosses the route's switch hops store-and-forward "
    "with FIFO queues, as the network model replays it"
)


@dataclass(frozen=True)
class TacosResult:
    algorithm: CollectiveAlgorithm
    schedule_ns: float
    """The matcher's own finishing time (Reduce-Scatter + All-Gather for All-Reduce)."""
    seed: int
    """The seed whose schedule was kept."""
    phases: tuple[Schedule, ...]
    """The schedules used: (All-Gather,), (reversed All-Gather,) or (reversed, All-Gather)."""


def tacos(
    topology: Topology,
    collective: Collective,
    size_bytes: int,
    *,
    chunks_per_npu: int = 1,
    seed: int = 0,
    trials: int = 1,
) -> TacosResult:
    """Synthesize ``collective`` of ``size_bytes`` on ``topology`` (see the module docstring).

    The collective's size is cut into ``num_npus * chunks_per_npu`` chunks of
    ``ceil(size / chunks)`` bytes (the IR's padding rule).
    """
    if collective not in SUPPORTED:
        raise InputError(f"TACOS synthesizes {', '.join(c.value for c in SUPPORTED)}, not {collective.value}")
    if chunks_per_npu < 1:
        raise InputError(f"chunks per NPU must be positive, got {chunks_per_npu}")
    if trials < 1:
        raise InputError(f"trials must be positive, got {trials}")
    if topology.num_npus < 2:
        raise InputError("a collective needs at least 2 NPUs")
    n = topology.num_npus
    chunk_bytes = -(-size_bytes // (n * chunks_per_npu))
    channels = build_channels(topology, chunk_bytes=chunk_bytes)
    best: tuple[float, int, tuple[Schedule, ...]] | None = None
    for trial in range(trials):
        phases = _phases(channels, collective, chunks_per_npu, seed + trial)
        total = sum(p.time_ns for p in phases)
        if best is None or total < best[0]:
            best = (total, seed + trial, phases)
    assert best is not None
    total, chosen, phases = best
    provenance = {
        "algorithm": "tacos",
        "topology": topology.name,
        "chunks_per_npu": str(chunks_per_npu),
        "seed": str(chosen),
        "trials": str(trials),
        "switches": "routed" if topology.num_switches else "none",
    }
    if collective is Collective.ALL_GATHER:
        algo = all_gather_algorithm(phases[0], size_bytes=size_bytes, provenance=provenance)
    elif collective is Collective.REDUCE_SCATTER:
        algo = reduce_scatter_algorithm(phases[0], size_bytes=size_bytes, provenance=provenance)
    else:
        algo = all_reduce_algorithm(phases[0], phases[1], size_bytes=size_bytes, provenance=provenance)
    return TacosResult(algorithm=algo, schedule_ns=total, seed=chosen, phases=phases)


def _phases(channels: Channels, collective: Collective, k: int, seed: int) -> tuple[Schedule, ...]:
    if collective is Collective.ALL_GATHER:
        return (match_all_gather(channels, k, seed=seed),)
    reversed_ag = match_all_gather(channels.reversed(), k, seed=seed)
    if collective is Collective.REDUCE_SCATTER:
        return (reversed_ag,)
    return (reversed_ag, match_all_gather(channels, k, seed=seed))
