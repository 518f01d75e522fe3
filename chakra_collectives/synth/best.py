"""``--algorithm best``: TACOS against every applicable baseline, fastest by predicted time.

Every candidate is timed by the network model (:func:`~chakra_collectives.network.predict_time`)
and the fastest wins (ties: the first in :func:`applicable`'s order). Building and timing a
baseline on a few hundred NPUs costs seconds, so a baseline is skipped when it provably cannot
win: its messages (known without building it, :func:`~chakra_collectives.synth.baselines.baseline_messages`)
must all cross their routes, each holding every link of it for ``latency + bytes / bandwidth``,
so the busiest link's total (:func:`link_load_ns`) bounds its predicted time from below. When
that bound is no better than the fastest time found so far, the baseline is reported with the
bound instead of a prediction. Candidates are tried in order of their bounds, TACOS first.

>>> from chakra_collectives.topology import load_topology
>>> topo = load_topology("ring:8")
>>> from chakra_collectives.synth.baselines import baseline_messages
>>> src, dst, chunks = baseline_messages("ring", Collective.ALL_GATHER, 8)
>>> from chakra_collectives.network import NetworkModel
>>> link_load_ns(topo, src, dst, chunks * 2**20) == 7 * float(NetworkModel(topo).hop_ns([0], 2**20)[0])
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from chakra_collectives.ir import Collective
from chakra_collectives.network.model import NetworkModel
from chakra_collectives.synth.baselines import baseline_messages
from chakra_collectives.synth.tacos import SUPPORTED as TACOS_SUPPORTED
from chakra_collectives.topology.core import Topology

_COLLECTIVES = {
    "tacos": TACOS_SUPPORTED,
    "ring": (Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_REDUCE),
    "biring": (Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_REDUCE),
    "direct": (Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_REDUCE, Collective.ALL_TO_ALL),
    "rhd": (Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_REDUCE),
    "tree": (Collective.BROADCAST, Collective.REDUCE),
}
_PER_RANK = {"biring": 2}
"""Chunks per rank a baseline uses per requested chunk (biring: one per direction)."""


def applicable(collective: Collective, num_npus: int) -> list[str]:
    """The algorithms ``best`` tries for ``collective`` on ``num_npus`` NPUs, in tie-breaking order.

    >>> applicable(Collective.ALL_REDUCE, 8), applicable(Collective.ALL_GATHER, 6)
    (['tacos', 'ring', 'biring', 'direct', 'rhd'], ['tacos', 'ring', 'biring', 'direct'])
    """
    power_of_two = num_npus & (num_npus - 1) == 0
    return [name for name, supported in _COLLECTIVES.items() if collective in supported and (name != "rhd" or power_of_two)]


def link_load_ns(topology: Topology, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray) -> float:
    """The busiest link's total busy time for these messages (tacos mode): a lower bound on their makespan.

    Every message holds each link of its route (the network model's) for
    ``latency + bytes / bandwidth`` (:meth:`~chakra_collectives.network.NetworkModel.hop_ns`),
    and a link carries one message at a time.
    """
    model = NetworkModel(topology)
    n = topology.num_npus
    key = np.asarray(src, dtype=np.int64) * n + np.asarray(dst, dtype=np.int64)
    pairs, inverse = np.unique(key, return_inverse=True)
    messages = np.bincount(inverse, minlength=len(pairs))
    volume = np.bincount(inverse, weights=np.asarray(nbytes, dtype=np.float64), minlength=len(pairs))
    routes = [model.route(*divmod(pair, n)) for pair in pairs.tolist()]
    links = np.fromiter((link for route in routes for link in route), dtype=np.int64, count=sum(map(len, routes)))
    owner = np.repeat(np.arange(len(pairs)), [len(route) for route in routes])
    load = np.zeros(model.num_links)
    np.add.at(load, links, model.hop_ns(links, volume[owner], messages=messages[owner]))
    return float(load.max(initial=0.0))


def baseline_bound_ns(name: str, topology: Topology, collective: Collective, size_bytes: int, chunks_per_npu: int) -> float:
    """Lower bound on baseline ``name``'s predicted time (0 when none is known)."""
    if name in ("tacos", "tree"):
        return 0.0
    n = topology.num_npus
    per_rank = chunks_per_npu * _PER_RANK.get(name, 1)
    chunk_bytes = -(-size_bytes // (n * per_rank))
    src, dst, chunks = baseline_messages(name, collective, n, chunks_per_rank=chunks_per_npu)
    return link_load_ns(topology, src, dst, chunks * chunk_bytes)


@dataclass
class Candidate:
    name: str
    predicted_ns: float | None
    """``None`` when skipped: it could not beat the winner (see :attr:`at_least_ns`)."""
    at_least_ns: float
    """A lower bound on its predicted time (0: none computed)."""


def choose(
    names: list[str],
    bound: Callable[[str], float],
    produce: Callable[[str], tuple[object, float]],
) -> tuple[str, object, list[Candidate]]:
    """Run ``produce(name) -> (result, predicted_ns)`` for the candidates that can still win.

    Returns the winner's name and result and every candidate (in ``names`` order).
    """
    bounds = {name: bound(name) for name in names}
    order = sorted(names, key=lambda name: (name != "tacos", bounds[name], names.index(name)))
    best: tuple[float, int, str, object] | None = None
    found: dict[str, Candidate] = {}
    for name in order:
        if best is not None and (bounds[name], names.index(name)) > (best[0], best[1]):
            found[name] = Candidate(name, None, bounds[name])
            continue
        result, predicted = produce(name)
        found[name] = Candidate(name, predicted, bounds[name])
        if best is None or (predicted, names.index(name)) < (best[0], best[1]):
            best = (predicted, names.index(name), name, result)
    assert best is not None
    return best[2], best[3], [found[name] for name in names]


__all__ = ["Candidate", "applicable", "baseline_bound_ns", "choose", "link_load_ns"]
