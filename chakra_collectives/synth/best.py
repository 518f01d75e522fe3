"""``--algorithm best``: every applicable registered synthesizer, fastest by predicted time.

The candidates are the registry's (:func:`applicable`: TACOS, the baselines and ForestColl today). Every
candidate is timed by the network model (:func:`~chakra_collectives.network.predict_time`)
and the fastest wins (ties: the first in :func:`applicable`'s order). Building and timing a
baseline on a few hundred NPUs costs seconds, so a candidate is skipped when it provably cannot
win: its messages (known without building it, :attr:`~chakra_collectives.synth.registry.Synthesizer.messages`)
must all cross their routes, each holding every link of it for ``latency + bytes / bandwidth``,
so the busiest link's total (:func:`link_load_ns`) bounds its predicted time from below. When
that bound is no better than the fastest time found so far, the candidate is reported with the
bound instead of a prediction. Candidates are tried in order of their bounds (those without a
message list, such as TACOS, have none and go first), ties in :func:`applicable`'s order.

>>> from chakra_collectives.topology import load_topology
>>> from chakra_collectives.synth.baselines import baseline_messages
>>> topo = load_topology("ring:8")
>>> src, dst, chunks = baseline_messages("ring", Collective.ALL_GATHER, 8)
>>> from chakra_collectives.network import NetworkModel
>>> link_load_ns(topo, src, dst, chunks * 2**20) == 7 * float(NetworkModel(topo).hop_ns([0], 2**20)[0])
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from chakra_collectives.deprecation import renamed_keyword
from chakra_collectives.ir import Collective
from chakra_collectives.network.model import Mode, NetworkModel
from chakra_collectives.synth.registry import SynthesisOptions, get, synthesizers
from chakra_collectives.topology.core import Topology

def applicable(collective: Collective, num_npus: int, topology: Topology | None = None) -> list[str]:
    """The algorithms ``best`` tries for ``collective`` on ``num_npus`` NPUs, in tie-breaking order:
    every registered candidate that supports them (:mod:`~chakra_collectives.synth.registry`)
    and, when ``topology`` is given, fits it.

    >>> applicable(Collective.ALL_REDUCE, 8), applicable(Collective.ALL_GATHER, 6)
    (['tacos', 'ring', 'biring', 'direct', 'rhd', 'bfb', 'forestcoll'], ['tacos', 'ring', 'biring', 'direct', 'bfb', 'forestcoll'])
    """
    return [s.name for s in synthesizers() if s.candidate and s.supports(collective, num_npus) and (topology is None or s.fits(topology))]


@renamed_keyword("mode", "network_model")
def link_load_ns(topology: Topology, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray, *, network_model: str = "tacos") -> float:
    """The busiest link's total busy time for these messages: a lower bound on their makespan.

    Every message holds each link of its route (the network model's) for
    ``latency + bytes / bandwidth`` in tacos mode
    (:meth:`~chakra_collectives.network.NetworkModel.hop_ns`), at least ``bytes / bandwidth - 1``
    in astra-sim mode (latency pipelined, each hop truncated to whole ns), and a link carries
    one message at a time.
    """
    model = NetworkModel(topology, network_model=network_model)
    n = topology.num_npus
    key = np.asarray(src, dtype=np.int64) * n + np.asarray(dst, dtype=np.int64)
    pairs, inverse = np.unique(key, return_inverse=True)
    messages = np.bincount(inverse, minlength=len(pairs))
    volume = np.bincount(inverse, weights=np.asarray(nbytes, dtype=np.float64), minlength=len(pairs))
    routes = [model.route(*divmod(pair, n)) for pair in pairs.tolist()]
    links = np.fromiter((link for route in routes for link in route), dtype=np.int64, count=sum(map(len, routes)))
    owner = np.repeat(np.arange(len(pairs)), [len(route) for route in routes])
    load = np.zeros(model.num_links)
    if model.mode is Mode.ASTRA_SIM:
        busy = model.hop_ns(links, volume[owner], messages=0) - messages[owner]
    else:
        busy = model.hop_ns(links, volume[owner], messages=messages[owner])
    np.add.at(load, links, busy)
    return float(load.max(initial=0.0))


@renamed_keyword("mode", "network_model")
def baseline_bound_ns(name: str, topology: Topology, collective: Collective, size_bytes: int, chunks_per_npu: int, *, network_model: str = "tacos") -> float:
    """Lower bound on synthesizer ``name``'s predicted time from its message list (0 when it has none)."""
    synthesizer = get(name)
    if synthesizer.messages is None:
        return 0.0
    options = SynthesisOptions(size_bytes=size_bytes, chunks_per_npu=chunks_per_npu)
    src, dst, nbytes = synthesizer.messages(collective, topology.num_npus, options)
    return link_load_ns(topology, src, dst, nbytes, network_model=network_model)


@dataclass
class Candidate:
    name: str
    predicted_ns: float | None
    """``None`` when skipped: it could not beat the winner (see :attr:`at_least_ns`), or
    it would not fit the memory limit (see :attr:`skipped`)."""
    at_least_ns: float
    """A lower bound on its predicted time (0: none computed)."""
    skipped: str | None = None
    """Why it was not tried although it might have won: its memory estimate (``needs about 53 GiB (...)``)."""

    def as_dict(self) -> dict[str, float | str | None]:
        found: dict[str, float | str | None] = {"predicted_ns": self.predicted_ns, "at_least_ns": self.at_least_ns}
        if self.skipped is not None:
            found["skipped"] = self.skipped
        return found


def choose(
    names: list[str],
    bound: Callable[[str], float],
    produce: Callable[[str], tuple[object, float]],
) -> tuple[str, object, list[Candidate]]:
    """Run ``produce(name) -> (result, predicted_ns)`` for the candidates that can still win.

    Returns the winner's name and result and every candidate (in ``names`` order).
    """
    bounds = {name: bound(name) for name in names}
    order = sorted(names, key=lambda name: (bounds[name], names.index(name)))
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
