"""Breadth-first-broadcast (BFB) schedules by linear programming (Zhao et al., NSDI'25).

**All-Gather.** At step ``t = 1 .. D`` (``D`` = the diameter) every NPU ``v`` receives the
shard of every NPU ``u`` at distance ``t`` from it, from its in-neighbours ``w`` that lie on
a shortest path (``dist(u, w) = t - 1``: they got ``u``'s shard at step ``t - 1``). How ``u``'s
shard is split among those in-neighbours is chosen by a linear program that minimizes the
step's most loaded link, in time (``load / bandwidth``)::

    minimize U  subject to   sum_w x[u, w, v] = 1                     for every u at distance t
                             sum_u x[u, w, v] <= U * b(w, v) / b_max  for every link w -> v
                             x >= 0

The constraints of different destinations ``v`` share no variable, so the step's program is
one small program per ``(v, t)``, and shards whose candidate in-neighbours are the same set
are interchangeable: one variable per (set, link) carries their total. Programs that are equal
(same sets, counts and bandwidths: every NPU of a circulant, torus or hypercube) are solved
once. Each is solved by SciPy's HiGHS (``scipy.optimize.linprog(method="highs")``); the
optimum ``U`` is then made exact: it is the rational with the smallest denominator near
HiGHS's value (the true optimum is ``(shards) / (sum of bandwidths)`` of a bottleneck set of
links, a small denominator), and integer max-flow proves a split reaching it.

Step ``t`` takes ``alpha + U_t * (M / N) / b_max`` in the paper's model (``M`` the collective's
size): latency ``D * alpha`` and bandwidth ``sum_t U_t * M / (N b_max)``.

**Chunks.** The IR moves whole chunks, ``K`` per NPU (``chunks_per_npu``). A split becomes
chunk counts by integer max-flow: link ``w -> v`` may carry ``floor(T * K * b / b_max)`` chunks
of the step, starting from ``T = U_t`` and raised to the next value that lets one more chunk
through until every shard fits (integral flows exist whenever the fractional one does). When
``U_t * K`` is a whole number for every step the chunked schedule is exactly the LP's;
``chunks_per_npu=None`` picks the smallest ``K`` that makes it so (at most :data:`MAX_AUTO_CHUNKS`),
else the ``K`` up to that limit that rounds least. :attr:`BfbSchedule.rounding_cost` is what
the rounding costs in the bandwidth term. A shard sent over several links becomes runs of
consecutive chunks; shards of consecutive NPUs over one link in one step merge into one message.

**Reduce-Scatter** is the All-Gather of the reversed network run backwards with reductions, and
**All-Reduce** is Reduce-Scatter then All-Gather, both lowered by
:mod:`~chakra_collectives.synth.lowering` (the lowering TACOS uses).

>>> from chakra_collectives.topology import load_topology
>>> from chakra_collectives.verify import verify_algorithm
>>> result = bfb(load_topology("hypercube:3"), "all-reduce", 2**20)
>>> [str(u) for u in result.all_gather.step_loads], result.all_gather.chunks_per_npu
(['1', '1', '1/3'], 3)
>>> verify_algorithm(result.algorithm).ok
True
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Callable

import numpy as np

from chakra_collectives.errors import InputError
from chakra_collectives.flow.maxflow import FlowNetwork
from chakra_collectives.ir import Collective, CollectiveAlgorithm
from chakra_collectives.synth.channels import Channels, build_channels
from chakra_collectives.synth.lowering import all_gather_algorithm, all_reduce_algorithm, reduce_scatter_algorithm
from chakra_collectives.synth.schedule import NO_ANCHOR, Schedule
from chakra_collectives.synth.registry import SynthesisOptions, Synthesized, Synthesizer, register
from chakra_collectives.topology.core import Topology
from chakra_collectives.topology.distances import hop_distances
from chakra_collectives.topology.expansions import expanded_distances
from chakra_collectives.units import bytes_per_ns, parse_size

SUPPORTED = (Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_REDUCE)
MAX_AUTO_CHUNKS = 16
"""Largest ``K`` (chunks per NPU) the automatic choice takes to make every split exact."""


# ---------------------------------------------------------------------- the problem
@dataclass(frozen=True)
class BfbProblem:
    """Direct channels of a topology and the NPUs' hop distances: what BFB's programs are built from."""

    num_npus: int
    src: np.ndarray
    """Channel ``i`` joins ``src[i] -> dst[i]`` (one channel per ordered NPU pair)."""
    dst: np.ndarray
    bandwidth: tuple[Fraction, ...]
    """GB/s of every channel, exact."""
    distance: np.ndarray
    """``distance[u, v]``: hops from ``u`` to ``v``."""

    @property
    def diameter(self) -> int:
        return int(self.distance.max())

    def reversed(self) -> "BfbProblem":
        """The same channels run the other way (the Reduce-Scatter's All-Gather)."""
        return replace(self, src=self.dst, dst=self.src, distance=self.distance.T)


def bfb_problem(topology: Topology, *, distance: np.ndarray | None = None) -> BfbProblem:
    """The BFB problem of a direct-connect ``topology``.

    ``distance`` may be given; otherwise an expansion's (:mod:`~chakra_collectives.topology.expansions`)
    is built from its base's distances, and any other topology's by BFS.

    Raises :class:`InputError` for topologies with switches or NPUs that cannot reach each other.
    """
    if topology.num_switches:
        raise InputError(f"BFB schedules direct-connect topologies; {topology.name} has {topology.num_switches} switch(es)")
    topology.validate()  # every NPU reaches every other, or a one-line error naming a pair
    channels = build_channels(topology, chunk_bytes=1)
    n = topology.num_npus
    if distance is None:
        distance = expanded_distances(topology, topology_distances)
    if distance is None:
        distance = hop_matrix(n, channels.direct_src, channels.direct_dst)
    unreachable = np.argwhere(distance < 0)
    if len(unreachable):
        u, v = unreachable[0]
        raise InputError(f"{topology.name} is not strongly connected: NPU {v} cannot be reached from NPU {u}; BFB needs every NPU to reach every other")
    bandwidth = tuple(Fraction(topology.links[int(l)].bandwidth_gbps) for l in channels.direct_link)
    return BfbProblem(n, channels.direct_src.astype(np.int64), channels.direct_dst.astype(np.int64), bandwidth, distance)


def topology_distances(topology: Topology) -> np.ndarray:
    """Hop distances between the NPUs of ``topology`` (NPU-to-NPU links only), by BFS."""
    arrays = topology.link_arrays
    n = topology.num_npus
    keep = (arrays["src"] < n) & (arrays["dst"] < n)
    return hop_matrix(n, arrays["src"][keep], arrays["dst"][keep])


def hop_matrix(n: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """``[u, v]`` hops from ``u`` to ``v`` over the links ``src -> dst`` (-1: unreachable), by BFS
    (:func:`~chakra_collectives.topology.distances.hop_distances`).

    >>> hop_matrix(3, np.array([0, 1, 2]), np.array([1, 2, 0])).tolist()
    [[0, 1, 2], [2, 0, 1], [1, 2, 0]]
    """
    hops = hop_distances(n, src, dst)
    hops[np.isinf(hops)] = -1
    return hops.astype(np.int32)


# ---------------------------------------------------------------------- one program
@dataclass(frozen=True)
class StepProgram:
    """The program of one ``(v, t)``: groups of interchangeable shards and the links into ``v``.

    ``masks[g, j]``: link ``j`` (of ``v``'s in-links) may carry group ``g``; ``counts[g]`` shards.
    """

    masks: np.ndarray
    counts: np.ndarray
    rates: tuple[Fraction, ...]
    """Bandwidth of every in-link over the largest of them (1 = the fastest)."""

    def key(self) -> tuple:
        return (self.masks.shape, self.masks.tobytes(), self.counts.tobytes(), self.rates)


@dataclass
class StepSolution:
    """A program's exact optimum ``load`` (time in shards at the fastest link's bandwidth) and how long solving took."""

    load: Fraction
    lp_s: float


SOLVED_PROGRAMS_KEPT = 2**14
"""Optima :func:`solve_program` remembers (per process): ``synth`` tries BFB once per chunk count
and ``best`` for every collective of a search, always with the same programs."""

_solved: dict[tuple, Fraction] = {}


def solve_program(program: StepProgram) -> StepSolution:
    """Minimize the most loaded link of ``program`` with HiGHS, then make the optimum exact.

    A program where no shard has a choice of link (every pair of a Kautz graph has one shortest
    path) needs no solver: its loads are fixed. A program solved before in this process is not
    solved again (its solution then took no time).

    >>> p = StepProgram(np.array([[True, True], [True, False]]), np.array([3, 1]), (Fraction(1), Fraction(1)))
    >>> solve_program(p).load
    Fraction(2, 1)
    >>> solve_program(p).lp_s
    0.0
    """
    key = program.key()
    if key in _solved:
        return StepSolution(_solved[key], 0.0)
    solution = _solve_program(program)
    if len(_solved) >= SOLVED_PROGRAMS_KEPT:
        _solved.clear()
    _solved[key] = solution.load
    return solution


def _solve_program(program: StepProgram) -> StepSolution:
    started = time.perf_counter()
    masks, counts = program.masks, program.counts
    if (masks.sum(axis=1) == 1).all():  # no shard has a choice: the loads are what they are, exactly
        per_link = (masks * counts[:, None]).sum(axis=0)
        load = max((Fraction(int(c)) / r for c, r in zip(per_link, program.rates) if c), default=Fraction(0))
        return StepSolution(load, time.perf_counter() - started)
    groups, links = np.nonzero(masks)
    num_vars = len(groups)
    rates = np.array([float(r) for r in program.rates])
    cost = np.zeros(num_vars + 1)
    cost[-1] = 1.0
    # every group's shards are all carried: sum over its links = count
    a_eq = np.zeros((len(counts), num_vars + 1))
    a_eq[groups, np.arange(num_vars)] = 1.0
    # every link's load / rate <= U
    a_ub = np.zeros((masks.shape[1], num_vars + 1))
    a_ub[links, np.arange(num_vars)] = 1.0
    a_ub[:, -1] = -rates
    from scipy.optimize import linprog  # HiGHS: imported when a BFB program is solved

    result = linprog(cost, A_ub=a_ub, b_ub=np.zeros(masks.shape[1]), A_eq=a_eq, b_eq=counts.astype(float), bounds=(0, None), method="highs")
    if result.status != 0:
        raise InputError(f"BFB's linear program has no solution ({result.message.strip()}); a shard has no link on a shortest path")
    load = _exact_optimum(program, float(result.x[-1]))
    return StepSolution(load, time.perf_counter() - started)


def _exact_optimum(program: StepProgram, approximate: float) -> Fraction:
    """The exact optimum near HiGHS's ``approximate``: a bottleneck set's shards over its bandwidth.

    That ratio's denominator divides the set's bandwidth in units of the rates' common
    denominator, so the candidates are the fractions with such denominators next to
    ``approximate``; the smallest one an integer max-flow can meet is the optimum.
    """
    scale = math.lcm(*(r.denominator for r in program.rates))
    bound = max(1, sum(int(r * scale) for r in program.rates))
    tolerance = 1e-6 * max(1.0, approximate)
    candidates = set()
    for q in range(1, bound + 1):
        for p in (math.floor(approximate * q), math.ceil(approximate * q)):
            if abs(p / q - approximate) <= tolerance:
                candidates.add(Fraction(p, q))
    for guess in sorted(candidates):
        if _split(program, guess, 1) is not None:
            return guess
    raise InputError(f"BFB: the linear program's optimum {approximate!r} is not a ratio of shards to bandwidth (rates {program.rates})")


def _split(program: StepProgram, load: Fraction, chunks: int) -> np.ndarray | None:
    """Integer chunks per (group, link) with every link under ``floor(load * chunks * rate * q)`` (``q``: ``load``'s
    denominator times the rates'), each group carrying ``count * chunks * q``; ``None`` if impossible.

    The returned flow counts units of ``1 / q`` chunk.
    """
    masks, counts = program.masks, program.counts
    q = load.denominator * math.lcm(*(r.denominator for r in program.rates))
    caps = [math.floor(load * chunks * r * q) for r in program.rates]
    flow = _max_flow(masks, counts * chunks * q, np.array(caps, dtype=np.int64))
    return None if flow is None else flow


def _max_flow(masks: np.ndarray, demand: np.ndarray, caps: np.ndarray) -> np.ndarray | None:
    """Integer flow ``[g, j]`` meeting every ``demand[g]`` over allowed ``masks`` within ``caps[j]``, or None."""
    num_groups, num_links = masks.shape
    total = int(demand.sum())
    if total == 0:
        return np.zeros(masks.shape, dtype=np.int64)
    if total >= 2**31 or caps.max(initial=0) >= 2**31:
        raise InputError("BFB: a step's chunk counts overflow 32-bit max-flow capacities; use fewer chunks per NPU")
    source, sink = num_groups + num_links, num_groups + num_links + 1
    groups, links = np.nonzero(masks)
    rows = np.concatenate([np.full(num_groups, source), groups, num_groups + np.arange(num_links)])
    cols = np.concatenate([np.arange(num_groups), num_groups + links, np.full(num_links, sink)])
    cap = np.concatenate([demand, np.full(len(groups), total), caps]).astype(np.int64)
    # scipy's Dinic every time (small_edges=0): the flows, not only their value, shape the schedule
    network = FlowNetwork(sink + 1, src=rows, dst=cols, cap=cap, flow_bound=total, small_edges=0)
    value, flows = network.edge_flows(source, sink)
    if value < total:
        return None
    out = np.zeros(masks.shape, dtype=np.int64)
    out[groups, links] = flows[num_groups : num_groups + len(groups)]  # type: ignore[index]
    return out


def chunk_split(program: StepProgram, load: Fraction, chunks: int) -> tuple[np.ndarray, Fraction]:
    """Whole chunks per (group, link) for ``chunks`` per shard, and the step time they take (in shards).

    Starts at every link carrying at most ``load * chunks * rate`` chunks and lets the link
    that reaches its next chunk soonest carry one more, until every shard fits.

    >>> p = StepProgram(np.array([[True, True]]), np.array([1]), (Fraction(1), Fraction(1)))
    >>> split, took = chunk_split(p, Fraction(1, 2), 3)      # 3 chunks over 2 links: 2 + 1
    >>> sorted(split[0].tolist()), took
    ([1, 2], Fraction(2, 3))
    """
    rates = program.rates
    caps = [math.floor(load * chunks * r) for r in rates]
    demand = program.counts.astype(np.int64) * chunks
    while True:
        flow = _max_flow(program.masks, demand, np.array(caps, dtype=np.int64))
        if flow is not None:
            used = flow.sum(axis=0)
            took = max((Fraction(int(c)) / r for c, r in zip(used, rates) if c), default=Fraction(0))
            return flow, took / chunks
        nxt = min(range(len(rates)), key=lambda j: (Fraction(caps[j] + 1) / rates[j], j))
        caps[nxt] += 1


# ---------------------------------------------------------------------- all programs
@dataclass
class BfbSolution:
    """Every ``(v, t)`` program of a problem with its exact optimum (the LP part of BFB)."""

    problem: BfbProblem
    programs: dict[tuple, StepProgram]
    solutions: dict[tuple, StepSolution]
    cells: list[tuple[int, int, tuple, np.ndarray, np.ndarray, np.ndarray]]
    """Per ``(v, t)``: ``(v, t, program key, in-channel ids, group of every shard, shard NPUs)``."""
    step_loads: list[Fraction]
    """``U_t``: the step's most loaded link, in shards at the fastest bandwidth."""
    lp_s: float
    build_s: float

    @property
    def bandwidth_shards(self) -> Fraction:
        """``sum_t U_t``: the bandwidth term in shards (``x (M/N) / b_max``)."""
        return sum(self.step_loads, Fraction(0))


def solve_bfb(problem: BfbProblem, *, on_step: Callable[[str], None] | None = None) -> BfbSolution:
    """Build and solve the program of every ``(v, t)`` (equal programs once)."""
    started = time.perf_counter()
    n = problem.num_npus
    diameter = problem.diameter
    b_max = max(problem.bandwidth)
    order = np.argsort(problem.dst, kind="stable")
    first = np.searchsorted(problem.dst[order], np.arange(n + 1))
    programs: dict[tuple, StepProgram] = {}
    solutions: dict[tuple, StepSolution] = {}
    cells = []
    step_loads = [Fraction(0)] * diameter
    lp_s = 0.0
    for v in range(n):
        into = order[first[v]:first[v + 1]]
        senders = problem.src[into]
        rates = tuple(problem.bandwidth[int(c)] / b_max for c in into)
        hops = problem.distance[:, v]
        candidate = problem.distance[:, senders] == (hops - 1)[:, None]
        for t in range(1, diameter + 1):
            shards = np.flatnonzero(hops == t)
            if len(shards) == 0:
                continue
            rows = candidate[shards]
            masks, group = np.unique(rows, axis=0, return_inverse=True)
            group = group.ravel()
            counts = np.bincount(group, minlength=len(masks))
            program = StepProgram(masks, counts, rates)
            key = program.key()
            if key not in solutions:
                if not masks.any(axis=1).all():
                    raise InputError(f"BFB: NPU {v} has no in-link on a shortest path at step {t}")
                programs[key] = program
                solutions[key] = solve_program(program)
                lp_s += solutions[key].lp_s
            step_loads[t - 1] = max(step_loads[t - 1], solutions[key].load)
            cells.append((v, t, key, into, group, shards))
        if on_step is not None and v % 256 == 255:
            on_step(f"BFB programs: {v + 1}/{n} NPUs")
    return BfbSolution(problem, programs, solutions, cells, step_loads, lp_s, time.perf_counter() - started)


def auto_chunks(step_loads: list[Fraction], rates: set[Fraction], limit: int = MAX_AUTO_CHUNKS, *, base: int = 1) -> int:
    """The smallest multiple ``K`` of ``base`` (at most ``limit x base``) making every ``U_t * K * rate`` whole;
    else the one rounding least.

    >>> auto_chunks([Fraction(1), Fraction(5, 2), Fraction(10, 3)], {Fraction(1)})
    6
    >>> auto_chunks([Fraction(1), Fraction(5, 2)], {Fraction(1)}, base=3)
    6
    >>> auto_chunks([Fraction(1, 17)], {Fraction(1)}, limit=4)     # ceil(K/17)/K is least at K = 4
    4
    """
    values = [u * r * base for u in step_loads for r in rates]
    exact = math.lcm(*(x.denominator for x in values)) if values else 1
    if exact <= limit:
        return exact * base

    def cost(k: int) -> Fraction:
        return sum((Fraction(math.ceil(u * k), k) for u in step_loads), Fraction(0))

    return min((m * base for m in range(1, limit + 1)), key=lambda k: (cost(k), k))


# ---------------------------------------------------------------------- schedule
@dataclass
class BfbSchedule:
    """A BFB All-Gather as chunked messages (:class:`~chakra_collectives.synth.schedule.Schedule`) and its figures."""

    schedule: Schedule
    solution: BfbSolution
    chunks_per_npu: int
    chunk_step_loads: list[Fraction]
    """Each step's most loaded link after rounding to chunks (in shards)."""

    @property
    def step_loads(self) -> list[Fraction]:
        return self.solution.step_loads

    @property
    def steps(self) -> int:
        return len(self.step_loads)

    @property
    def rounding_cost(self) -> Fraction:
        """Extra bandwidth term of the chunked schedule over the LP's, as a fraction of the LP's (0: exact)."""
        lp = self.solution.bandwidth_shards
        return (sum(self.chunk_step_loads, Fraction(0)) - lp) / lp if lp else Fraction(0)


def bfb_schedule(solution: BfbSolution, channels: Channels, chunks_per_npu: int | None = None, *, channel_of: np.ndarray | None = None) -> BfbSchedule:
    """Chunked messages of a solved BFB All-Gather, in the matcher's :class:`Schedule` form.

    ``channel_of[src * N + dst]`` is the channel id of every NPU pair (default: from
    ``channels``, whose direct channels must join the problem's pairs).
    """
    problem = solution.problem
    n = problem.num_npus
    b_max = max(problem.bandwidth)
    rates = {b / b_max for b in problem.bandwidth}
    k = auto_chunks(solution.step_loads, rates) if chunks_per_npu is None else int(chunks_per_npu)
    if k < 1:
        raise InputError(f"chunks per NPU must be positive, got {k}")
    splits: dict[tuple, tuple[np.ndarray, Fraction]] = {}
    chunk_loads = [Fraction(0)] * len(solution.step_loads)
    parts: list[tuple[np.ndarray, ...]] = []
    for v, t, key, into, group, shards in solution.cells:
        split_key = (key, solution.step_loads[t - 1])
        if split_key not in splits:
            splits[split_key] = chunk_split(solution.programs[key], solution.step_loads[t - 1], k)
        flow, took = splits[split_key]
        chunk_loads[t - 1] = max(chunk_loads[t - 1], took)
        parts.append(_messages(v, t, into, group, shards, flow, k, problem.src))
    columns = [np.concatenate(c) for c in zip(*parts)] if parts else [np.zeros(0, np.int64)] * 5
    step, src, dst, chunk, count = _merge_consecutive(*columns)
    if channel_of is None:
        channel_of = np.full(n * n, -1, dtype=np.int64)
        channel_of[channels.direct_src.astype(np.int64) * n + channels.direct_dst] = np.arange(channels.num_direct)
    channel = channel_of[src * n + dst]
    schedule = _schedule(n, k, step, src, dst, chunk, count, channel, channels)
    return BfbSchedule(schedule, solution, k, chunk_loads)


def _messages(v, t, into, group, shards, flow, k, senders) -> tuple[np.ndarray, ...]:
    """Runs of chunks: group ``g``'s shards (in the cell's order) laid end to end, group after
    group, cut where a link's share of its group starts and where a shard ends.

    Each group carries exactly its shards' chunks (``flow[g].sum() == k * shards in g``), so the
    groups' lines join into one line of the cell, whose pieces are found at once.
    """
    members = shards[np.argsort(group, kind="stable")]
    by_group, link = np.nonzero(flow)  # row by row: a group's links in order
    sizes = flow[by_group, link]
    starts = np.cumsum(sizes) - sizes
    bounds = np.union1d(starts, np.arange(len(members) + 1) * k)
    start, stop = bounds[:-1], bounds[1:]
    piece_link = link[np.searchsorted(starts, start, side="right") - 1]
    size = len(start)
    src = senders[into[piece_link]].astype(np.int64)
    chunk = members[start // k].astype(np.int64) * k + start % k
    return np.full(size, t, np.int64), src, np.full(size, v, np.int64), chunk, (stop - start).astype(np.int64)


def _merge_consecutive(step, src, dst, chunk, count):
    """Messages of one step over one link whose chunks follow each other become one message."""
    order = np.lexsort((chunk, src, dst, step))
    step, src, dst, chunk, count = step[order], src[order], dst[order], chunk[order], count[order]
    joins = np.zeros(len(step), dtype=bool)
    joins[1:] = (step[1:] == step[:-1]) & (src[1:] == src[:-1]) & (dst[1:] == dst[:-1]) & (chunk[1:] == chunk[:-1] + count[:-1])
    head = np.flatnonzero(~joins)
    run = np.cumsum(~joins) - 1
    total = np.bincount(run, weights=count, minlength=len(head)).astype(np.int64)
    return step[head], src[head], dst[head], chunk[head], total


def _schedule(n, k, step, src, dst, chunk, count, channel, channels: Channels) -> Schedule:
    """The matcher's Schedule: tags per channel and every NPU's program order (per step: sends, then receives)."""
    m = len(step)
    if (channel < 0).any():
        raise InputError("BFB: a message has no direct channel (internal error: the problem's links differ from the topology's)")
    # tags: a channel's messages in step order (rows are sorted by step already)
    by_channel = np.lexsort((np.arange(m), channel))
    first = np.searchsorted(channel[by_channel], channel[by_channel], side="left")
    tag = np.empty(m, dtype=np.int64)
    tag[by_channel] = np.arange(m) - first
    # program order: each NPU's sends of step t, then its receives of step t, then step t + 1
    npu = np.concatenate([src, dst])
    kind = np.concatenate([np.zeros(m, np.int64), np.ones(m, np.int64)])
    steps = np.concatenate([step, step])
    rows = np.concatenate([np.arange(m), np.arange(m)])
    order = np.lexsort((rows, kind, steps, npu))
    starts = np.searchsorted(npu[order], npu[order], side="left")
    seq = np.empty(2 * m, dtype=np.int64)
    seq[order] = np.arange(2 * m) - starts
    # nominal times: steps back to back, each as long as its busiest link
    hop = channels.hop_ns(channels.direct_link[channel], count)
    last_step = int(step.max(initial=0))
    busy = np.zeros((last_step + 1, channels.num_direct))
    np.add.at(busy, (step, channel), hop)
    step_end = np.cumsum(busy.max(axis=1))
    start = np.where(step > 0, step_end[np.maximum(step - 1, 0)], 0.0)
    def i32(values) -> np.ndarray:
        return np.asarray(values, dtype=np.int32)

    return Schedule(
        num_npus=n,
        chunks_per_npu=k,
        chunk=i32(chunk),
        count=i32(count),
        src=i32(src),
        dst=i32(dst),
        start=start,
        end=start + hop,
        channel=i32(channel),
        tag=i32(tag),
        send_seq=i32(seq[:m]),
        recv_seq=i32(seq[m:]),
        anchor=np.full(m, NO_ANCHOR, dtype=np.int32),
        anchor_is_send=np.zeros(m, dtype=bool),
        max_chunks=int(count.max(initial=1)),
        num_direct=channels.num_direct,
        num_routed=0,
    )


# ---------------------------------------------------------------------- collectives
@dataclass
class BfbResult:
    """A BFB collective: the IR algorithm and the phases it was lowered from."""

    algorithm: CollectiveAlgorithm
    phases: tuple[BfbSchedule, ...]
    """``(All-Gather,)``, ``(reversed All-Gather,)`` or ``(reversed, All-Gather)`` for All-Reduce."""
    lp_s: float
    generation_s: float
    """Building and solving every program and laying out the messages (lowering excluded)."""
    lowering_s: float

    @property
    def all_gather(self) -> BfbSchedule:
        return self.phases[-1]

    @property
    def steps(self) -> int:
        return sum(p.steps for p in self.phases)

    @property
    def bandwidth_shards(self) -> Fraction:
        """LP's bandwidth term of all phases, in shards at the fastest link's bandwidth."""
        return sum((p.solution.bandwidth_shards for p in self.phases), Fraction(0))

    @property
    def chunked_bandwidth_shards(self) -> Fraction:
        return sum((sum(p.chunk_step_loads, Fraction(0)) for p in self.phases), Fraction(0))

    def bandwidth_ns(self, size_bytes: int, *, chunked: bool = True) -> float:
        """The bandwidth term (no latency) of the schedule for ``size_bytes``: shards x (M/N) / b_max."""
        problem = self.phases[-1].solution.problem
        shards = self.chunked_bandwidth_shards if chunked else self.bandwidth_shards
        return float(shards) * size_bytes / problem.num_npus / bytes_per_ns(float(max(problem.bandwidth)))


def bfb(
    topology: Topology,
    collective: Collective | str,
    size_bytes: int | str,
    *,
    chunks_per_npu: int | None = None,
    min_chunks_per_npu: int = 1,
    distance: np.ndarray | None = None,
    on_step: Callable[[str], None] | None = None,
) -> BfbResult:
    """BFB ``collective`` of ``size_bytes`` on ``topology`` (see the module docstring).

    ``chunks_per_npu=None``: the smallest multiple of ``min_chunks_per_npu`` that keeps every
    split exact (:func:`auto_chunks`); a number: exactly that many.
    ``distance``: the NPUs' hop distances, when given solved directly from them; otherwise an
    expansion's All-Gather programs come from its bases' programs
    (:mod:`~chakra_collectives.synth.bfb_expansions`).
    """
    collective = Collective.parse(collective) if isinstance(collective, str) else collective
    if collective not in SUPPORTED:
        raise InputError(f"BFB schedules {', '.join(c.value for c in SUPPORTED)}, not {collective.value}")
    size = parse_size(size_bytes)
    if topology.num_npus < 2:
        raise InputError("a collective needs at least 2 NPUs")
    started = time.perf_counter()
    from chakra_collectives.synth.bfb_expansions import derived_solution  # it builds on this module

    problem = bfb_problem(topology, distance=distance)
    channels = build_channels(topology, chunk_bytes=1)
    derived = derived_solution(topology) if distance is None else None
    solution = derived or solve_bfb(problem, on_step=on_step)
    forward = None if collective is Collective.REDUCE_SCATTER else solution
    mirror = channels.mirror()
    reverse_solution = None
    if collective is not Collective.ALL_GATHER and mirror is None:
        reverse_solution = solve_bfb(problem.reversed(), on_step=on_step)
    k = chunks_per_npu
    if k is None:  # one K for both phases, exact for both when possible
        b_max = max(problem.bandwidth)
        loads = solution.step_loads + (reverse_solution.step_loads if reverse_solution else [])
        k = auto_chunks(loads, {b / b_max for b in problem.bandwidth}, base=min_chunks_per_npu)
    chunk_bytes = -(-size // (problem.num_npus * k))
    channels = build_channels(topology, chunk_bytes=chunk_bytes)
    ag = bfb_schedule(forward, channels, k) if forward is not None else None
    if collective is Collective.ALL_GATHER:
        phases = (ag,)
    elif reverse_solution is None:  # the reversed network is the same network with channels renamed
        base = ag if ag is not None else bfb_schedule(solution, channels, k)
        rev = replace(base, schedule=replace(base.schedule, channel=mirror[base.schedule.channel]))
        phases = (rev,) if collective is Collective.REDUCE_SCATTER else (rev, ag)
    else:
        n = problem.num_npus
        channel_of = np.full(n * n, -1, dtype=np.int64)  # reversed pairs keep their channel's id
        channel_of[channels.direct_dst.astype(np.int64) * n + channels.direct_src] = np.arange(channels.num_direct)
        rev = bfb_schedule(reverse_solution, channels.reversed(), k, channel_of=channel_of)
        phases = (rev,) if collective is Collective.REDUCE_SCATTER else (rev, ag)
    generated = time.perf_counter()
    provenance = {
        "algorithm": "bfb",
        "topology": topology.name,
        "chunks_per_npu": str(k),
        "steps": ",".join(str(p.steps) for p in phases),
        "step_loads": ";".join(",".join(str(u) for u in p.step_loads) for p in phases),
    }
    schedules = [p.schedule for p in phases]
    if collective is Collective.ALL_GATHER:
        algo = all_gather_algorithm(schedules[0], size_bytes=size, name="bfb", provenance=provenance)
    elif collective is Collective.REDUCE_SCATTER:
        algo = reduce_scatter_algorithm(schedules[0], size_bytes=size, name="bfb", provenance=provenance)
    else:
        algo = all_reduce_algorithm(schedules[0], schedules[1], size_bytes=size, name="bfb", provenance=provenance)
    lp_s = solution.lp_s + (reverse_solution.lp_s if reverse_solution else 0.0)
    return BfbResult(algo, phases, lp_s, generated - started, time.perf_counter() - generated)


def _make(topology: Topology, collective: Collective, num_ranks: int, options: SynthesisOptions) -> Synthesized:
    """The registry's factory: BFB for the whole topology, rank ``r`` on NPU ``r``; ``-k`` is the least chunks per NPU."""
    if num_ranks != topology.num_npus:
        raise InputError(f"BFB schedules the whole topology ({topology.num_npus} NPUs); this collective runs over {num_ranks} ranks")
    result = bfb(topology, collective, options.size_bytes, min_chunks_per_npu=options.chunks_per_npu)
    details = {
        "steps": result.steps,
        "bfb_chunks_per_npu": result.all_gather.chunks_per_npu,
        "step_loads": [[str(u) for u in phase.step_loads] for phase in result.phases],
        "rounding_cost": float(max(phase.rounding_cost for phase in result.phases)),
        "lp_s": result.lp_s,
    }
    return Synthesized(result.algorithm, details=details)


def step_model_ns(topology: Topology, collective: Collective, options: SynthesisOptions, network_model: str = "default") -> float:
    """BFB's time in the paper's step model, from the hop distances alone (no program solved):
    step ``t`` of the All-Gather takes at least one latency plus the time the most loaded NPU
    needs to take in the shards of the NPUs at distance ``t`` over all its in-links; the
    Reduce-Scatter is the same on the reversed network, the All-Reduce their sum (``astra-sim``
    model: latencies pipelined, bandwidth terms only). ``best`` uses it as BFB's floor: measured
    below BFB's predicted time on every suite topology (``bench/bench_best.py``).

    Each NPU's term needs only the distances to (or from) it, and NPUs of one symmetry class
    (:mod:`~chakra_collectives.topology.symmetry`: automorphisms keep distances and
    bandwidths) have the same terms, so one breadth-first search per class is enough: one on a
    torus of 16,384 NPUs instead of the 16,384 x 16,384 distance matrix (28.8 s and 3 GB).

    >>> from chakra_collectives.topology import load_topology
    >>> topo = load_topology("ring:8")   # 4 steps: 2, 2, 2, 1 shards of 8 MiB over 2 in-links of 50 GB/s
    >>> step_model_ns(topo, Collective.ALL_GATHER, SynthesisOptions(size_bytes=2**26)) == 4 * 500 + 3.5 * 2**23 / (50 * 2**30 / 1e9)
    True
    """
    n = topology.num_npus
    arrays = topology.link_arrays
    keep = (arrays["src"] < n) & (arrays["dst"] < n)
    src, dst = arrays["src"][keep], arrays["dst"][keep]
    rate = np.array([bytes_per_ns(float(b)) for b in arrays["bandwidth_gbps"][keep]])
    latency = 0.0 if network_model == "astra-sim" else float(np.min(arrays["latency_ns"][keep]))
    share = options.size_bytes / n
    reps = np.arange(n) if topology.symmetry is None else np.asarray(topology.symmetry.npu_orbits()[0], dtype=np.int64)
    total = 0.0
    phases = {Collective.ALL_GATHER: (False,), Collective.REDUCE_SCATTER: (True,), Collective.ALL_REDUCE: (False, True)}[collective]
    for reverse in phases:
        into = np.bincount(src if reverse else dst, weights=rate, minlength=n)  # an NPU's links in (out of, reversed)
        # arrivals[t, i]: NPUs whose shard reaches reps[i] in t hops (All-Gather: distances into it, searched backwards)
        arrivals = _hop_histograms(n, dst if reverse else src, src if reverse else dst, reps, towards=not reverse)
        total += float((arrivals[1:] * share / into[reps][None, :]).max(axis=1, initial=0.0).sum()) + (len(arrivals) - 1) * latency
    return total


HISTOGRAM_ENTRIES = 2**24
"""Distances :func:`_hop_histograms` holds at once (a block of sources: 128 MiB)."""


def _hop_histograms(n: int, src: np.ndarray, dst: np.ndarray, npus: np.ndarray, *, towards: bool) -> np.ndarray:
    """``[t, i]``: how many NPUs are ``t`` hops from ``npus[i]`` along ``src -> dst`` (``towards``:
    how many are ``t`` hops to it), searched a block of ``npus`` at a time.

    >>> _hop_histograms(3, np.array([0, 1, 2]), np.array([1, 2, 0]), np.array([0]), towards=True).tolist()
    [[1.0], [1.0], [1.0]]
    """
    block = max(1, HISTOGRAM_ENTRIES // n)
    columns = []
    for first in range(0, len(npus), block):
        sources = npus[first : first + block]
        hops = hop_distances(n, dst, src, sources=sources) if towards else hop_distances(n, src, dst, sources=sources)
        hops = np.where(np.isfinite(hops), hops, -1).astype(np.int64)
        steps = int(hops.max(initial=0))
        counts = np.zeros((len(sources), steps + 1))
        rows = np.repeat(np.arange(len(sources)), n)
        reached = hops.ravel() >= 0
        np.add.at(counts, (rows[reached], hops.ravel()[reached]), 1.0)
        columns.append(counts)
    depth = max(len(c[0]) for c in columns)
    return np.concatenate([np.pad(c, ((0, 0), (0, depth - c.shape[1]))) for c in columns]).T


def _direct_connect(topology: Topology) -> bool:
    return topology.num_switches == 0


register(
    Synthesizer(
        "bfb",
        _make,
        SUPPORTED,
        "breadth-first broadcast, each step's split by linear program (direct-connect topologies)",
        whole_topology=True,
        groups_refusal=(
            "its steps move data one hop between NPUs that all hold a share, on a direct-connect network; in a group "
            "the other NPUs only relay, which its per-step linear programs do not model"
        ),
        fits=_direct_connect,
        floor=step_model_ns,
    )
)


__all__ = [
    "MAX_AUTO_CHUNKS",
    "SUPPORTED",
    "BfbProblem",
    "BfbResult",
    "BfbSchedule",
    "BfbSolution",
    "StepProgram",
    "auto_chunks",
    "bfb",
    "bfb_problem",
    "bfb_schedule",
    "chunk_split",
    "hop_matrix",
    "topology_distances",
    "solve_bfb",
    "solve_program",
    "step_model_ns",
]
