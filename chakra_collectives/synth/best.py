"""``--algorithm best``: every applicable registered synthesizer, fastest by predicted time.

The candidates are the registry's (:func:`applicable`: TACOS, the baselines, BFB and ForestColl
today; ``synthesize`` adds ``milp`` on small fabrics). Every
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
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np

from chakra_collectives.deprecation import renamed_keyword
from chakra_collectives.errors import InputError
from chakra_collectives.ir import Collective
from chakra_collectives.ir.grouping import distinct
from chakra_collectives.network.model import Mode, NetworkModel
from chakra_collectives.synth.registry import SynthesisOptions, get, synthesizers
from chakra_collectives.topology.core import Topology
from chakra_collectives.units import bytes_per_ns, format_time_ns

def applicable(collective: Collective, num_npus: int, topology: Topology | None = None, group: tuple[int, ...] | None = None) -> list[str]:
    """The algorithms ``best`` tries for ``collective`` on ``num_npus`` NPUs, in tie-breaking order:
    every registered candidate that supports them (:mod:`~chakra_collectives.synth.registry`)
    and, when ``topology`` is given, fits it and serves ``group`` of it (``None``: every NPU;
    the group-only producers, rails, chains and flowcast, serve process groups alone).

    >>> applicable(Collective.ALL_REDUCE, 8), applicable(Collective.ALL_GATHER, 6)
    (['tacos', 'ring', 'biring', 'direct', 'rhd', 'bfb', 'forestcoll', 'rails', 'chains', 'flowcast'], ['tacos', 'ring', 'biring', 'direct', 'bfb', 'forestcoll', 'rails', 'flowcast'])
    >>> from chakra_collectives.topology import load_topology
    >>> torus = load_topology("torus2d:4x4")
    >>> "flowcast" in applicable(Collective.ALL_GATHER, 16, torus), "flowcast" in applicable(Collective.ALL_GATHER, 4, torus, (0, 5, 10, 15))
    (False, True)
    """
    return [s.name for s in synthesizers() if s.tried_by_best(collective, num_npus, topology, group)]


BOUND_PAIRS = 2**16
"""Most (source, destination) pairs :func:`link_load_ns` routes (all-pairs baselines on 1,024
NPUs have a million: a spread subset keeps the bound valid at a fraction of the cost)."""


@renamed_keyword("mode", "network_model")
def link_load_ns(
    topology: Topology, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray, *, network_model: str = "tacos", enough: float | None = None,
) -> float:
    """The busiest link's total busy time for these messages: a lower bound on their makespan.

    Every message holds each link of its route (the network model's) for
    ``latency + bytes / bandwidth`` in tacos mode
    (:meth:`~chakra_collectives.network.NetworkModel.hop_ns`), at least ``bytes / bandwidth - 1``
    in astra-sim mode (latency pipelined, each hop truncated to whole ns), and a link carries
    one message at a time. Beyond :data:`BOUND_PAIRS` distinct (source, destination) pairs only
    every ``j``-th pair's messages are routed (the bound stays valid, and cheap). ``enough``:
    a bound this high is all the caller needs; from :data:`PROGRESSIVE_SOURCES` sources on, the
    sources are routed a spread :data:`PASSES`-th at a time and the load returned as soon as it
    reaches ``enough`` (a subset's load: still a bound, at least ``enough``).

    >>> from chakra_collectives.topology import load_topology
    >>> from chakra_collectives.synth.baselines import baseline_messages
    >>> mesh = load_topology("mesh2d:32x32")
    >>> src, dst, chunks = baseline_messages("rhd", Collective.ALL_GATHER, 1024)
    >>> full = link_load_ns(mesh, src, dst, chunks * 2**16)
    >>> full / 8 <= link_load_ns(mesh, src, dst, chunks * 2**16, enough=full / 8) <= full
    True
    """
    model = NetworkModel(topology, network_model=network_model)
    n = topology.num_npus
    key = np.asarray(src, dtype=np.int64) * n + np.asarray(dst, dtype=np.int64)
    pairs = distinct(key)
    if len(pairs) > BOUND_PAIRS:  # a spread subset of the pairs: their messages alone load the links no more
        pairs = pairs[:: -(-len(pairs) // BOUND_PAIRS)]
        kept = np.isin(key, pairs)
        key, nbytes = key[kept], np.asarray(nbytes)[kept]
    inverse = np.searchsorted(pairs, key)
    messages = np.bincount(inverse, minlength=len(pairs))
    volume = np.bincount(inverse, weights=np.asarray(nbytes, dtype=np.float64), minlength=len(pairs))
    sources, targets = np.divmod(pairs, n)
    starts = np.flatnonzero(np.diff(sources, prepend=-1)).tolist() + [len(pairs)]  # pairs are sorted: by source
    groups = list(zip(starts, starts[1:]))
    passes = PASSES if enough is not None and len(groups) >= PROGRESSIVE_SOURCES else 1
    load = np.zeros(model.num_links)
    for first in range(passes):
        chosen = groups[first::passes]
        routes = [route for a, b in chosen for route in model.routes_from(int(sources[a]), targets[a:b].tolist())]
        links = np.fromiter((link for route in routes for link in route), dtype=np.int64, count=sum(map(len, routes)))
        owner = np.repeat(np.concatenate([np.arange(a, b) for a, b in chosen]) if chosen else np.zeros(0, dtype=np.int64), [len(route) for route in routes])
        if model.mode is Mode.ASTRA_SIM:
            busy = model.hop_ns(links, volume[owner], messages=0) - messages[owner]
        else:
            busy = model.hop_ns(links, volume[owner], messages=messages[owner])
        np.add.at(load, links, busy)
        if enough is not None and load.max(initial=0.0) >= enough:
            break
    return float(load.max(initial=0.0))


PROGRESSIVE_SOURCES = 512
"""Sources from which :func:`link_load_ns` given ``enough`` routes them a part at a time (a
4,096-NPU mesh: 4,096 route searches for the recursive halving's bound, 7 s)."""

PASSES = 8
"""The parts :func:`link_load_ns` routes the sources in when it may stop early."""


def endpoint_load_ns(topology: Topology, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray, *, network_model: str = "default") -> float:
    """A cheap lower bound on these messages' makespan, without routing them: every message
    leaves its source over one of the source's links and enters its destination over one of
    the destination's, holding it at least ``latency + bytes / bandwidth`` (the fastest such
    link's; ``bytes / bandwidth - 1`` in astra-sim mode), so some link of each NPU is busy at
    least the NPU's total over its number of links. Never above :func:`link_load_ns`.

    >>> from chakra_collectives.topology import load_topology
    >>> from chakra_collectives.synth.baselines import baseline_messages
    >>> topo = load_topology("mesh2d:4x4")
    >>> src, dst, chunks = baseline_messages("direct", Collective.ALL_GATHER, 16)
    >>> 0 < endpoint_load_ns(topo, src, dst, chunks * 2**20) <= link_load_ns(topo, src, dst, chunks * 2**20)
    True
    """
    astra = Mode.parse(network_model) is Mode.ASTRA_SIM
    n = topology.num_npus
    volume = np.asarray(nbytes, dtype=np.float64)
    worst = 0.0
    for ends, side in ((np.asarray(src, dtype=np.int64), "src"), (np.asarray(dst, dtype=np.int64), "dst")):
        rate = np.zeros(n)  # the fastest link of each NPU on this side (bytes/ns), its least latency, its links
        latency = np.full(n, np.inf)
        degree = np.zeros(n)
        for link in topology.links:
            v = getattr(link, side)
            if v < n:
                rate[v] = max(rate[v], bytes_per_ns(link.bandwidth_gbps))
                latency[v] = min(latency[v], link.latency_ns)
                degree[v] += 1
        used = degree[ends] > 0
        per_message = volume[used] / rate[ends[used]] + (-1.0 if astra else latency[ends[used]])
        busy = np.bincount(ends[used], weights=np.maximum(per_message, 0.0), minlength=n)
        worst = max(worst, float((busy / np.maximum(degree, 1)).max(initial=0.0)))
    return worst


def forest_estimate_ns(topology: Topology, collective: Collective, size_bytes: int, floor_ns: float) -> float:
    """What ForestColl can hope for, known without building it: the lower bound ``floor_ns``
    plus, per tree phase, its tuning model's pipeline terms
    (:func:`~chakra_collectives.synth.forestcoll.tuning.estimate_ns`) at their most favourable --
    trees as shallow as the NPUs' hop diameter allows, one message per piece on the fastest,
    least-latency link, the best number of pieces. Not a bound: on rings, small meshes and tori
    the lowering pipelines better than the model assumes and realises less than this (26 of the
    table's 90 ForestColl cases; ring:8 All-Gather 1 MiB: 10.54 µs against an estimate of
    14.99 µs; in each, what ``best`` chose was within 1% of it); where
    ForestColl realises far less than its optimum (mesh2d:8x8 All-Gather 64 MiB: 677.5 µs against
    an estimate of 646.8 µs and a floor of 615.2 µs) it saves building it. ``best`` skips
    ForestColl when the fastest found is already no slower; ``bench/bench_best.py``'s table
    checks the choices against ``--exhaustive`` (on its suite no case ForestColl wins is skipped).
    A ForestColl that realises more of its optimum needs this estimate revisited.

    >>> from chakra_collectives.topology import load_topology
    >>> t = load_topology("mesh2d:8x8")
    >>> floor = 615_234.375
    >>> floor < forest_estimate_ns(t, Collective.ALL_GATHER, 2**26, floor) < 1.1 * floor
    True
    """
    from chakra_collectives.synth.forestcoll.tuning import ForestShape, MAX_PIECES, estimate_ns

    fastest = min(topology.links, key=lambda link: (1.0 / bytes_per_ns(link.bandwidth_gbps), link.latency_ns))
    shape = ForestShape(
        depth_hops=hop_diameter(topology), messages_per_piece=1, unit_ns_per_byte=1.0 / bytes_per_ns(fastest.bandwidth_gbps),
        latency_ns=min(link.latency_ns for link in topology.links), mean_weight=1.0, tree_edges=0,
    )
    share = size_bytes if collective.has_root else size_bytes / topology.num_npus
    pieces = [2**i for i in range(MAX_PIECES.bit_length())]
    extra = min(estimate_ns(shape, share_bytes=share, k=1, pieces=p, bandwidth_ns=0.0) for p in pieces)
    phases = 2 if collective is Collective.ALL_REDUCE else 1
    return floor_ns + phases * extra


def hop_diameter(topology: Topology) -> int:
    """Most link hops between two NPUs (breadth-first over every node, switches relaying).

    >>> from chakra_collectives.topology import load_topology
    >>> hop_diameter(load_topology("mesh2d:4x4")), hop_diameter(load_topology("ring:8"))
    (6, 4)
    """
    out: dict[int, list[int]] = {}
    for link in topology.links:
        out.setdefault(link.src, []).append(link.dst)
    n, worst = topology.num_npus, 0
    for root in range(n):
        seen, frontier, depth = {root}, [root], 0
        while frontier:
            reached = [w for v in frontier for w in out.get(v, ()) if w not in seen]
            seen.update(reached)
            frontier = list(dict.fromkeys(reached))
            depth += 1 if frontier else 0
            if any(v < n for v in frontier):
                worst = max(worst, depth)
    return worst


@renamed_keyword("mode", "network_model")
def baseline_bound_ns(
    name: str, topology: Topology, collective: Collective, size_bytes: int, chunks_per_npu: int, *, network_model: str = "tacos",
    group: tuple[int, ...] | None = None, enough: float | None = None,
) -> float:
    """A floor under synthesizer ``name``'s predicted time, known without building it: the busiest
    link of its message list (:func:`link_load_ns`; a lower bound; ``enough``: see there), else its own model's floor
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
    return link_load_ns(topology, src, dst, nbytes, network_model=network_model, enough=enough)


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
    estimated_ns: float | None = None
    """When it was not produced because an estimate of its time (not a bound, see
    :func:`search`'s ``estimate``) was no better than the winner's: that estimate."""

    def as_dict(self) -> dict[str, Any]:
        found: dict[str, Any] = {"predicted_ns": self.predicted_ns, "at_least_ns": self.at_least_ns}
        if self.skipped is not None:
            found["skipped"] = self.skipped
        if self.chunks_per_npu is not None:
            found["chunks_per_npu"] = self.chunks_per_npu
            found["chunks_per_npu_tried"] = {str(k): t for k, t in self.tried.items()}
        if self.stopped is not None:
            found["stopped"] = self.stopped
        if self.estimated_ns is not None:
            found["estimated_ns"] = self.estimated_ns
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
    produce_chains: Callable[..., list[list[float]]] | None = None,
    workers: int = 1,
    speculate: bool = False,
    refine: Callable[[str, int, float | None], float] | None = None,
    estimate: Callable[[str, int], float] | None = None,
    within: float = 0.0,
    slack: float = 0.0,
) -> Search:
    """Find the fastest ``(producer, K)`` by predicted time, producing as few as it can.

    ``produce(name, k)`` builds and times one (its predicted ns); ``bound(name, k)`` is a lower
    bound on that time, known without building it (0: none); ``chunked(name)``: whether it reads
    ``K`` (otherwise it is produced once, at ``counts[0]``). ``names`` is the tie-breaking order.

    The most promising ``(name, K)`` goes first: the lowest estimate -- its bound at the first
    ``K``, the same producer's time at the previous ``K`` after that. One whose bound cannot
    beat the fastest found so far is skipped (its bound is reported). ``refine(name, k, enough)``: a
    dearer lower bound, asked only when ``bound`` alone does not rule the pair out against the
    fastest found (``enough``: that time; it may stop once its bound reaches it). ``estimate(name, k)``: an expected time that is not a bound (ForestColl's from
    its optimum); the pair is skipped when the fastest found is already no slower, and
    :attr:`Candidate.estimated_ns` says so. A producer's ``K`` search
    brackets: ``counts`` in order until one is slower than the one before (an equal time goes
    on: merged runs often keep the time flat before more chunks pay; so does one at most ``slack``
    of the one before slower). At ``deadline``
    (``clock()``'s) nothing more is started; if nothing was produced by then, ``fallback()`` names
    the one that is (the cheapest candidate) and :attr:`Search.budget_ran_out` says so. ``exhaustive``: every
    ``(name, K)`` is produced, nothing skipped, no deadline (the oracle for the above).
    ``workers`` > 1: up to that many of the most promising pairs at a time go to
    ``produce_chains(chains, go_on, judge) -> times`` (which may run the chains at once, on
    several cores; each chain in order while ``go_on(its times so far, its next pair, the
    other chains' finished results)``: the bracketing, the next pair's bound below the chain's
    fastest, the deadline, and what the others found). Each chain goes on with its producer's following ``K`` while the incumbent
    cannot rule them out (the cores stay busy on what the search would produce next). Before
    anything is produced, a pair that the first result may rule out (by its bound, dearer
    bound or estimate) runs beside it only ``speculate``-ing: ``judge(first time)`` then says
    which of the other chains the serial search would still have run (the others are ended
    and their results dropped; when none is left, the first chain stops after its first
    result); otherwise an idle core takes the first pair's following ``K``. A result produced
    ahead counts only where the serial search would have reached it (its bracket goes on, its
    bound below the incumbent), so the winner is the serial search's. ``within`` > 0: a pair is
    also skipped when its bound is within that fraction of the fastest found (it could gain at
    most that), so the winner is at most ``1 + within`` times the exhaustive search's. A
    producer whose estimate, were it realised, would rule every other out so (at the first
    ``K``, by their bounds) goes first (:func:`_leader`): ForestColl on a 64-NPU switch, whose
    estimate is 0.2% above the cut bound, instead of TACOS's routed matchings at three ``K``.

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
    >>> near = search(["a", "b"], [1, 2, 4], produce=produce, bound=lambda n, k: 3.98, chunked=lambda n: True, within=0.01)
    >>> near.chunks_per_npu, near.candidates[0].stopped     # a's K=4 could gain at most 0.5%
    (2, 'K=4 >= 3.98 ns')
    >>> made.clear(); times["b", 1] = 4.01
    >>> led = search(["a", "b"], [1, 2, 4], produce=produce, bound=lambda n, k: 3.98, chunked=lambda n: True, within=0.01,
    ...              estimate=lambda n, k: 4.0 if n == "b" else 0.0)
    >>> led.name, made      # b's estimate would rule a out (4.0 <= 1.01 x 3.98): b first, and it did
    ('b', [('b', 1)])
    """
    order = {name: i for i, name in enumerate(names)}
    bounds: dict[tuple[str, int], float] = {}
    refined: set[tuple[str, int]] = set()
    found = {name: Candidate(name, None, 0.0) for name in names}
    incumbent: tuple[float, int, int, str] | None = None  # (ns, tie order, K, name)
    budget_ran_out = fell_back = False

    def ruled_out(at_least: float, rank: int, k: int, against: tuple[float, int, int, str]) -> bool:
        """Whether a pair of bound ``at_least`` (tie order ``rank``) cannot beat ``against``
        (or by at most ``within``)."""
        return (at_least, rank, k) >= against[:3] or within > 0 and at_least * (1 + within) >= against[0]

    def bound_of(name: str, k: int) -> float:
        if (name, k) not in bounds:
            bounds[name, k] = bound(name, k)
        if refine is not None and incumbent is not None and (name, k) not in refined and not ruled_out(bounds[name, k], order[name], k, incumbent):
            refined.add((name, k))
            bounds[name, k] = max(bounds[name, k], refine(name, k, incumbent[0]))
            if k == counts[0]:
                found[name].at_least_ns = bounds[name, k]
        return bounds[name, k]

    def record(name: str, k: int, predicted: float) -> None:
        nonlocal incumbent
        candidate = found[name]
        if predicted == math.inf:  # it could not be made at this K (the MILP's model too large)
            candidate.stopped = f"K={k} too large"
            return
        candidate.tried[k] = predicted
        if candidate.predicted_ns is None or predicted < candidate.predicted_ns:
            candidate.predicted_ns, candidate.chunks_per_npu = predicted, k
        if incumbent is None or (predicted, order[name], k) < incumbent[:3]:
            incumbent = (predicted, order[name], k, name)

    def run(batch: list[tuple[str, int]]) -> None:
        for name, k in batch:
            record(name, k, produce(name, k))

    def following(name: str, k: int) -> int | None:
        """The ``K`` after ``k`` in the search (``None``: the last, or ``name`` reads none)."""
        after = counts.index(k) + 1
        return counts[after] if chunked(name) and after < len(counts) else None

    def ahead(name: str, k: int) -> bool:
        """Whether ``(name, k)`` may be produced before its turn: no estimate of its own judges
        it, and its bound does not rule it out against the fastest found so far."""
        at_least = bound_of(name, k)
        if at_least == math.inf or incumbent is not None and ruled_out(at_least, order[name], k, incumbent):
            return False
        return estimate is None or estimate(name, k) <= at_least

    def go_on(times: list[float], pair: tuple[str, int] | None = None, elsewhere: Iterable[tuple[tuple[str, int], float]] = ()) -> bool:
        """Whether a chain produces its next ``K`` (``pair``): the last was not slower than the
        one before (the bracketing), there is time left, the next one's bound is below the
        fastest the chain found (a group's floor at more chunks: torus2d:8x8 column all-reduce,
        K = 64 >= 658.9 us after 656.7 us at K = 32, is not matched in a forked process only to
        be dropped), and the results the other chains have finished meanwhile (``elsewhere``) do
        not rule ``pair`` out (it is judged again in its turn)."""
        if len(times) >= 2 and times[-1] > times[-2] * (1 + slack) or deadline is not None and clock() >= deadline:
            return False
        if pair is None:
            return True
        if times and bound_of(*pair) >= min(times):
            return False
        against = [(t, order[name], k, name) for (name, k), t in elsewhere if t != math.inf]
        if incumbent is not None:
            against.append(incumbent)
        return not against or not ruled_out(bound_of(*pair), order[pair[0]], pair[1], min(against))

    def chained(batch: list[tuple[str, int]], aside: tuple[str, int] | None) -> list[list[tuple[str, int]]]:
        """The batch (and the speculative pair ``aside``) as chains: each pair with its
        producer's following ``K`` (several chains), else the first pair's following ``K`` on
        an idle core."""
        chains = [[pair] for pair in batch] + ([[aside]] if aside is not None else [])
        if len(chains) > 1:
            for chain in chains[: len(batch)]:
                name, k = chain[0]
                while (k := following(name, k)) is not None and ahead(name, k):  # type: ignore[assignment]
                    chain.append((name, k))
        elif workers > 1:
            name, k = batch[0]
            spare: list[tuple[str, int]] = []
            while (k := following(name, k)) is not None and ahead(name, k):  # type: ignore[assignment]
                spare.append((name, k))
            chains += [spare] if spare else []
        return chains

    def dearest(name: str, k: int) -> float:
        """Its bound with the dearer one (``refine``) asked already, or its estimate if higher."""
        if refine is not None and (name, k) not in refined:
            refined.add((name, k))
            bounds[name, k] = max(bound_of(name, k), refine(name, k, None))
            if k == counts[0]:
                found[name].at_least_ns = bounds[name, k]
        return max(bound_of(name, k), estimate(name, k) if estimate is not None else 0.0)

    def least_ruled_out(waiting: list[tuple[float, int, int, str]]) -> tuple[float, int, int, str]:
        """The waiting pair of the least :func:`dearest`, asking the dearer bounds lazily: in
        order of the cheap ones, until a cheap one is no lower than the least found."""
        def cheap(item: tuple[float, int, int, str]) -> float:
            return max(bound_of(item[3], item[2]), estimate(item[3], item[2]) if estimate is not None else 0.0)

        least: tuple[float, tuple[float, int, int, str]] | None = None
        for item in sorted(waiting, key=lambda item: (cheap(item), item[1:3])):
            if least is not None and cheap(item) >= least[0]:
                break
            value = dearest(item[3], item[2])
            if least is None or value < least[0]:
                least = (value, item)
        assert least is not None
        return least[1]

    def survives(name: str, k: int, first: tuple[float, int, int, str]) -> bool:
        """Whether the serial search would produce ``(name, k)`` judged against ``first``."""
        return not ruled_out(bound_of(name, k), order[name], k, first) and (estimate is None or estimate(name, k) < first[0])

    if exhaustive:
        for name in names:
            for k in counts if chunked(name) else counts[:1]:
                if k == counts[0] or bound(name, k) < math.inf:  # infinite: it cannot be made at this K
                    run([(name, k)])
    else:
        first = counts[0]
        pending: list[tuple[float, int, int, str]] = []  # (estimate, tie order, K, name)
        for name in names:
            found[name].at_least_ns = bound_of(name, first)
        leader = _leader(names, {name: found[name].at_least_ns for name in names}, estimate, first, within, lambda name: dearest(name, first))
        for name in names:
            heapq.heappush(pending, (-math.inf if name == leader else found[name].at_least_ns, order[name], first, name))
        while pending:
            batch: list[tuple[str, int]] = []
            waiting: list[tuple[float, int, int, str]] = []
            while pending and len(batch) < max(1, workers):
                item = heapq.heappop(pending)
                _, rank, k, name = item
                candidate = found[name]
                at_least = bound_of(name, k)
                # judged against the first result (its dearer bound, its estimate), not run beside it
                could_lose = bool(batch) and (at_least > bounds[batch[0]] or refine is not None or estimate is not None and estimate(name, k) > at_least)
                if incumbent is None and could_lose:
                    waiting.append(item)
                    continue
                if incumbent is not None and ruled_out(at_least, rank, k, incumbent):
                    if candidate.tried:
                        candidate.stopped = f"K={k} >= {format_time_ns(at_least)}" if at_least < math.inf else f"K={k} out of reach (memory or model size)"
                    continue
                expected = estimate(name, k) if estimate is not None and incumbent is not None else 0.0
                if incumbent is not None and expected >= incumbent[0]:
                    if candidate.tried:
                        candidate.stopped = f"K={k} ~ {format_time_ns(expected)} (estimate)"
                    else:
                        candidate.estimated_ns = expected
                    continue
                if deadline is not None and clock() >= deadline:
                    budget_ran_out = True
                    if not candidate.tried:
                        candidate.skipped = "time budget"
                    else:
                        candidate.stopped = f"K={k} not tried: time budget"
                    continue
                batch.append((name, k))
            aside = None
            # (nothing beside a leader: realised, its estimate leaves the others nothing worth building)
            if speculate and incumbent is None and batch and waiting and len(batch) < workers and produce_chains is not None and batch[0][0] != leader:
                if deadline is None or clock() < deadline:  # the waiting pair the first result is least likely to rule out
                    item = least_ruled_out(waiting)
                    waiting.remove(item)
                    aside = (item[3], item[2])
            for item in waiting:
                heapq.heappush(pending, item)
            if not batch:
                continue
            chains = chained(batch, aside) if produce_chains is not None else [[pair] for pair in batch]
            if produce_chains is None or len(chains) == 1 and len(chains[0]) == 1:
                results = {pair: produce(*pair) for pair in batch}
            else:
                head = chains[0][0]

                def judge(first: float) -> list[bool]:
                    against = (first, order[head[0]], head[1], head[0])
                    return [chain[0] != aside or survives(*aside, against) for chain in chains[1:]]

                times = produce_chains(chains, go_on, judge)
                results = {pair: t for chain, got in zip(chains, times) for pair, t in zip(chain, got)}
            if aside is not None:
                batch.append(aside)
            for name, k in batch:
                candidate = found[name]
                if (name, k) not in results:  # ended unfinished: judged in its turn
                    heapq.heappush(pending, (bounds[name, k], order[name], k, name))
                    continue
                record(name, k, results[name, k])
                while (after := following(name, k)) is not None and k in candidate.tried:
                    before = counts[counts.index(k) - 1] if k != counts[0] else None
                    if before is not None and candidate.tried[k] > candidate.tried[before] * (1 + slack):
                        candidate.stopped = f"K={k} slower than K={before}"
                        break
                    if (name, after) not in results:
                        heapq.heappush(pending, (candidate.tried[k], order[name], after, name))
                        break
                    if not ahead(name, after):  # produced ahead, but the serial search would not have: dropped
                        at_least = bound_of(name, after)
                        candidate.stopped = f"K={after} >= {format_time_ns(at_least)}" if at_least < math.inf else f"K={after} out of reach (memory or model size)"
                        break
                    record(name, after, results[name, after])
                    k = after
        if incumbent is None and fallback is not None:
            cheapest, fell_back = fallback(), True
            found[cheapest].skipped = None
            run([(cheapest, first)])
    if incumbent is None:
        raise InputError("the time budget ran out before any candidate could be produced")
    return Search(incumbent[3], incumbent[2], incumbent[0], [found[name] for name in names], budget_ran_out, fell_back)


def _leader(
    names: list[str], bounds: dict[str, float], estimate: Callable[[str, int], float] | None, k: int, within: float,
    dearer: Callable[[str], float] | None = None,
) -> str | None:
    """The producer :func:`search` tries first whatever the bounds: the first of ``names`` whose
    estimate at ``k`` (positive: there is one) is within ``within`` of every other producer's
    bound at ``k`` -- realised, it leaves the others nothing worth building; else ``None``.
    ``dearer(name)``: a dearer bound (or estimate) of another producer at ``k``, asked only when
    its cheap one in ``bounds`` is below the estimate (mesh2d:8x8 All-Reduce 64 MiB: BFB's
    step-model floor, 1.342 ms against the cut bound's 0.703 ms, under ForestColl's 0.766 ms).

    >>> bounds = {"tacos": 100.0, "forestcoll": 100.0}
    >>> _leader(["tacos", "forestcoll"], bounds, lambda n, k: 100.5 if n == "forestcoll" else 0.0, 1, 0.01)
    'forestcoll'
    >>> _leader(["tacos", "forestcoll"], bounds, lambda n, k: 102.0 if n == "forestcoll" else 0.0, 1, 0.01) is None
    True
    >>> _leader(["tacos", "forestcoll"], bounds, lambda n, k: 102.0 if n == "forestcoll" else 0.0, 1, 0.01, lambda n: 150.0)
    'forestcoll'
    """
    if estimate is None or within <= 0:
        return None
    for name in names:
        expected = estimate(name, k)
        if expected > 0 and all(
            expected <= bounds[other] * (1 + within) or dearer is not None and expected <= dearer(other) * (1 + within)
            for other in names if other != name
        ):
            return name
    return None


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


__all__ = ["BOUND_PAIRS", "PASSES", "PROGRESSIVE_SOURCES", "Candidate", "Search", "applicable", "baseline_bound_ns", "cheapest_baseline", "endpoint_load_ns", "forest_estimate_ns", "hop_diameter", "link_load_ns", "search"]
