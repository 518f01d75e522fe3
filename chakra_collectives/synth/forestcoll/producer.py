"""The ForestColl producer: :func:`forestcoll` runs the steps (optimum, switch splitting, tree
packing, lowering; see :mod:`~chakra_collectives.synth.forestcoll`), :func:`report` describes
the result, and the module registers ``forestcoll`` with the synthesizer registry.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field, replace
from fractions import Fraction
from functools import partial
from typing import Callable

import numpy as np

from chakra_collectives.errors import InputError
from chakra_collectives.flow import CapacityGraph
from chakra_collectives.flow.capacity import integer_array
from chakra_collectives.flow.cut_ratio import default_sinks
from chakra_collectives.ir import Collective, CollectiveAlgorithm
from chakra_collectives.network import simulate_collective
from chakra_collectives.network.bottleneck import Bottleneck, busiest_link
from chakra_collectives.processes import ForkedJob, can_fork
from chakra_collectives.synth.forestcoll.lowering import lower_forest
from chakra_collectives.synth.forestcoll.optimum import Optimum, fixed_k_optimum, optimum, same_optimum
from chakra_collectives.synth.forestcoll.packing import Forest, pack_trees
from chakra_collectives.synth.forestcoll.splitting import LogicalGraph, SplittingStuck, split_switches
from chakra_collectives.synth.forestcoll.tuning import Measured, candidate_pieces, estimate_ns, forest_shape, operations_per_piece, search_pieces
from chakra_collectives.synth.embedding import embed
from chakra_collectives.synth.registry import Synthesized, Synthesizer, register
from chakra_collectives.topology import Topology
from chakra_collectives.topology.groups import group_view
from chakra_collectives.units import bytes_per_ns, parse_size

COLLECTIVES = (Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_REDUCE, Collective.BROADCAST, Collective.REDUCE)
"""What ForestColl builds (All-to-All is not a tree collective)."""

MAX_TREES_PER_NPU = 4096
"""Refuse optima that need more trees per NPU than this (awkward bandwidths; see flow.capacity)."""


@dataclass
class Trees:
    """One direction's optimum, logical graph and forest."""

    optimum: Optimum
    logical: LogicalGraph
    forest: Forest
    reverse: bool
    balanced: tuple[int, ...] = ()
    """Switches that sent more than they received, whose outputs were scaled down to their
    inputs so that edge splitting could finish (the result is then below the cut bound)."""


@dataclass
class ForestCollResult:
    algorithm: CollectiveAlgorithm
    """The schedule; SENDs whose switch path is not the network's own carry it as a route."""
    trees: list[Trees]
    """The down trees (All-Gather, broadcast, All-Reduce's second half) and/or the up trees."""
    chunks_per_tree: int
    timings: dict[str, float] = field(default_factory=dict)
    optimal_k: int = 0
    """The optimum's trees per NPU (``k`` may be fewer when that predicted faster)."""
    optimal_U: Fraction = Fraction(0)
    predicted_ns: float | None = None
    """The network model's time, when choosing ``k`` or ``P`` predicted it."""
    bottleneck: Bottleneck | None = None
    """What limited that prediction (its busiest link), when it was made."""

    @property
    def k(self) -> int:
        return self.trees[-1].optimum.k

    @property
    def forest(self) -> Forest:
        return self.trees[-1].forest

    @property
    def optimal_ratio_gbps(self) -> Fraction:
        """The cut bound's ``U/k`` summed over phases (equal to :attr:`ratio_gbps` when optimal)."""
        return sum((t.optimum.optimal_ratio_gbps for t in self.trees), Fraction(0))

    @property
    def ratio_gbps(self) -> Fraction:
        """Sum over phases of ``U/k``: the bandwidth term per share byte, in (GB/s)⁻¹."""
        return sum((t.optimum.ratio_gbps for t in self.trees), Fraction(0))

    def bandwidth_time_ns(self, size_bytes: int | None = None) -> float:
        """The bandwidth-optimal time (no latency): ``share * U/k`` per phase."""
        size = self.algorithm.size_bytes if size_bytes is None else size_bytes
        rooted = self.algorithm.collective in (Collective.BROADCAST, Collective.REDUCE)
        share = size if rooted else size / self.algorithm.num_ranks
        return share * float(self.ratio_gbps) / bytes_per_ns(1.0)

    @property
    def algorithm_bandwidth_gbps(self) -> float:
        """ForestColl's figure of merit: ``size / bandwidth time`` (``N k / U`` for All-Gather)."""
        rooted = self.algorithm.collective in (Collective.BROADCAST, Collective.REDUCE)
        return float((1 if rooted else self.algorithm.num_ranks) / self.ratio_gbps)


def build_trees(
    topology: Topology,
    demand: list[int],
    *,
    reverse: bool,
    trees_per_npu: int | None = None,
    progress: Callable[[str], None] | None = None,
    timings: dict[str, float] | None = None,
    known: Optimum | None = None,
) -> Trees:
    """Steps 1-3 for one direction (``reverse``: the reversed network, for reducing collectives).
    ``known``: this direction's ``(U, k)`` for ``trees_per_npu``, when already computed."""
    timings = {} if timings is None else timings
    n = topology.num_npus
    started = time.perf_counter()
    graph = CapacityGraph.from_topology(topology, reverse=reverse)
    symmetry = topology.symmetry
    sinks = default_sinks(topology, demand)
    symmetric = symmetry is not None and len(sinks) < n and len(sinks) == len(symmetry.npu_orbits()[0])
    bound = None
    balanced: tuple[int, ...] = ()
    while True:
        best = _optimum(graph, demand, sinks, trees_per_npu, topology.name, None if balanced else known)
        bound = best.optimal_ratio_gbps if bound is None else bound
        timings["optimum_s"] = timings.get("optimum_s", 0.0) + time.perf_counter() - started
        started = time.perf_counter()
        capacity = {(u, v): c for u, v, c in zip(graph.src.tolist(), graph.dst.tolist(), best.capacities) if c > 0}
        supply = {v: best.k * d for v, d in enumerate(demand) if d > 0}
        if progress is not None:
            progress("split switches")
        try:
            split = lambda within: split_switches(topology, supply, capacity=capacity, sinks=sinks, symmetric=symmetric, reverse=reverse, within_servers=within)
            logical = split(True)
            # partners taken farthest first within servers too, or only across them: whichever
            # packs shallower trees (mi250:2, k = 2: 12 NPU hops deep against 10 across servers
            # only). One tree per NPU: within servers too (never deeper where measured: mi250:2
            # 9 hops against 11, a100:16 2 against 9), packed once
            alternatives = [logical] + [other for other in ([split(False)] if best.k > 1 else []) if other.paths != logical.paths]
            break
        except SplittingStuck:
            if balanced:
                raise
            graph, balanced = balance_switches(graph)
            if not balanced:
                raise
        finally:
            timings["split_s"] = timings.get("split_s", 0.0) + time.perf_counter() - started
        started = time.perf_counter()
    best = replace(best, optimal_ratio_gbps=bound)
    started = time.perf_counter()
    if progress is not None:
        progress("pack trees")
    # the shallowest forest, the first of the alternatives on a tie; packed last first: a later
    # one stops as soon as it cannot beat the forest packed (mi250:2, 2 trees per NPU: across
    # servers only, 10 hops deep, packed first stops the other one at its first 12-hop tree)
    shallowest = None
    for place, logical in reversed(list(enumerate(alternatives))):
        beat = None if shallowest is None else shallowest[0][0]
        if symmetric:
            forest = pack_trees(logical, {r: supply[r] for r in sinks if r in supply}, elements=symmetry.elements, sinks=sinks, beat=beat)
        else:
            forest = pack_trees(logical, supply, sinks=list(range(n)), beat=beat)
        if forest is not None and (shallowest is None or (forest.depths(), place) < shallowest[0]):
            shallowest = ((forest.depths(), place), logical, forest)
    _, logical, forest = shallowest
    timings["pack_s"] = timings.get("pack_s", 0.0) + time.perf_counter() - started
    return Trees(best, logical, forest, reverse, balanced)


def _optimum(graph: CapacityGraph, demand, sinks, trees_per_npu, name, known: Optimum | None = None) -> Optimum:
    if known is not None:
        best = known
    elif trees_per_npu is None:
        best = optimum(graph, demand, sinks=sinks)
    else:
        best = fixed_k_optimum(graph, demand, sinks=sinks, k=trees_per_npu)
    if best.k > MAX_TREES_PER_NPU:
        raise InputError(
            f"{name}: the optimum needs {best.k} trees per NPU (bandwidths with awkward ratios); "
            f"round the bandwidths or fix --trees-per-npu (at most {MAX_TREES_PER_NPU})"
        )
    return best


def balance_switches(graph: CapacityGraph) -> tuple[CapacityGraph, tuple[int, ...]]:
    """The graph with the outputs of every switch that sends more than it receives scaled down
    by one factor per switch, the largest factors with which no switch sends more than it
    receives (switches feeding switches make that a fixed point: found by iterating, then solved
    exactly as a linear system over the switches that stay scaled); and those switches.

    >>> from chakra_collectives.topology import Topology
    >>> t = Topology(2, num_switches=1)
    >>> t.add_link(0, 2, 50.0, 0.0); t.add_link(2, 0, 50.0, 0.0); t.add_link(2, 1, 50.0, 0.0); t.add_link(1, 0, 50.0, 0.0)
    >>> g, changed = balance_switches(CapacityGraph.from_topology(t))
    >>> changed, [g.gbps(c) for c in g.cap.tolist()]
    ((2,), [Fraction(50, 1), Fraction(50, 1), Fraction(25, 1), Fraction(25, 1)])
    """
    n, nodes = graph.num_npus, graph.num_nodes
    bandwidth = [Fraction(int(c), graph.scale) for c in graph.cap.tolist()]
    src, dst = graph.src.tolist(), graph.dst.tolist()
    out = [Fraction(0)] * nodes
    for u, b in zip(src, bandwidth):
        out[u] += b
    switches = range(n, nodes)
    factor = {w: 1.0 for w in switches}
    for _ in range(200):  # the decreasing iteration, in floats, to find which switches stay scaled
        into = {w: 0.0 for w in switches}
        for u, v, b in zip(src, dst, bandwidth):
            if v >= n:
                into[v] += float(b) * (factor[u] if u >= n else 1.0)
        factor = {w: min(1.0, into[w] / float(out[w])) if out[w] else 1.0 for w in switches}
    scaled = [w for w in switches if factor[w] < 1.0 - 1e-12]
    exact = _solve_factors(scaled, src, dst, bandwidth, out, n)
    for w in switches:  # check exactly: nobody sends more than it receives
        into = sum((b * exact.get(u, 1) for u, v, b in zip(src, dst, bandwidth) if v == w), Fraction(0))
        if out[w] * exact.get(w, 1) > into or not 0 <= exact.get(w, 1) <= 1:
            raise InputError(
                f"switch {w - n} sends more than it receives ({float(out[w]):g} vs {float(into):g} in tree units) and "
                "could not be balanced: ForestColl's trees need every switch to receive at least what it sends"
            )
    bandwidth = [b * exact.get(u, 1) for u, b in zip(src, bandwidth)]
    scale = math.lcm(*(b.denominator for b in bandwidth)) if bandwidth else 1
    caps = integer_array([int(b * scale) for b in bandwidth])
    keep = caps > 0
    balanced = CapacityGraph(nodes, n, graph.src[keep], graph.dst[keep], caps[keep], scale)
    return balanced, tuple(scaled)


def _solve_factors(scaled, src, dst, bandwidth, out, n) -> dict[int, Fraction]:
    """Exact factors of the ``scaled`` switches: ``factor_w * out_w = input into w`` (Gauss-Jordan)."""
    index = {w: i for i, w in enumerate(scaled)}
    size = len(scaled)
    rows = [[Fraction(0)] * (size + 1) for _ in range(size)]
    for w, i in index.items():
        rows[i][i] += out[w]
    for u, v, b in zip(src, dst, bandwidth):
        if v in index:
            if u in index:
                rows[index[v]][index[u]] -= b
            else:
                rows[index[v]][size] += b
    for col in range(size):
        pivot = next((r for r in range(col, size) if rows[r][col] != 0), None)
        if pivot is None:
            return {w: Fraction(0) for w in scaled}
        rows[col], rows[pivot] = rows[pivot], rows[col]
        head = rows[col][col]
        rows[col] = [x / head for x in rows[col]]
        for r in range(size):
            if r != col and rows[r][col] != 0:
                f = rows[r][col]
                rows[r] = [x - f * y for x, y in zip(rows[r], rows[col])]
    return {w: rows[index[w]][size] for w in scaled}


AUTO_FEW_TREES = (1, 2, 3)
"""Trees per NPU ``auto`` tries besides the optimum's (when fewer): the best bandwidth with
exactly that many, which may realise more of the optimum than its many trees' messages do.
From the third on, one is tried only while the one before it is the fastest so far (more trees
are paying: mi250:2, 1 GiB All-Gather, 2 beat 1 and 3 realises 0.914 of the optimal algbw
against 0.903; at 64 MiB 1 beats 2 and 3 is not built)."""

AUTO_MAX_TREES = 16
"""``auto`` builds the optimum's own trees only up to this many per NPU (above, one to three per
NPU): every tree crosses every NPU once, so ``k`` trees cost ``k`` messages per piece on every
NPU's links (mi250:2: the optimum's 83 realise 0.83 of its algbw at 1 GiB where two realise
0.89, and packing them takes 4 of its 5 seconds)."""

PREDICTION_BUDGET = 400_000
"""Operations up to which choosing ``k`` and ``P`` may predict candidates (above: the model alone)."""


def forestcoll(
    topology: Topology,
    collective: Collective | str,
    size_bytes: int | str,
    *,
    trees_per_npu: int | str | None = None,
    chunks_per_tree: int | None = None,
    root: int = 0,
    progress: Callable[[str], None] | None = None,
) -> ForestCollResult:
    """ForestColl's schedule of ``collective`` on ``topology`` as IR (see the module docstring).

    ``trees_per_npu`` fixes ``k`` (the best ``U`` for it; at most the optimum's ``k``);
    ``"optimal"`` takes the optimum's; by default (``None`` or ``"auto"``) the fewest trees
    per NPU that reach the optimum's bandwidth exactly (the optimum's ``k`` or fewer; when at
    most :data:`AUTO_MAX_TREES`) and one to three trees per NPU (:data:`AUTO_FEW_TREES`),
    whichever the network model predicts faster (many trees cost many messages).
    ``chunks_per_tree`` is ``P``, the pipeline pieces of every tree (default: chosen by
    :mod:`~chakra_collectives.synth.forestcoll.tuning`). ``root``: broadcast's and reduce's.
    """
    collective = Collective.parse(collective) if isinstance(collective, str) else collective
    if collective not in COLLECTIVES:
        raise InputError(f"ForestColl builds {', '.join(c.value for c in COLLECTIVES)}, not {collective.value} (its data does not follow trees)")
    size = parse_size(size_bytes)
    if size <= 0:
        raise InputError(f"collective size must be positive, got {size}")
    if chunks_per_tree is not None and chunks_per_tree < 1:
        raise InputError(f"chunks per tree must be positive, got {chunks_per_tree}")
    topology.validate()
    n = topology.num_npus
    if n < 2:
        raise InputError(f"{topology.name}: ForestColl needs at least two NPUs")
    if collective.has_root and not 0 <= root < n:
        raise InputError(f"root {root} is not an NPU of {topology.name} (0..{n - 1})")
    demand = [1 if (v == root or not collective.has_root) else 0 for v in range(n)]
    timings: dict[str, float] = {}
    auto = trees_per_npu is None or trees_per_npu == "auto"
    if isinstance(trees_per_npu, str) and trees_per_npu not in ("auto", "optimal"):
        raise InputError(f"trees per NPU must be a positive integer, 'optimal' or 'auto', not {trees_per_npu!r}")
    fixed = trees_per_npu if isinstance(trees_per_npu, int) else None
    started = time.perf_counter()
    sinks = default_sinks(topology, demand)
    graphs = {reverse: CapacityGraph.from_topology(topology, reverse=reverse) for reverse in _directions(collective)}
    # a fabric equal to its reverse: the reverse's (U, k) are the fabric's (computed once)
    mirrored = len(graphs) == 2 and _reversal_symmetric(topology)
    optima: dict[bool, Optimum] = {}
    for reverse, graph in graphs.items():
        optima[reverse] = same_optimum(graph, optima[not reverse]) if mirrored and optima else optimum(graph, demand, sinks=sinks)
    optimal_k, optimal_U = _optimal_k_U(optima)

    def fixed_optima(k: int | None) -> dict[bool, Optimum]:
        """Each phase's best (U, k) at ``k`` trees per NPU (``None``: the optimum's own)."""
        known: dict[bool, Optimum] = {}
        for reverse, best in optima.items():
            if k is None:
                known[reverse] = best
            elif mirrored and known:
                known[reverse] = same_optimum(graphs[reverse], known[not reverse])
            else:
                known[reverse] = fixed_k_optimum(graphs[reverse], demand, sinks=sinks, k=k, best=best)
        return known

    if auto:
        few = [k for k in AUTO_FEW_TREES if k < optimal_k and all(k <= o.k for o in optima.values())]  # fixed k: at most each phase's
        candidates = [fixed_optima(k) for k in few]
        exact = [c for c in candidates if _exact(c, optima)]
        if not exact:  # the fewest trees that reach the optimum's bandwidth exactly
            exact = _fewest_exact(optima, fixed_optima, min(optimal_k, AUTO_MAX_TREES + 1), start=max(few, default=0) + 1)
            # many trees cost many messages: above AUTO_MAX_TREES the optimum's own trees are not built
            candidates = (exact or ([optima] if optimal_k <= AUTO_MAX_TREES or not few else [])) + candidates
    else:
        candidates = [fixed_optima(fixed)]
    timings["optimum_s"] = time.perf_counter() - started
    share = size if collective.has_root else size / n

    def bandwidth_terms(known: dict[bool, Optimum]) -> list[float]:
        return [share * float(known[reverse].ratio_gbps) / bytes_per_ns(1.0) for reverse in _directions(collective)]

    def skipped(known: dict[bool, Optimum], best: _Lowered | None) -> bool:
        """Whether the search passes over ``known`` given the fastest lowering so far."""
        trees = max(o.k for o in known.values())
        if auto and trees in AUTO_FEW_TREES[2:] and (best is None or best.trees != trees - 1) and not _exact(known, optima):
            return True  # the k before it did not pay for its messages
        # one phase's bandwidth term alone is slower than a schedule already predicted: not
        # built (each phase is a whole Reduce-Scatter or All-Gather; All-Reduce's two overlap
        # on opposite links, so their sum is no bound)
        return best is not None and best.predicted_ns is not None and max(bandwidth_terms(known)) >= best.score

    def build(known: dict[bool, Optimum], incumbent: _Lowered | None, timings: dict[str, float], *, spare: bool = False) -> _Lowered | None:
        """The fastest lowering of ``known``'s trees (the first of the fastest), or ``None`` when
        none was made (a guess no faster than ``incumbent``, the fastest of the candidates before).
        ``spare``: another core is free for the piece search's likely second lowering
        (:data:`SPECULATED`), made in a forked process beside the first."""
        trees = max(o.k for o in known.values())
        bandwidth_ns = bandwidth_terms(known)
        phases = _phases(topology, collective, demand, progress, timings, known)
        k = phases[-1].optimum.k
        shapes = [forest_shape(p, topology) for p in phases]
        assigned: dict = {}  # this forest's paths, assigned by its first lowering
        mine: _Lowered | None = None
        ahead: tuple[int, ForkedJob] | None = None  # (pieces, the forked lowering of them)

        def lowered(P: int, batch: int, judge: bool, timings: dict[str, float]) -> tuple[CollectiveAlgorithm, Measured | None, Bottleneck | None]:
            """The schedule with ``P`` pieces, its predicted time and busiest link (when predicted)."""
            started = time.perf_counter()
            if progress is not None:
                progress(f"lower to IR (k={k}, P={P})")
            algorithm = _lower(topology, collective, phases, P, size, root, batch, assigned)
            timings["lower_s"] = timings.get("lower_s", 0.0) + time.perf_counter() - started
            measured = limit = None
            if (judge or len(candidates) > 1) and algorithm.num_ops <= PREDICTION_BUDGET:
                started = time.perf_counter()
                measured, limit = _measure(algorithm, topology)
                timings["choose_s"] = timings.get("choose_s", 0.0) + time.perf_counter() - started
            return algorithm, measured, limit

        def lowered_aside(P: int) -> tuple[tuple, dict[str, float]]:
            """:func:`lowered` judged, in a forked process: its result and the seconds it spent."""
            aside: dict[str, float] = {}
            return lowered(P, 1, True, aside), aside

        def attempt(P: int, *, judge: bool, batch: int = 1) -> Measured:
            """Lower with ``P`` pieces (``batch``: see :func:`lower_forest`); its predicted time
            and busiest link (only its model estimate unless ``judge``)."""
            nonlocal mine, ahead
            estimate = sum(estimate_ns(s, share_bytes=share, k=k, pieces=P, bandwidth_ns=b) for s, b in zip(shapes, bandwidth_ns))
            if incumbent is not None and not judge and estimate >= incumbent.score:
                return Measured(estimate, estimate, 0.0)
            if ahead is not None and ahead[0] == P and batch == 1 and judge:
                (algorithm, measured, limit), seconds = ahead[1].result()
                ahead = None
                for key, value in seconds.items():
                    timings[key] = timings.get(key, 0.0) + value
            else:
                algorithm, measured, limit = lowered(P, batch, judge, timings)
            score = estimate if measured is None else measured.time_ns
            if mine is None or score < mine.score:
                mine = _Lowered(score, estimate, judge, trees, phases, P, algorithm, None if measured is None else measured.time_ns, None if measured is None else limit)
            return Measured(estimate, estimate, 0.0) if measured is None else measured

        if chunks_per_tree is not None:
            attempt(chunks_per_tree, judge=False)
            return mine
        pieces = candidate_pieces(shapes, share_bytes=share, k=k, affordable=PREDICTION_BUDGET)
        if len(pieces) == 1:  # predicting is too dear: the model's guess
            attempt(pieces[0], judge=False)
            return mine
        per_piece = operations_per_piece(shapes)
        affordable = lambda P: P * per_piece <= PREDICTION_BUDGET
        if spare and affordable(SPECULATED * pieces[0]):
            ahead = (SPECULATED * pieces[0], ForkedJob(partial(lowered_aside, SPECULATED * pieces[0])))
        try:
            P = search_pieces(pieces[0], lambda P: attempt(P, judge=True), affordable)
        finally:
            if ahead is not None:  # the search went elsewhere
                ahead[1].cancel()
        if k == 1 and collective.value in ("all-gather", "broadcast", "all-reduce"):
            # several pieces per message over fast paths, slow ones cut finer (lowering._batches)
            for pieces_per_tree in (P, 2 * P):
                if pieces_per_tree > FAST_PIECES and pieces_per_tree * per_piece <= PREDICTION_BUDGET:
                    attempt(pieces_per_tree, judge=True, batch=pieces_per_tree // FAST_PIECES)
        return mine

    def built_aside(known: dict[bool, Optimum]) -> tuple[_Lowered | None, dict[str, float]]:
        """:func:`build` with no incumbent, in a forked process: its result and the seconds it spent."""
        aside: dict[str, float] = {}
        return build(known, None, aside), aside

    # the second candidate built in a forked process beside the first (PARALLEL_NPUS; the
    # search's outcome is the same: what the first rules out is ruled out when merged in order)
    forks = _may_fork(topology)
    # (not a third k, which is built only when the second won: skipped with nothing built yet)
    aside = 1 if forks and len(candidates) > 1 and not skipped(candidates[1], None) else None
    job = ForkedJob(partial(built_aside, candidates[aside])) if aside is not None else None
    best: _Lowered | None = None
    try:
        for index, known in enumerate(candidates):
            if index == aside:
                if skipped(known, best):  # ended unused (what it would raise, the search never meets)
                    job.cancel()
                    job = None
                    continue
                found, child_timings = job.result()
                job = None
                for key, seconds in child_timings.items():
                    timings[key] = timings.get(key, 0.0) + seconds
                if found is None or not found.judged and best is not None and found.estimate >= best.score:
                    continue
            elif skipped(known, best):
                continue
            else:
                found = build(known, best, timings, spare=forks and (aside is None or index > aside))
            if found is not None and (best is None or found.score < best.score):
                best = found
    finally:
        if job is not None:
            job.cancel()
    phases, P, algorithm, predicted, limit = best.phases, best.pieces, best.algorithm, best.predicted_ns, best.limit
    return ForestCollResult(
        algorithm, phases, P, timings,
        optimal_k=optimal_k, optimal_U=optimal_U, predicted_ns=predicted, bottleneck=limit,
    )


@dataclass
class _Lowered:
    """One lowering of a candidate's trees, as :func:`forestcoll`'s search keeps it."""

    score: float
    """Its predicted time, else its model estimate."""
    estimate: float
    judged: bool
    """Whether it was lowered to be predicted whatever the estimate (else only when the
    estimate beat the fastest so far)."""
    trees: int
    phases: list[Trees]
    pieces: int
    algorithm: CollectiveAlgorithm
    predicted_ns: float | None
    limit: Bottleneck | None


PARALLEL_NPUS = (16, 128)
"""NPUs from which up to which ``auto`` builds its second candidate in a forked process beside
the first, unless the search may skip it by the first's result (a third ``k``), and a candidate
built alone its likely second lowering (:data:`SPECULATED`). Below, forking costs more than a
candidate; above, the two would hold twice the memory the footprint estimate counts."""


def _may_fork(topology: Topology) -> bool:
    """Whether :func:`forestcoll` may build beside itself: the topology's NPUs are within
    :data:`PARALLEL_NPUS`, this process may fork, and the machine has cores to spare (the last
    minute's load average below the cores: on a busier machine the forked work only takes
    turns with this process, at the price of the fork and of its result's pickle)."""
    low, high = PARALLEL_NPUS
    cores = os.cpu_count() or 1
    if not (low <= topology.num_npus <= high and cores > 1):
        return False
    try:
        spare = os.getloadavg()[0] < cores
    except OSError:  # no load average on this platform
        spare = True
    return spare and can_fork()  # (which imports multiprocessing: asked last)


SPECULATED = 2
"""A candidate built alone (another core free) lowers and predicts ``SPECULATED`` times the
piece search's first count in a forked process beside the first: the jump the search most
often takes next (mesh2d:8x8 All-Reduce 2 -> 4, a100:16 All-Gather 2 -> 4, mi250:2 4 -> 8);
elsewhere the forked lowering is ended unused."""


def _exact(candidate: dict[bool, Optimum], optima: dict[bool, Optimum]) -> bool:
    """Whether ``candidate`` reaches the optimum's bandwidth in every phase."""
    return all(candidate[reverse].ratio_gbps == best.ratio_gbps for reverse, best in optima.items())


def _fewest_exact(optima: dict[bool, Optimum], fixed_optima, below: int, *, start: int) -> list[dict[bool, Optimum]]:
    """``[the optima of the least k (from start, below below) whose bandwidth is the optimum's]``
    or ``[]``: the optimum's ``k`` makes every capacity a whole number of trees, but fewer trees
    may already reach its bandwidth with whole capacities (mi250:4: 3 trees per NPU where the
    optimum's is 8)."""
    for k in range(start, below):
        if all(k <= o.k for o in optima.values()):
            candidate = fixed_optima(k)
            if _exact(candidate, optima):
                return [candidate]
    return []


def _directions(collective: Collective) -> list[bool]:
    """The phases of ``collective`` as ``reverse`` flags, up (reversed network) before down."""
    up = collective in (Collective.REDUCE_SCATTER, Collective.REDUCE, Collective.ALL_REDUCE)
    down = collective in (Collective.ALL_GATHER, Collective.BROADCAST, Collective.ALL_REDUCE)
    return [True] * up + [False] * down


def _optimal_k_U(optima: dict[bool, Optimum]) -> tuple[int, Fraction]:
    """The optimum's trees per NPU and ``U`` as the last phase counts them (both phases of
    All-Reduce in units of the least common ``k``)."""
    k = math.lcm(*(o.k for o in optima.values()))
    last = optima[False] if False in optima else optima[True]
    return k, last.U * (k // last.k)


def _phases(topology, collective, demand, progress, timings, known: dict[bool, Optimum]) -> list[Trees]:
    """The trees each phase of ``collective`` needs (up before down) for the optima ``known``
    (per ``reverse``), with one ``k`` for both."""
    directions = _directions(collective)
    if len(directions) == 2 and _reversal_symmetric(topology):
        # the reversed fabric is the fabric: its trees are the same trees, read backwards
        up = build_trees(topology, demand, reverse=True, trees_per_npu=known[True].k, progress=progress, timings=timings, known=known[True])
        return [up, replace(up, reverse=False)]
    phases = [
        build_trees(topology, demand, reverse=reverse, trees_per_npu=known[reverse].k, progress=progress, timings=timings, known=known[reverse])
        for reverse in directions
    ]
    if len(phases) == 2 and phases[0].optimum.k != phases[1].optimum.k:
        # both halves must cut the data the same way: scale both to the least common k
        k = math.lcm(*(p.optimum.k for p in phases))
        if k > MAX_TREES_PER_NPU:
            raise InputError(f"{topology.name}: All-Reduce's two halves need {k} units per NPU together; fix --trees-per-npu")
        phases = [_scaled(p, k // p.optimum.k) for p in phases]
    return phases


def _reversal_symmetric(topology: Topology) -> bool:
    """Whether every link ``u -> v`` has a link ``v -> u`` of the same bandwidth and latency
    (as many of each): then the reversed network is the network, and so are its trees.

    >>> from chakra_collectives.topology import load_topology
    >>> _reversal_symmetric(load_topology("mesh2d:4x4")), _reversal_symmetric(load_topology("ring:4,bidirectional=false"))
    (True, False)
    """
    forward = sorted((link.src, link.dst, link.bandwidth_gbps, link.latency_ns) for link in topology.links)
    backward = sorted((link.dst, link.src, link.bandwidth_gbps, link.latency_ns) for link in topology.links)
    return forward == backward


def _measure(algorithm: CollectiveAlgorithm, topology: Topology) -> tuple[Measured, Bottleneck | None]:
    """The predicted time of ``algorithm`` and its busiest link's transfer and latency time;
    its :class:`~chakra_collectives.network.bottleneck.Bottleneck` (reported, not timed again)."""
    timing = simulate_collective(algorithm, topology)
    model, links = timing.model, timing.links
    latency = links.messages * model.link_latency
    busiest = int(np.argmax(links.busy_ns))
    return Measured(timing.time_ns, float(links.busy_ns[busiest] - latency[busiest]), float(latency[busiest])), busiest_link(timing)


FAST_PIECES = 8
"""Pieces per tree that messages over the fastest paths keep when slow paths are cut finer
(measured on a100:2: 8 beat 4 and 16)."""


def _lower(topology, collective, phases, pieces, size, root, batch: int = 1, assigned: dict | None = None):
    down = next((p for p in phases if not p.reverse), None)
    up = next((p for p in phases if p.reverse), None)
    k = phases[-1].optimum.k
    provenance = {
        "synthesizer": "forestcoll",
        "trees_per_npu": str(k),
        "chunks_per_tree": str(pieces),
        **({"fast_path_batch": str(batch)} if batch > 1 else {}),
        "U": str(phases[-1].optimum.U),
    }
    return lower_forest(
        collective,
        (down or up).forest,
        (down or up).logical.paths,
        topology,
        units_per_root=k,
        pieces=pieces,
        size_bytes=size,
        root=root if collective.has_root else None,
        up_forest=up.forest if (up is not None and down is not None) else None,
        up_paths=up.logical.paths if (up is not None and down is not None) else None,
        provenance=provenance,
        fast_batch=batch,
        assigned=assigned,
    )


def _scaled(phase: Trees, factor: int) -> Trees:
    """The same trees counted in units ``factor`` times smaller (``k`` and every capacity times ``factor``)."""
    if factor == 1:
        return phase
    for tree in phase.forest.trees:
        tree.weight *= factor
    opt = phase.optimum
    scaled = Optimum(
        k=opt.k * factor, U=opt.U * factor, capacities=tuple(c * factor for c in opt.capacities),
        ratio_gbps=opt.ratio_gbps, optimal_ratio_gbps=opt.optimal_ratio_gbps,
    )
    logical = phase.logical
    logical.capacity = {key: c * factor for key, c in logical.capacity.items()}
    logical.paths = {key: [(path, a * factor) for path, a in pieces] for key, pieces in logical.paths.items()}
    return Trees(scaled, logical, phase.forest, phase.reverse, phase.balanced)




def report(result: ForestCollResult) -> dict:
    """What ``synth`` reports about a ForestColl result (JSON-ready)."""
    trees = result.trees
    depth = max(tree.depth() for phase in trees for tree in phase.forest.trees)
    rooted = result.algorithm.collective.has_root
    units = 1 if rooted else result.algorithm.num_ranks
    return {
        "trees_per_npu": result.k,
        "U": str(trees[-1].optimum.U),
        "optimal_trees_per_npu": result.optimal_k,
        "optimal_U": str(result.optimal_U),
        "trees": sum(len(p.forest.trees) for p in trees),
        "grown_trees": sum(p.forest.base_trees for p in trees),
        "max_depth": depth,
        "chunks_per_tree": result.chunks_per_tree,
        "bandwidth_ns": result.bandwidth_time_ns(),
        "optimal_bandwidth_ns": result.bandwidth_time_ns() * float(result.optimal_ratio_gbps / result.ratio_gbps),
        "algbw_gbps": float(units / result.ratio_gbps),
        "optimal_algbw_gbps": float(units / result.optimal_ratio_gbps),
        "routes": len(result.algorithm.routes),
        "balanced_switches": sorted({w - result.algorithm.num_ranks for p in trees for w in p.balanced}),
        "timings_s": {key: round(value, 6) for key, value in result.timings.items()},
    }


def _make(topology: Topology, collective: Collective, num_ranks: int, options) -> "Synthesized":
    """The registry's factory: ForestColl for the whole topology, rank ``r`` on NPU ``r``; for a
    process group (``options.group``), on the group's view of the fabric (the members its
    compute nodes, every other NPU a switch that edge splitting removes like any other), then
    embedded in the fabric (:func:`~chakra_collectives.synth.embedding.embed`)."""
    if options.group is not None:
        view = group_view(topology, options.group)
        made = _make(view.topology, collective, len(options.group), replace(options, group=None))
        # timed on the view, whose routing ties may differ: the caller times it on the fabric
        embedded = embed(made.algorithm, view, topology)
        details = {"forestcoll": {**made.details["forestcoll"], "routes": len(embedded.routes)}}
        return Synthesized(embedded, details=details)
    if num_ranks != topology.num_npus:
        raise InputError(
            f"ForestColl builds trees for the whole topology ({topology.num_npus} NPUs); this collective runs over {num_ranks} ranks"
        )
    trees, pieces = options.trees_per_npu, options.chunks_per_tree
    if options.any_size:  # rescaled to every call: a shape that does not depend on the size
        trees = "optimal" if trees in (None, "auto") else trees
        pieces = 1 if pieces is None else pieces
    result = forestcoll(topology, collective, options.size_bytes, trees_per_npu=trees, chunks_per_tree=pieces, root=options.root)
    return Synthesized(result.algorithm, predicted_ns=result.predicted_ns, bottleneck=result.bottleneck, details={"forestcoll": report(result)})


SWITCH_HANDLING = "switches removed by edge splitting; each message follows its logical edge's switch path"

BEST_LIMIT = 128
"""``best`` tries ForestColl up to this many NPUs (beyond, its flow tests take minutes on
topologies without symmetry); ``--algorithm forestcoll`` builds it for any size."""

register(
    Synthesizer(
        "forestcoll",
        _make,
        COLLECTIVES,
        "ForestColl: spanning trees that reach the cut bound's bandwidth, on any topology",
        whole_topology=True,
        groups=True,
        accepts=lambda n: n <= BEST_LIMIT,
        chunked=False,
        switch_handling=SWITCH_HANDLING,
    )
)

__all__ = ["COLLECTIVES", "ForestCollResult", "Trees", "build_trees", "forestcoll", "report"]
