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

import heapq
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from chakra_collectives.deprecation import renamed_keyword
from chakra_collectives.errors import InputError
from chakra_collectives.ir import Collective
from chakra_collectives.network.model import Mode, NetworkModel
from chakra_collectives.synth.registry import SynthesisOptions, get, synthesizers
from chakra_collectives.topology.core import Topology
from chakra_collectives.units import format_time_ns

def applicable(collective: Collective, num_npus: int, topology: Topology | None = None) -> list[str]:
    """The algorithms ``best`` tries for ``collective`` on ``num_npus`` NPUs, in tie-breaking order:
    every registered candidate that supports them (:mod:`~chakra_collectives.synth.registry`)
    and, when ``topology`` is given, fits it.

    >>> applicable(Collective.ALL_REDUCE, 8), applicable(Collective.ALL_GATHER, 6)
    (['tacos', 'ring', 'biring', 'direct', 'rhd', 'bfb', 'forestcoll'], ['tacos', 'ring', 'biring', 'direct', 'bfb', 'forestcoll'])
    """
    return [s.name for s in synthesizers() if s.candidate and s.supports(collective, num_npus) and (topology is None or s.fits(topology))]


BOUND_PAIRS = 2**16
"""Most (source, destination) pairs :func:`link_load_ns` routes (all-pairs baselines on 1,024
NPUs have a million: a spread subset keeps the bound valid at a fraction of the cost)."""


@renamed_keyword("mode", "network_model")
def link_load_ns(topology: Topology, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray, *, network_model: str = "tacos") -> float:
    """The busiest link's total busy time for these messages: a lower bound on their makespan.

    Every message holds each link of its route (the network model's) for
    ``latency + bytes / bandwidth`` in tacos mode
    (:meth:`~chakra_collectives.network.NetworkModel.hop_ns`), at least ``bytes / bandwidth - 1``
    in astra-sim mode (latency pipelined, each hop truncated to whole ns), and a link carries
    one message at a time. Beyond :data:`BOUND_PAIRS` distinct (source, destination) pairs only
    every ``j``-th pair's messages are routed (the bound stays valid, and cheap).
    """
    model = NetworkModel(topology, network_model=network_model)
    n = topology.num_npus
    key = np.asarray(src, dtype=np.int64) * n + np.asarray(dst, dtype=np.int64)
    pairs = np.unique(key)
    if len(pairs) > BOUND_PAIRS:  # a spread subset of the pairs: their messages alone load the links no more
        pairs = pairs[:: -(-len(pairs) // BOUND_PAIRS)]
        kept = np.isin(key, pairs)
        key, nbytes = key[kept], np.asarray(nbytes)[kept]
    inverse = np.searchsorted(pairs, key)
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
def baseline_bound_ns(
    name: str, topology: Topology, collective: Collective, size_bytes: int, chunks_per_npu: int, *, network_model: str = "tacos",
    group: tuple[int, ...] | None = None,
) -> float:
    """A floor under synthesizer ``name``'s predicted time, known without building it: the busiest
    link of its message list (:func:`link_load_ns`; a lower bound), else its own model's floor
    (:attr:`~chakra_collectives.synth.registry.Synthesizer.floor`: BFB's step model, over every
    NPU only), else 0; over the process ``group``'s NPUs when given (group rank ``i`` on NPU ``group[i]``)."""
    synthesizer = get(name)
    options = SynthesisOptions(size_bytes=size_bytes, chunks_per_npu=chunks_per_npu)
    if synthesizer.messages is None:
        if synthesizer.floor is None or group is not None:
            return 0.0
        return synthesizer.floor(topology, collective, options, "astra-sim" if Mode.parse(network_model) is Mode.ASTRA_SIM else "default")
    src, dst, nbytes = synthesizer.messages(collective, topology.num_npus if group is None else len(group), options)
    if group is not None:
        npus = np.asarray(group, dtype=np.int64)
        src, dst = npus[src], npus[dst]
    return link_load_ns(topology, src, dst, nbytes, network_model=network_model)


@dataclass
class Candidate:
    """One applicable producer in ``best``'s search: its best time over the ``K`` it tried, or why not."""

    name: str
    predicted_ns: float | None
    """Its fastest predicted time over the chunk counts tried; ``None`` when it was not produced:
    it could not beat the winner (see :attr:`at_least_ns`), or see :attr:`skipped`."""
    at_least_ns: float
    """A lower bound on its predicted time (0: none computed)."""
    skipped: str | None = None
    """Why it was not produced although it might have won: its memory estimate
    (``needs about 53 GiB (...)``) or ``time budget``."""
    chunks_per_npu: int | None = None
    """The ``K`` of :attr:`predicted_ns` (``None``: not produced)."""
    tried: dict[int, float] = field(default_factory=dict)
    """Predicted time at every ``K`` it was produced with."""
    stopped: str | None = None
    """Why its ``K`` search ended before the last count: ``K=4 not faster than K=2`` or the bound of
    the next ``K`` (``K=2 >= 1.2 ms``)."""

    def as_dict(self) -> dict[str, Any]:
        found: dict[str, Any] = {"predicted_ns": self.predicted_ns, "at_least_ns": self.at_least_ns}
        if self.skipped is not None:
            found["skipped"] = self.skipped
        if self.chunks_per_npu is not None:
            found["chunks_per_npu"] = self.chunks_per_npu
            found["chunks_per_npu_tried"] = {str(k): t for k, t in self.tried.items()}
        if self.stopped is not None:
            found["stopped"] = self.stopped
        return found


@dataclass
class Search:
    """What :func:`search` found: the winner (``name``, ``chunks_per_npu``) and every candidate."""

    name: str
    chunks_per_npu: int
    predicted_ns: float
    candidates: list[Candidate]
    budget_ran_out: bool = False
    """The time budget ended the search before every candidate that might have won was produced."""
    fell_back: bool = False
    """... before any was: the winner is the fallback (the cheapest candidate)."""


def search(
    names: list[str],
    counts: list[int],
    *,
    produce: Callable[[str, int], float],
    bound: Callable[[str, int], float],
    chunked: Callable[[str], bool],
    fallback: Callable[[], str] | None = None,
    deadline: float | None = None,
    exhaustive: bool = False,
    clock: Callable[[], float] = time.perf_counter,
    produce_many: Callable[[list[tuple[str, int]]], list[float]] | None = None,
    workers: int = 1,
) -> Search:
    """Find the fastest ``(producer, K)`` by predicted time, producing as few as it can.

    ``produce(name, k)`` builds and times one (its predicted ns); ``bound(name, k)`` is a lower
    bound on that time, known without building it (0: none); ``chunked(name)``: whether it reads
    ``K`` (otherwise it is produced once, at ``counts[0]``). ``names`` is the tie-breaking order.

    The most promising ``(name, K)`` goes first: the lowest estimate -- its bound at the first
    ``K``, the same producer's time at the previous ``K`` after that. One whose bound cannot
    beat the fastest found so far is skipped (its bound is reported). A producer's ``K`` search
    brackets: ``counts`` in order until one is slower than the one before (an equal time goes
    on: merged runs often keep the time flat before more chunks pay). At ``deadline``
    (``clock()``'s) nothing more is started; if nothing was produced by then, ``fallback()`` names
    the one that is (the cheapest candidate) and :attr:`Search.budget_ran_out` says so. ``exhaustive``: every
    ``(name, K)`` is produced, nothing skipped, no deadline (the oracle for the above).
    ``workers`` > 1: up to that many of the most promising pairs at a time go to
    ``produce_many(pairs) -> times`` (which may run them at once, on several cores); a pair
    with a floor never runs beside the first result it would be judged against.

    >>> times = {("a", 1): 5.0, ("a", 2): 4.0, ("a", 4): 4.5, ("b", 1): 9.0, ("b", 2): 8.0, ("b", 4): 7.0}
    >>> made = []
    >>> def produce(name, k):
    ...     made.append((name, k)); return times[name, k]
    >>> found = search(["a", "b"], [1, 2, 4, 8], produce=produce, bound=lambda n, k: 6.0 if n == "b" else 0.0, chunked=lambda n: True)
    >>> found.name, found.chunks_per_npu, made       # b's bound 6 > a's 4: never built
    ('a', 2, [('a', 1), ('a', 2), ('a', 4)])
    >>> [(c.name, c.predicted_ns, c.at_least_ns, c.stopped) for c in found.candidates]
    [('a', 4.0, 0.0, 'K=4 slower than K=2'), ('b', None, 6.0, None)]
    >>> search(["a", "b"], [1, 2, 4], produce=lambda n, k: times[n, k], bound=lambda n, k: 6.0, chunked=lambda n: True, exhaustive=True).candidates[1].tried
    {1: 9.0, 2: 8.0, 4: 7.0}
    """
    order = {name: i for i, name in enumerate(names)}
    bounds: dict[tuple[str, int], float] = {}
    found = {name: Candidate(name, None, 0.0) for name in names}
    incumbent: tuple[float, int, int, str] | None = None  # (ns, tie order, K, name)
    budget_ran_out = fell_back = False

    def bound_of(name: str, k: int) -> float:
        if (name, k) not in bounds:
            bounds[name, k] = bound(name, k)
        return bounds[name, k]

    def record(name: str, k: int, predicted: float) -> None:
        nonlocal incumbent
        candidate = found[name]
        candidate.tried[k] = predicted
        if candidate.predicted_ns is None or predicted < candidate.predicted_ns:
            candidate.predicted_ns, candidate.chunks_per_npu = predicted, k
        if incumbent is None or (predicted, order[name], k) < incumbent[:3]:
            incumbent = (predicted, order[name], k, name)

    def run(batch: list[tuple[str, int]]) -> None:
        times = [produce(*batch[0])] if len(batch) == 1 or produce_many is None else produce_many(batch)
        for (name, k), predicted in zip(batch, times):
            record(name, k, predicted)

    if exhaustive:
        for name in names:
            for k in counts if chunked(name) else counts[:1]:
                run([(name, k)])
    else:
        first = counts[0]
        pending: list[tuple[float, int, int, str]] = []  # (estimate, tie order, K, name)
        for name in names:
            found[name].at_least_ns = bound_of(name, first)
            heapq.heappush(pending, (found[name].at_least_ns, order[name], first, name))
        while pending:
            batch: list[tuple[str, int]] = []
            waiting: list[tuple[float, int, int, str]] = []
            while pending and len(batch) < max(1, workers):
                item = heapq.heappop(pending)
                _, rank, k, name = item
                candidate = found[name]
                at_least = bound_of(name, k)
                if batch and incumbent is None and at_least > 0:  # judged against a first result, not run beside it
                    waiting.append(item)
                    continue
                if incumbent is not None and (at_least, rank, k) >= incumbent[:3]:
                    if candidate.tried:
                        candidate.stopped = f"K={k} >= {format_time_ns(at_least)}"
                    continue
                if deadline is not None and clock() >= deadline:
                    budget_ran_out = True
                    if not candidate.tried:
                        candidate.skipped = "time budget"
                    else:
                        candidate.stopped = f"K={k} not tried: time budget"
                    continue
                batch.append((name, k))
            for item in waiting:
                heapq.heappush(pending, item)
            if not batch:
                continue
            run(batch)
            for name, k in batch:
                candidate = found[name]
                following = counts.index(k) + 1
                if not chunked(name) or following == len(counts):
                    continue
                before = counts[following - 2] if following >= 2 else None
                if before is not None and candidate.tried[k] > candidate.tried[before]:
                    candidate.stopped = f"K={k} slower than K={before}"
                    continue
                heapq.heappush(pending, (candidate.tried[k], order[name], counts[following], name))
        if incumbent is None and fallback is not None:
            cheapest, fell_back = fallback(), True
            found[cheapest].skipped = None
            run([(cheapest, first)])
    if incumbent is None:
        raise InputError("the time budget ran out before any candidate could be produced")
    return Search(incumbent[3], incumbent[2], incumbent[0], [found[name] for name in names], budget_ran_out, fell_back)


def cheapest_baseline(names: list[str], topology: Topology, collective: Collective, options: SynthesisOptions) -> str:
    """The candidate of ``names`` with the fewest messages (known without building it: a
    baseline; ties in ``names`` order) -- what ``best`` returns when its time budget runs out
    before anything was produced; the first of ``names`` when none has a message list.

    >>> from chakra_collectives.topology import load_topology
    >>> cheapest_baseline(["tacos", "ring", "direct", "rhd"], load_topology("ring:8"), Collective.ALL_GATHER, SynthesisOptions(size_bytes=2**20))
    'rhd'
    """
    num_ranks = topology.num_npus if options.group is None else len(options.group)
    counted = [(len(get(name).messages(collective, num_ranks, options)[0]), i, name) for i, name in enumerate(names) if get(name).messages is not None]
    return min(counted)[2] if counted else names[0]


__all__ = ["BOUND_PAIRS", "Candidate", "Search", "applicable", "baseline_bound_ns", "cheapest_baseline", "link_load_ns", "search"]
