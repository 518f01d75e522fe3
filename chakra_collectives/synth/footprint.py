"""What producing (and predicting) an algorithm costs in memory, known before it is produced.

:func:`estimate` gives a :class:`~chakra_collectives.resources.Estimate` for one registered
producer, collective, rank count and chunking; :func:`~chakra_collectives.synth.synthesize`
refuses a producer whose estimate does not fit the memory limit (``best`` skips it and says
so), and the replayer does the same for the algorithms it builds. A producer states its own
model as :attr:`~chakra_collectives.synth.registry.Synthesizer.footprint`; the default is
:func:`pair_footprint`.

Two models, upper envelopes of measured peaks (``bench/bench_estimates.py`` measures them):

* :func:`pair_footprint` (TACOS, BFB, any producer that states none): the work is the
  ``(NPU, chunk)`` pairs each phase serves, ``N * N * K`` per phase, at :data:`PER_PAIR`
  bytes each (TACOS: about 90 bytes per pair at 1,024 NPUs, matching and prediction included).
* :func:`message_footprint` (the baselines): every message becomes about 2.5 operations of
  :data:`PER_OP` bytes and, when predicted, one task per link it crosses (:data:`PER_HOP`); some
  baselines also keep per-chunk state for every rank (``per_slot`` bytes per ``(rank, chunk)``).

>>> from chakra_collectives.topology import load_topology
>>> from chakra_collectives.ir import Collective
>>> from chakra_collectives.synth.registry import SynthesisOptions
>>> e = estimate("direct", load_topology("ring:4096"), Collective.ALL_REDUCE, 4096, SynthesisOptions(size_bytes=2**20))
>>> e.what, e.work
('synthesizing direct all-reduce on ring:4096', '33.5M messages, 34.4G message hops, 16.8M (rank, chunk) slots')
>>> e.nbytes > 2**40          # every message crosses 1,024 links on average: terabytes
True
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from chakra_collectives.ir import Collective
from chakra_collectives.resources import Estimate, count
from chakra_collectives.synth.registry import SynthesisOptions, get
from chakra_collectives.topology.core import Topology
from chakra_collectives.topology.distances import hop_distances

PER_PAIR = 100
"""Bytes per ``(NPU, chunk)`` pair and phase of a pair-model producer, up to :data:`MERGING_FROM`
pairs (TACOS All-Gather measured 90-121 above start-up at 1,024-4,096 NPUs)."""
PAIR_BASE = 64 * 2**20
"""Fixed bytes of a pair-model producer (its tables, imports, the prediction's set-up)."""
MERGING_FROM = 2**24
"""Pairs per phase beyond which the bytes per pair fall as ``(pairs / MERGING_FROM) ** MERGING_EXPONENT``:
larger phases merge more chunks into each message (TACOS All-Gather measured 55 bytes per pair
at 4,096 NPUs and 29 at 16,384 since the lowering works block by block; this envelope gives
100 and 44)."""
MERGING_EXPONENT = -0.3
PER_OP = 600
"""Bytes per operation of a baseline, built and predicted (measured 450-490 at 256-1,024 ranks)."""
PER_HOP = 150
"""Bytes per link a predicted message crosses (measured 80-110)."""
SAMPLES = 8
"""NPUs whose distances to all others estimate a topology's mean route length."""

Footprint = Callable[[Topology, Collective, int, SynthesisOptions], tuple[float, str]]
"""``footprint(topology, collective, num_ranks, options) -> (bytes, what they count)``."""

ADVICE = "use fewer NPUs or fewer chunks per NPU (--chunks-per-npu), or another algorithm (--algorithm)"
ADVICE_ONE_CHUNK = "use fewer NPUs or another algorithm (--algorithm)"
"""What to change when even one chunk per NPU is too large."""


def phases(collective: Collective) -> int:
    """All-Reduce is two phases (Reduce-Scatter, then All-Gather); every other collective one."""
    return 2 if collective is Collective.ALL_REDUCE else 1


def estimate(name: str, topology: Topology, collective: Collective, num_ranks: int, options: SynthesisOptions) -> Estimate:
    """The memory producer ``name`` needs for ``collective`` over ``num_ranks`` ranks of ``topology``."""
    footprint = get(name).footprint or pair_footprint
    nbytes, work = footprint(topology, collective, num_ranks, options)
    advice = ADVICE if options.chunks_per_npu > 1 else ADVICE_ONE_CHUNK
    return Estimate(f"synthesizing {name} {collective.value} on {topology.name}", nbytes, work, advice)


def pair_footprint(topology: Topology, collective: Collective, num_ranks: int, options: SynthesisOptions) -> tuple[float, str]:
    """:data:`PAIR_BASE` plus :data:`PER_PAIR` bytes per ``(NPU, chunk)`` pair and phase
    (``N * N * K`` pairs per phase), fewer per pair beyond :data:`MERGING_FROM` pairs.

    >>> from chakra_collectives.topology import load_topology
    >>> nbytes, work = pair_footprint(load_topology("torus2d:128x128"), Collective.ALL_GATHER, 16384, SynthesisOptions(size_bytes=2**26))
    >>> work, round(nbytes / 2**30, 1)      # measured: a 7.3 GiB peak
    ('268M (NPU, chunk) pairs', 10.9)
    """
    per_phase = float(num_ranks) * num_ranks * options.chunks_per_npu
    pairs = per_phase * phases(collective)
    per_pair = PER_PAIR * min(1.0, (per_phase / MERGING_FROM) ** MERGING_EXPONENT)
    return PAIR_BASE + per_pair * pairs, f"{count(pairs)} (NPU, chunk) pairs"


def message_footprint(messages: Callable[[Collective, int, int], float], pattern: str, *, per_slot: float = 0.0) -> Footprint:
    """A baseline's footprint from its message count ``messages(collective, N, K)`` and
    ``pattern``, which partners its messages go between: ``neighbour`` (rank ``r`` and
    ``r + 1``) or ``any`` (all pairs); ``per_slot`` bytes of per-chunk state per rank."""

    def footprint(topology: Topology, collective: Collective, num_ranks: int, options: SynthesisOptions) -> tuple[float, str]:
        sent = float(messages(collective, num_ranks, options.chunks_per_npu))
        hops = sent * mean_route_length(topology, num_ranks, pattern)
        slots = float(num_ranks) * num_ranks * options.chunks_per_npu
        nbytes = PER_OP * 2.5 * sent + PER_HOP * hops + per_slot * slots
        state = f", {count(slots)} (rank, chunk) slots" if per_slot else ""
        return nbytes, f"{count(sent)} messages, {count(hops)} message hops{state}"

    return footprint


def mean_route_length(topology: Topology, num_ranks: int, pattern: str) -> float:
    """Mean number of links a message crosses between partners of ``pattern``, from the
    distances of up to :data:`SAMPLES` NPUs (hops through switches count)."""
    n = min(num_ranks, topology.num_npus)
    if n < 2:
        return 1.0
    sources = np.unique(np.linspace(0, n - 1, min(SAMPLES, n)).astype(np.int64))
    arrays = topology.link_arrays
    distances = hop_distances(topology.num_nodes, arrays["src"], arrays["dst"], sources=sources)
    if pattern == "neighbour":
        hops = distances[np.arange(len(sources)), (sources + 1) % n]
    else:
        hops = distances[:, :n][np.arange(n)[None, :] != sources[:, None]]
    hops = hops[np.isfinite(hops)]
    return float(hops.mean()) if len(hops) else 1.0


__all__ = ["ADVICE", "Footprint", "PER_HOP", "PER_OP", "PER_PAIR", "estimate", "mean_route_length", "message_footprint", "pair_footprint", "phases"]
