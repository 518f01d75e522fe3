"""What ``chakra-coll synth`` runs: :func:`synthesize` produces a collective with one registered
producer (or ``best`` of them), predicts its time under the shared network model
(:func:`chakra_collectives.network.predict_time`) and puts it beside the lower bounds
(:func:`chakra_collectives.bounds.lower_bounds`); :class:`SynthesisResult` is what it returns.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Sequence

from chakra_collectives import progress
from chakra_collectives.bounds import MOVING
from chakra_collectives.bounds import SUPPORTED as BOUNDED
from chakra_collectives.bounds import LowerBounds, lower_bounds
from chakra_collectives.errors import InputError, LimitError
from chakra_collectives.ir import Collective, CollectiveAlgorithm
from chakra_collectives.ir.parts import AlgorithmParts
from chakra_collectives.ir.pattern import ChunkPattern
from chakra_collectives.network import simulate_collective
from chakra_collectives.network.bottleneck import Bottleneck, busiest_link
from chakra_collectives.network.model import Mode
from chakra_collectives.processes import PARALLEL_PAIRS, ForkedJob, can_fork
from chakra_collectives.resources import Estimate, fits, require
from chakra_collectives.synth.footprint import estimate
from chakra_collectives.synth.registry import DEFAULT_ALGORITHM, SynthesisOptions, Synthesized, algorithm_names, get
from chakra_collectives.topology.core import Topology
from chakra_collectives.topology.groups import check_group, group_view
from chakra_collectives.units import format_size, parse_size

if TYPE_CHECKING:  # best's search is imported when best runs: one producer asked by name needs none of it
    from chakra_collectives.synth.best import Candidate

BOUNDS = ("auto", "exact", "fast", "none")
"""How :func:`synthesize` bounds the result: ``exact`` and ``fast`` are
:func:`~chakra_collectives.bounds.lower_bounds`'s methods, ``none`` skips the bounds, ``auto``
is ``exact`` up to :data:`EXACT_BOUNDS_NPUS` NPUs and ``fast`` above."""

EXACT_BOUNDS_NPUS = 1024
"""Largest topology ``bounds="auto"`` computes exact bounds for (the exact cut bound takes one
max-flow per NPU class and round: minutes at 4,096 NPUs)."""


def bounds_method(bounds: str, num_npus: int) -> str | None:
    """The :func:`~chakra_collectives.bounds.lower_bounds` method ``bounds`` means (None: none).

    >>> bounds_method("auto", 64), bounds_method("auto", 4096), bounds_method("none", 8)
    ('exact', 'fast', None)
    """
    if bounds not in BOUNDS:
        raise InputError(f"unknown bounds {bounds!r} (valid: {', '.join(BOUNDS)})")
    if bounds == "auto":
        return "exact" if num_npus <= EXACT_BOUNDS_NPUS else "fast"
    return None if bounds == "none" else bounds


@dataclass
class SynthesisResult:
    """An algorithm with its predicted time, the bounds, and what producing it cost."""

    algorithm: CollectiveAlgorithm | AlgorithmParts
    """Whole, unless :func:`synthesize` was asked for it ``in_parts`` and the producer gave it so."""
    topology: Topology
    algorithm_name: str
    """The algorithm produced (for ``best``: the one that won)."""
    chunks_per_npu: int
    predicted_ns: float
    """Time under the network model (:attr:`network_model` mode), for ``algorithm.size_bytes``."""
    schedule_ns: float | None
    """The producer's own estimate of its time, when it plans with the network model (TACOS)."""
    bounds: LowerBounds | None
    """``None`` for collectives without bounds (all-to-all, broadcast, reduce) or when not asked for."""
    synthesis_s: float
    predict_s: float
    bounds_s: float = 0.0
    seed: int | None = None
    trials: int = 1
    requested: str = ""
    """The ``algorithm`` asked for (``best``, or the one produced)."""
    candidates: list[Candidate] = field(default_factory=list)
    """``best`` only: every applicable algorithm, its predicted time (or a bound when it could not win)."""
    phase_seeds: tuple[int, ...] = ()
    phase_latency_ratios: tuple[float, ...] = ()
    details: dict[str, Any] = field(default_factory=dict)
    """The producer's own facts (:attr:`~chakra_collectives.synth.registry.Synthesized.details`;
    ForestColl's optimum and trees under ``"forestcoll"``)."""
    chunks_tried: dict[int, float] = field(default_factory=dict)
    """When the chunks per NPU were chosen (none given): the predicted time with each ``K`` tried."""
    network_model: str = "default"
    """The network model the candidates were timed (and ``best`` chose) under: default or astra-sim."""
    bottleneck: Bottleneck | None = None
    """What limited the prediction: its busiest link in the network model's run (``None`` when
    no message crossed a link)."""
    budget_ran_out: bool = False
    """``best`` with a time budget: the budget ended the search before every candidate that
    might have won was produced (the candidates say which were not tried)."""
    budget_fallback: bool = False
    """... before any candidate was produced: the algorithm is the cheapest baseline's."""
    group: tuple[int, ...] | None = None
    """The process group synthesized for (fabric NPUs in rank order; ``None``: every NPU). The
    bounds are then the group's own: its members exchange, the rest of the fabric relays."""

    @property
    def efficiency(self) -> float | None:
        """Best bound over predicted time: how far from what *any* algorithm could do."""
        return None if self.bounds is None else self.bounds.efficiency(self.predicted_ns)

    @property
    def reduce_scatter_all_gather_efficiency(self) -> float | None:
        """All-Reduce only: the reduce-scatter + all-gather efficiency (docs/bounds.md), against the bound of reduce-scatter-then-all-gather algorithms."""
        return None if self.bounds is None else self.bounds.reduce_scatter_all_gather_efficiency(self.predicted_ns)

    @property
    def switch_handling(self) -> str:
        if not self.topology.num_switches:
            return "no switches"
        return get(self.algorithm_name).switch_handling

    def to_json(self) -> dict[str, Any]:
        algo = self.algorithm
        bounds = self.bounds
        return {
            "topology": self.topology.name,
            "num_npus": self.topology.num_npus,
            "num_switches": self.topology.num_switches,
            "num_links": len(self.topology.links),
            "num_ranks": algo.num_ranks,
            "group": None if self.group is None else list(self.group),
            "collective": algo.collective.value,
            "algorithm": self.algorithm_name,
            "requested_algorithm": self.requested or self.algorithm_name,
            "candidates": {c.name: c.as_dict() for c in self.candidates},
            "size_bytes": algo.size_bytes,
            "chunks_per_npu": self.chunks_per_npu,
            "chunk_count": algo.chunk_count,
            "chunk_bytes": algo.chunk_bytes(),
            "operations": algo.num_ops,
            "predicted_ns": self.predicted_ns,
            "network_model": self.network_model,
            "schedule_ns": self.schedule_ns,
            "bounds": None if bounds is None else {k: v for k, v in bounds.as_dict().items() if k.endswith("_ns")},
            "bounds_method": None if bounds is None else bounds.method,
            "efficiency": self.efficiency,
            "reduce_scatter_all_gather_efficiency": self.reduce_scatter_all_gather_efficiency,
            "synthesis_s": self.synthesis_s,
            "predict_s": self.predict_s,
            "bounds_s": self.bounds_s,
            "seed": self.seed,
            "trials": self.trials,
            "phase_seeds": list(self.phase_seeds),
            "phase_latency_ratios": list(self.phase_latency_ratios),
            "chunks_per_npu_tried": {str(k): t for k, t in self.chunks_tried.items()},
            "switch_handling": self.switch_handling,
            "bottleneck": None if self.bottleneck is None else self.bottleneck.as_dict(),
            "budget_ran_out": self.budget_ran_out,
            "budget_fallback": self.budget_fallback,
            **({"forestcoll": self.details["forestcoll"]} if "forestcoll" in self.details else {}),
            **({"milp": self.details["milp"]} if "milp" in self.details else {}),
            # deprecated spellings, kept for one release
            "npus": self.topology.num_npus,
            "switches": self.topology.num_switches,
            "links": len(self.topology.links),
            "chunks": algo.chunk_count,
            "deprecated": {"npus": "num_npus", "switches": "num_switches", "links": "num_links", "chunks": "chunk_count"},
        }


AUTO_CHUNKS = (1, 2, 4, 8, 16)
"""Chunks per NPU :func:`synthesize` tries, in order, when none is given."""

AUTO_CHUNKS_BUDGET = 2**14
"""... as long as ``NPUs^2 x K`` stays within this many (NPU, chunk) pairs (K = 1 always runs)."""


GROUP_AUTO_CHUNKS = (*AUTO_CHUNKS, 32, 64)
"""... for a process group: its messages cross relays store-and-forward, and a route of ``h``
hops delays a chunk ``h`` serializations, so the fastest chunks are smaller (dgx:4x8, one GPU per
server, all-gather of 64 MiB: K = 16 / 32 / 64 at 0.62 / 0.69 / 0.79 of the group's bound)."""


def auto_chunk_counts(num_npus: int, *, group: bool = False) -> list[int]:
    """The chunks per NPU :func:`synthesize` tries for ``num_npus`` NPUs (``group``: ranks of a
    process group) when none is given.

    >>> auto_chunk_counts(8), auto_chunk_counts(64), auto_chunk_counts(1024), auto_chunk_counts(8, group=True)
    ([1, 2, 4, 8, 16], [1, 2, 4], [1], [1, 2, 4, 8, 16, 32, 64])
    """
    return [k for k in (GROUP_AUTO_CHUNKS if group else AUTO_CHUNKS) if k == 1 or num_npus * num_npus * k <= AUTO_CHUNKS_BUDGET]


@dataclass
class _Produced:
    """One candidate as :func:`synthesize` made and timed it."""

    made: Synthesized
    synthesis_s: float
    predict_s: float
    predicted_ns: float
    bottleneck: Bottleneck | None
    """``None`` while the producer's own prediction stands in for the network model's run."""


def synthesize(
    topology: Topology,
    collective: Collective | str,
    size_bytes: int | str,
    *,
    chunks_per_npu: int | None = None,
    algorithm: str = DEFAULT_ALGORITHM,
    seed: int = 0,
    trials: int | None = None,
    root: int = 0,
    trees_per_npu: int | str | None = None,
    chunks_per_tree: int | None = None,
    bounds: str = "auto",
    on_step: Callable[[str], None] | None = None,
    network_model: str = "default",
    time_budget: float | None = None,
    exhaustive: bool = False,
    group: Sequence[int] | None = None,
    pattern: ChunkPattern | None = None,
    time_limit_s: float | None = None,
    in_parts: bool = False,
    written: bool = False,
    several_runs: bool = False,
) -> SynthesisResult:
    """Produce ``collective`` of ``size_bytes`` for ``topology`` with ``algorithm``; time and bound it.

    ``algorithm`` is a registered producer's name or ``"best"``, which produces every applicable
    one -- TACOS and the baselines -- (:func:`applicable`),
    predicts each under the network model and keeps the fastest (ties: the first in
    :func:`applicable`'s order); :attr:`SynthesisResult.candidates` lists them all.
    ``chunks_per_npu`` is TACOS's ``K`` and the baselines' chunks per rank (per direction for
    ``biring``; the number of pipelined pieces for ``tree``); ``None`` chooses it by predicted
    time: ``K`` = 1, 2, 4, ... (:func:`auto_chunk_counts`) until one is not faster than the
    fastest so far (:attr:`SynthesisResult.chunks_tried` lists the times; a ``K`` after the first
    is told the previous ``K``'s time,
    :attr:`~chakra_collectives.synth.registry.SynthesisOptions.to_beat_ns`, and skips what cannot
    change its result). The size is cut into
    chunks of ``ceil(size / chunks)`` bytes (the IR's padding rule), so any size works.
    ``trials=None``: TACOS's default (:func:`~chakra_collectives.synth.tacos.auto_trials`).
    ``trees_per_npu`` and ``chunks_per_tree`` are ForestColl's ``k`` (an integer, ``"optimal"``
    or ``"auto"``) and pieces per tree (default: its own choice). ``bounds``: one of
    :data:`BOUNDS` (:func:`bounds_method`). ``time_limit_s``: seconds ``milp`` may search
    (default: :data:`~chakra_collectives.synth.milp_model.DEFAULT_TIME_LIMIT_S`).
    Progress is reported through :mod:`chakra_collectives.progress`; ``on_step(name)`` (deprecated)
    is called before each phase.
    ``network_model`` is the model every candidate is timed under: ``default`` (TACOS's link
    model; ``tacos`` is its old name) or ``astra-sim`` (ASTRA-sim's congestion-aware rule: on a
    switch, messages queued at a port overlap their latencies).
    ``time_budget`` (seconds, ``best`` only) caps the search (:func:`~chakra_collectives.synth.best.search`):
    nothing starts after it and what was not tried is listed; ``exhaustive`` (``best`` only)
    produces every candidate at every ``K``, skipping nothing (the search's oracle).
    ``group`` synthesizes for a process group embedded in the topology: fabric NPUs in rank order
    (:func:`~chakra_collectives.topology.groups.check_group`); the algorithm has ``len(group)``
    ranks placed on them (``placement``), only the producers that serve groups are tried
    (:meth:`~chakra_collectives.synth.registry.Synthesizer.serves`), and the bounds are the
    group's (:func:`group_bounds`).
    ``pattern``: the pre- and postcondition of a ``pattern`` collective (``synth --pattern``).
    ``several_runs``: TACOS's All-Gather messages may carry several runs of chunk ids
    (:attr:`SynthesisOptions.several_runs`).
    ``in_parts``: the caller only writes the algorithm (if at all) and reads the summary; the
    producer (asked by name, or ``best``'s candidates produced in this process: those it forks
    come back whole) may then return it as
    :class:`~chakra_collectives.ir.parts.AlgorithmParts` (:attr:`SynthesisOptions.in_parts`);
    ``written``: the caller writes it (:attr:`SynthesisOptions.written`).
    """
    collective = Collective.parse(collective) if isinstance(collective, str) else collective
    name = algorithm.lower()
    if name not in algorithm_names():
        raise InputError(f"unknown algorithm {algorithm!r} (valid: {', '.join(algorithm_names())})")
    if time_budget is not None and not time_budget > 0:
        raise InputError(f"time budget must be positive, got {time_budget:g} s")
    started_at = time.perf_counter()
    method = bounds_method(bounds, topology.num_npus)
    network_model = Mode.parse(network_model).value
    nbytes = parse_size(size_bytes)
    members = None if group is None else check_group(group, topology.num_npus)
    if members == tuple(range(topology.num_npus)):
        members = None
    num_ranks = topology.num_npus if members is None else len(members)
    counts = [chunks_per_npu] if chunks_per_npu is not None else auto_chunk_counts(num_ranks, group=members is not None)
    if name != "best" and not get(name).chunked:
        counts = counts[:1]
    forest = {"trees_per_npu": trees_per_npu, "chunks_per_tree": chunks_per_tree, "group": members, "pattern": pattern, "time_limit_s": time_limit_s,
              "in_parts": in_parts, "written": written, "several_runs": several_runs}
    SynthesisOptions(size_bytes=nbytes, chunks_per_npu=counts[0], seed=seed, trials=trials, root=root, **forest)  # validates
    topology.validate()
    tried: dict[int, float] = {}
    found: SynthesisResult | None = None
    spent_s = [0.0, 0.0]
    with progress.task("synthesize"):
        bounded = collective in BOUNDED + MOVING
        known: LowerBounds | None = None
        if name == "best":
            deadline = None if time_budget is None else started_at + time_budget
            floor_ns = phases_ns = 0.0
            options = SynthesisOptions(size_bytes=nbytes, chunks_per_npu=counts[0], seed=seed, trials=trials, root=root, **forest)
            prefetched = _prefetch(topology, collective, counts, options, network_model, on_step) if bounded and not exhaustive and pattern is None else None
            try:
                if bounded and network_model == "default" and pattern is None:  # the floor under every candidate, reported after
                    with progress.task("lower bounds"):
                        started = time.perf_counter()
                        floor_method = method or bounds_method("auto", num_ranks)
                        known = group_bounds(topology, collective, nbytes, members, method=floor_method, root=root, pattern=pattern)
                        floor_ns, bounds_s = known.best_ns, time.perf_counter() - started
                        phases_ns = known.reduce_scatter_all_gather_ns or 0.0
                        known = known if method == floor_method else None
                found = _synthesize_best(topology, collective, counts, options, on_step, network_model, deadline, exhaustive, floor_ns, prefetched, phases_ns)
            finally:
                if prefetched is not None:
                    prefetched.drop()
            tried = found.chunks_tried
        else:
            for k in counts:
                if found is not None and _group_floor_ns(topology, collective, SynthesisOptions(size_bytes=nbytes, chunks_per_npu=k, root=root, **forest), name, network_model) >= found.predicted_ns:
                    break  # more chunks cannot pay: their latencies alone take longer
                label = f"K={k}" if chunks_per_npu is None else ""
                previous_ns = tried[counts[counts.index(k) - 1]] if k != counts[0] else math.inf
                # this K is kept only below the fastest so far, and the search goes on only below previous_ns (with its slack):
                # work that cannot end below the larger of the two (previous_ns) changes neither
                to_beat = previous_ns * (1 + _bracket_slack(collective, members)) if k != counts[0] and network_model == "default" else None
                attempt = _synthesize_with(topology, collective, nbytes, k, name, seed, trials, root, on_step, label, network_model, forest, to_beat)
                tried[k] = attempt.predicted_ns
                spent_s = [spent_s[0] + attempt.synthesis_s, spent_s[1] + attempt.predict_s]
                if found is None or attempt.predicted_ns < found.predicted_ns:
                    found = attempt
                if attempt.predicted_ns >= previous_ns * (1 + _bracket_slack(collective, members)):
                    break
            assert found is not None
            found.synthesis_s, found.predict_s = spent_s
        if on_step:
            on_step("bounds")
        if known is not None:
            found.bounds, found.bounds_s = known, bounds_s
        else:
            with progress.task("lower bounds"):
                started = time.perf_counter()
                found.bounds = group_bounds(topology, collective, nbytes, members, method=method, root=root, pattern=pattern) if method and bounded else None
                found.bounds_s = time.perf_counter() - started
    found.chunks_tried = tried if chunks_per_npu is None else {}
    found.group = members
    return found


def group_bounds(
    topology: Topology, collective: Collective, size_bytes: int, group: tuple[int, ...] | None, *, method: str = "exact",
    root: int = 0, pattern: ChunkPattern | None = None,
) -> LowerBounds:
    """:func:`~chakra_collectives.bounds.lower_bounds` of ``collective`` over the process ``group``
    (``None``: every NPU): the fabric's links, the group's members the only sources and sinks,
    every other NPU and switch a relay (:func:`~chakra_collectives.topology.groups.group_view`).
    All-Reduce's bounds count reductions at members only (relays forward).

    A torus column has its ring's links and, through the relays, the other three links of every
    member: half the ring's All-Gather bound.

    >>> from chakra_collectives.topology import load_topology
    >>> column = group_bounds(load_topology("torus2d:4x4"), Collective.ALL_GATHER, 2**20, (0, 4, 8, 12))
    >>> alone = lower_bounds(load_topology("ring:4"), Collective.ALL_GATHER, 2**20)
    >>> alone.best_ns / column.best_ns, column.cut_nodes[:3]   # cut set in fabric node ids
    (2.0, (1, 2, 3))
    """
    if group is None:
        return lower_bounds(topology, collective, size_bytes, method=method, root=root, pattern=pattern)
    view = group_view(topology, group)
    found = lower_bounds(view.topology, collective, size_bytes, method=method, root=root, pattern=pattern)
    return replace(found, cut_nodes=tuple(sorted(int(view.fabric_node[v]) for v in found.cut_nodes)))


def _produce(topology: Topology, collective: Collective, options: SynthesisOptions, candidate: str, network_model: str, step: Callable[[str], None], among: bool) -> _Produced:
    """Build ``candidate`` and time it under ``network_model`` (``among``: one of ``best``'s candidates)."""
    step(f"synthesize ({candidate})" if among else "synthesize")
    with progress.task(candidate):
        started = time.perf_counter()
        made = get(candidate).build(topology, collective, options)
        synthesis_s = time.perf_counter() - started
        step("predict")
        started = time.perf_counter()
        with progress.task("predict"):
            # a producer that timed itself did so under the default model
            own = made.predicted_ns if network_model == "default" else None
            if own is not None:
                predicted, limit = own, made.bottleneck
            else:
                timing = simulate_collective(made.algorithm, topology, network_model=network_model)
                predicted, limit = timing.time_ns, busiest_link(timing)
                del timing
    return _Produced(made, synthesis_s, time.perf_counter() - started, predicted, limit)


PARALLEL_NPUS = 16
"""Topologies from which ``best`` runs its most promising candidates at once, one per core
(below, forking costs more than the candidates)."""


def _workers(topology: Topology) -> int:
    """How many candidates ``best`` runs at once: the cores, when this process may fork and the
    topology is large enough to pay for it; else one."""
    if topology.num_npus < PARALLEL_NPUS or not can_fork():
        return 1
    return os.cpu_count() or 1


def _speculates(topology: Topology, counts: list[int]) -> bool:
    """Whether ``best`` may run a candidate beside the first before knowing whether the first
    rules it out: while the first (TACOS) runs on one core
    (:data:`~chakra_collectives.processes.PARALLEL_PAIRS`; beyond, its trials use every core)."""
    return topology.num_npus * topology.num_npus * counts[0] < PARALLEL_PAIRS


BEST_MILP_NPUS = 16
"""Largest fabric on which ``best`` also tries the exact MILP (``milp``; its model grows with
NPUs^2 x chunks x epochs: a few thousand variables here, solved in about a second)."""

BEST_MILP_CHUNKS = (1, 2)
"""The chunk counts ``best`` tries ``milp`` at."""

BEST_MILP_LIMIT_S = 5.0
"""Seconds ``best`` gives the MILP at each chunk count (it keeps the best schedule found by then)."""

BEST_MILP_VARIABLES = 8_000
"""Largest model (variables at its shortest horizon, :func:`~chakra_collectives.synth.milp.model_variables`)
``best`` solves: hetero-mesh2d:3x3 at K=2 (4,932) and torus2d:4x4 at K=1 (3,136) are in, switch:16
(51,632 at K=1) is not."""

BEST_WITHIN = 0.01
"""``best`` skips a candidate whose lower bound is within this fraction of the fastest found: it
could gain at most 1% (a 64-NPU switch's All-Reduce of 1 GiB: ForestColl's 39.66 ms against the
cut bound's 39.38 ms leaves TACOS nothing worth its routed matchings). ``--exhaustive`` skips
nothing."""

BEST_MILP_GAP = 0.03
"""``best`` solves the MILP only when the fastest candidate found is more than this fraction above
the lower bound (the MILP can gain at most that)."""


PREFETCHED = "forestcoll"
"""The candidate ``best`` starts in a forked process before its lower bounds
(:func:`_prefetch`): the dearest one the search runs beside TACOS's first ``K`` (mesh2d:8x8
All-Reduce 64 MiB: ForestColl, the winner, about 1.1 s of CPU and the longest candidate; the
bounds, about 0.25 s with networkx's import, then run beside it instead of before it)."""


PREFETCH_COLLECTIVES = (Collective.ALL_REDUCE,)
"""Collectives whose ``best`` prefetches: All-Reduce's lower bounds, which the prefetched
candidate then runs beside, cost about 0.04 s on mesh2d:8x8 (the weakest NPU cut: a pure-Python
Stoer-Wagner; 0.25 s with networkx's before); All-Gather's about 0.03 s, where starting early mostly lengthens a speculative run that
TACOS's first result ends (at load 16, +0.1 s of CPU for the whole command)."""


class _Prefetched:
    """``best``'s :data:`PREFETCHED` candidate at the first ``K``, started in a forked process
    before the search knows whether it wants it (:func:`_prefetch`). The search's first
    production takes it (:meth:`take`) when that production includes this pair, else it is ended
    then: what the search produces and chooses is the same either way, only started earlier."""

    def __init__(self, pair: tuple[str, int], job: ForkedJob) -> None:
        self.pair = pair
        self._job: ForkedJob | None = job

    def take(self) -> ForkedJob | None:
        """The job, handed over (``None`` when it was already)."""
        job, self._job = self._job, None
        return job

    def drop(self) -> None:
        """End it if nobody took it."""
        if self._job is not None:
            self._job.cancel()
            self._job = None


def _prefetch(
    topology: Topology, collective: Collective, counts: list[int], options: SynthesisOptions, network_model: str, on_step: Callable[[str], None] | None,
) -> _Prefetched | None:
    """:data:`PREFETCHED` at ``counts[0]`` started in a forked process now, before ``best``'s
    lower bounds, when the search would run it beside its first candidate (several workers,
    :func:`_speculates`, applicable, fits the memory limit, whole topology, default network
    model) and the bounds are dear (:data:`PREFETCH_COLLECTIVES`); ``None`` otherwise."""
    name = PREFETCHED
    if collective not in PREFETCH_COLLECTIVES or options.group is not None or network_model != "default":
        return None
    if not _speculates(topology, counts) or _workers(topology) < 2:
        return None
    # (get: this producer's module alone, the others' load after the fork, beside it)
    if not get(name).tried_by_best(collective, topology.num_npus, topology) or not fits(estimate(name, topology, collective, topology.num_npus, options)):
        return None
    step = on_step or (lambda step: None)
    job = ForkedJob(partial(_produce, topology, collective, replace(options, chunks_per_npu=counts[0], in_parts=False), name, network_model, step, True), nests=True)
    return _Prefetched((name, counts[0]), job)


def _milp_affordable(topology: Topology, k: int, size_bytes: int) -> bool:
    """Whether ``best`` solves the MILP at ``k`` chunks per NPU (:data:`BEST_MILP_VARIABLES`)."""
    from chakra_collectives.synth.milp import model_variables  # here: importing it registers milp, whose place in the registry is last

    return k in BEST_MILP_CHUNKS and model_variables(topology, k, size_bytes) <= BEST_MILP_VARIABLES


def _milp_joins(topology: Topology, collective: Collective, options: SynthesisOptions, network_model: str, floor_ns: float) -> bool:
    """Whether ``best`` counts ``milp`` among its candidates here (see :func:`_synthesize_best`)."""
    milp = get("milp")
    return (
        floor_ns > 0 and options.group is None and network_model == "default" and topology.num_npus <= BEST_MILP_NPUS
        and milp.supports(collective, topology.num_npus) and milp.fits(topology) and _milp_affordable(topology, options.chunks_per_npu, options.size_bytes)
    )


GROUP_MULTIPATH_SLACK = 0.01
"""How much slower than the one before a group's all-to-all (gather, scatter, pattern) at a chunk
count may be and its K search still go on: its pairs' pieces spread over the flow's several
paths only once a pair has enough of them, so the time stays flat at small K before more chunks
pay (mesh2d:4x4 row, 64 MiB: K = 1, 2, 4, 8, 16 take 1.252, 1.254, 0.865, 0.673, 0.581 ms)."""


def _bracket_slack(collective: Collective, group: tuple[int, ...] | None) -> float:
    """The K search's slack (:func:`~chakra_collectives.synth.best.search`): :data:`GROUP_MULTIPATH_SLACK`
    for a group's collective that only moves data, else none."""
    from chakra_collectives.synth.tacos import FORWARDED

    return GROUP_MULTIPATH_SLACK if group is not None and collective in FORWARDED else 0.0


def _group_floor_ns(topology: Topology, collective: Collective, options: SynthesisOptions, name: str, network_model: str) -> float:
    """Producer ``name``'s own floor on its time for ``options.group`` at ``options.chunks_per_npu``
    (:attr:`~chakra_collectives.synth.registry.Synthesizer.floor`; 0 without a group or a floor)."""
    floor = get(name).floor
    if options.group is None or floor is None:
        return 0.0
    return floor(topology, collective, options, network_model)


PHASED_ALL_REDUCE = ("tacos",)
"""Producers whose All-Reduce over a fabric without switches is a Reduce-Scatter schedule and then
an All-Gather schedule, predicted as the sum of the two schedules' times (TACOS: its phases
predict themselves, :func:`~chakra_collectives.synth.schedule_timing.predicts_itself`): each
phase alone takes at least its own bound, so the time is at least the sum of the bounds
(``reduce_scatter_all_gather_ns`` of :func:`~chakra_collectives.bounds.lower_bounds`; on the
suite's fabrics without switches TACOS's best time over ``K`` is 1.0004x it on ring:8 at 1 GiB
to 4.6x on torus3d:8x8x8 at 1 MiB). On mesh2d:8x8, All-Reduce 64 MiB, that floor (1.230 ms)
is above ForestColl's 1.098 ms: TACOS is not built."""


def _phased_floor_ns(topology: Topology, collective: Collective, group: tuple[int, ...] | None, candidate: str, network_model: str, phases_ns: float) -> float:
    """``phases_ns`` where it is a floor on ``candidate``'s time (:data:`PHASED_ALL_REDUCE`: an
    All-Reduce of every NPU of a fabric without switches, the default network model); else 0."""
    whole = group is None and topology.num_switches == 0 and Mode.parse(network_model) is Mode.TACOS
    return phases_ns if candidate in PHASED_ALL_REDUCE and collective is Collective.ALL_REDUCE and whole else 0.0


def _synthesize_best(
    topology: Topology,
    collective: Collective,
    counts: list[int],
    options: SynthesisOptions,
    on_step: Callable[[str], None] | None,
    network_model: str,
    deadline: float | None,
    exhaustive: bool,
    floor_ns: float = 0.0,
    prefetched: _Prefetched | None = None,
    phases_ns: float = 0.0,
) -> SynthesisResult:
    """``best``: :func:`~chakra_collectives.synth.best.search` over every applicable producer
    that fits the memory limit, at the chunk counts ``counts`` (``options``: all but ``K``).

    ``floor_ns``: a lower bound on any algorithm's time (the collective's cut bound), every
    candidate's first bound; a baseline's busiest endpoint
    (:func:`~chakra_collectives.synth.best.endpoint_load_ns`) comes next, its routed link load
    (or BFB's step model) only when those cannot rule it out. ForestColl is judged by
    :func:`~chakra_collectives.synth.best.forest_estimate_ns` first; ``milp`` joins on fabrics of
    at most :data:`BEST_MILP_NPUS` NPUs, at :data:`BEST_MILP_CHUNKS` chunk counts whose model
    has at most :data:`BEST_MILP_VARIABLES` variables, with :data:`BEST_MILP_LIMIT_S` seconds each, and only when the fastest found is more than
    :data:`BEST_MILP_GAP` above ``floor_ns``. ``prefetched``: a candidate already started
    (:func:`_prefetch`), taken by the first production if it is one of it, else ended.
    ``phases_ns``: an All-Reduce's Reduce-Scatter bound plus its All-Gather bound, the floor of
    the producers that run those phases one after the other (:func:`_phased_floor_ns`)."""
    from chakra_collectives.synth.best import Candidate, applicable, baseline_bound_ns, cheapest_baseline, endpoint_load_ns, forest_estimate_ns, search

    step = on_step or (lambda name: None)
    group = options.group
    num_ranks = topology.num_npus if group is None else len(group)
    names = applicable(collective, num_ranks, topology, group)
    if _milp_joins(topology, collective, options, network_model, floor_ns):
        names.append("milp")
        options = replace(options, time_limit_s=min(BEST_MILP_LIMIT_S, options.time_limit_s or BEST_MILP_LIMIT_S))
    if not names:
        raise InputError(f"no algorithm implements {collective.value}")

    def footprint(candidate: str, k: int) -> Estimate:
        return estimate(candidate, topology, collective, num_ranks, replace(options, chunks_per_npu=k))

    # a candidate whose memory estimate does not fit is neither bounded nor produced
    too_large = {c: e for c in names if not fits(e := footprint(c, counts[0]))}
    if len(too_large) == len(names):
        require(min(too_large.values(), key=lambda e: e.nbytes))
    runnable = [c for c in names if c not in too_large]
    made: dict[tuple[str, int], _Produced] = {}

    def chunked(candidate: str) -> bool:
        return get(candidate).chunked or candidate == "milp"

    def key(candidate: str, k: int) -> tuple[str, int]:
        return candidate, k if chunked(candidate) else counts[0]

    handed: dict[tuple[str, int], ForkedJob] = {}

    def first_production(pairs: list[tuple[str, int]]) -> None:
        """The search's first production (of ``pairs``, before anything is forked for it) takes
        the prefetched job if its pair is one of them; otherwise the job is ended now."""
        nonlocal prefetched
        if prefetched is not None:
            if (job := prefetched.take()) is not None and prefetched.pair in pairs:
                handed[prefetched.pair] = job
            elif job is not None:
                job.cancel()
            prefetched = None

    def produce(candidate: str, k: int, whole: bool = False) -> float:
        """Build and time ``(candidate, k)`` once; ``whole``: never in parts (a forked process
        returns it pickled, and parts hold their lowering as a closure)."""
        first_production([key(candidate, k)])
        if key(candidate, k) not in made and (job := handed.pop(key(candidate, k), None)) is not None:
            made[key(candidate, k)] = job.result()
        if key(candidate, k) not in made:
            with progress.task(f"K={k}" if len(counts) > 1 and chunked(candidate) else "candidates"):
                try:
                    asked = replace(options, chunks_per_npu=k, in_parts=options.in_parts and not whole)
                    made[key(candidate, k)] = _produce(topology, collective, asked, candidate, network_model, step, True)
                except LimitError:  # the MILP's model is too large at this K: it cannot win here
                    if candidate != "milp":
                        raise
                    return math.inf
        return made[key(candidate, k)].predicted_ns

    def produce_chains(chains: list[list[tuple[str, int]]], go_on: Callable[..., bool], judge: Callable[[float], list[bool]]) -> list[list[float]]:
        """The chains at once: the first here, the others in forked processes; each in order
        while ``go_on`` its times so far (the first chain's also with what the forked ones have
        finished meanwhile). After the first result here, the other chains ``judge`` rules out
        are ended (and this one stops when none is left)."""
        Outcome = tuple[list[tuple[tuple[str, int], _Produced | None]], list[float]]

        def run(chain: list[tuple[str, int]], first: Callable[[float], bool] | None = None, elsewhere: Callable[[], list] = list, whole: bool = False) -> Outcome:
            times: list[float] = []
            for candidate, k in chain:
                if times and not go_on(times, (candidate, k), elsewhere()):
                    break
                times.append(produce(candidate, k, whole))
                if first is not None and len(times) == 1 and not first(times[0]):
                    break
            return [(key(c, k), made.get(key(c, k))) for c, k in chain[: len(times)]], times

        def fork(chain: list[tuple[str, int]]) -> ForkedJob | _Chained:
            if len(chain) == 1 and (job := handed.pop(key(*chain[0]), None)) is not None:
                return _Chained(job, key(*chain[0]))
            # ForestColl alone may fork its second candidate (forestcoll.PARALLEL_NPUS)
            return ForkedJob(partial(run, chain, whole=True), nests=all(name == "forestcoll" for name, _ in chain))

        first_production([key(*chains[0][0])] + [key(*chain[0]) for chain in chains[1:] if len(chain) == 1])
        with progress.task(" + ".join(chain[0][0] for chain in chains)):
            forked: list[ForkedJob | _Chained | None] = [fork(chain) for chain in chains[1:]]
            finished: dict[int, Outcome] = {}

            def first(time_ns: float) -> bool:
                for i, keep in enumerate(judge(time_ns)):
                    if not keep and forked[i] is not None:
                        forked[i].cancel()  # type: ignore[union-attr]
                        forked[i] = None
                return any(job is not None for job in forked)

            def elsewhere() -> list[tuple[tuple[str, int], float]]:
                """The forked chains' results so far (collected as each one finishes)."""
                for i, job in enumerate(forked):
                    if job is not None and i not in finished and job.done():
                        finished[i] = job.result()
                return [(pair, t) for i, (_, times) in finished.items() for pair, t in zip(chains[i + 1], times)]

            try:
                results = [run(chains[0], first, elsewhere)]
            except BaseException:
                for i, job in enumerate(forked):
                    if job is not None and i not in finished:
                        job.cancel()
                raise
            results += [finished[i] if i in finished else job.result() if job is not None else ([], []) for i, job in enumerate(forked)]
        made.update((job, produced) for found, _ in results for job, produced in found if produced is not None)
        return [times for _, times in results]

    def bound(candidate: str, k: int) -> float:
        if k != counts[0] and not fits(footprint(candidate, k)) or candidate == "milp" and not _milp_affordable(topology, k, options.size_bytes):
            return math.inf
        messages = get(candidate).messages
        if messages is None or group is not None:
            own = _group_floor_ns(topology, collective, replace(options, chunks_per_npu=k), candidate, network_model)
            return max(floor_ns, own, _phased_floor_ns(topology, collective, group, candidate, network_model, phases_ns))
        src, dst, nbytes = messages(collective, num_ranks, replace(options, chunks_per_npu=k))
        return max(floor_ns, endpoint_load_ns(topology, src, dst, nbytes, network_model=network_model))

    def refine(candidate: str, k: int, enough: float | None) -> float:
        return baseline_bound_ns(candidate, topology, collective, options.size_bytes, k, network_model=network_model, group=group, enough=enough)

    guesses: dict[str, float] = {}

    def guess(candidate: str, k: int) -> float:
        """ForestColl's estimate (from the floor; 0 without one); milp's worth (see above)."""
        if candidate not in guesses:
            guesses[candidate] = 0.0
            if candidate == "forestcoll" and floor_ns > 0 and group is None:
                guesses[candidate] = forest_estimate_ns(topology, collective, options.size_bytes, floor_ns)
            elif candidate == "milp":
                guesses[candidate] = floor_ns * (1 + BEST_MILP_GAP)
        return guesses[candidate]

    started = time.perf_counter()
    with progress.task("candidates"):
        try:
            found = search(
                runnable, counts, produce=produce, bound=bound, chunked=chunked, refine=refine, estimate=guess,
                fallback=lambda: cheapest_baseline(runnable, topology, collective, replace(options, chunks_per_npu=counts[0])),
                deadline=deadline, exhaustive=exhaustive, produce_chains=produce_chains, workers=_workers(topology),
                speculate=_speculates(topology, counts), within=BEST_WITHIN, slack=_bracket_slack(collective, group),
            )
        finally:
            first_production([])
            for job in handed.values():
                job.cancel()
    bounding_s = time.perf_counter() - started - sum(p.synthesis_s + p.predict_s for p in made.values())
    candidates = found.candidates + [Candidate(c, None, 0.0, skipped=f"needs about {format_size(e.nbytes)} ({e.work})") for c, e in too_large.items()]
    candidates.sort(key=lambda c: names.index(c.name))
    result = _result(topology, made[key(found.name, found.chunks_per_npu)], found.name, found.chunks_per_npu, network_model, "best", candidates)
    result.synthesis_s = sum(p.synthesis_s for p in made.values()) + bounding_s
    result.predict_s += sum(p.predict_s for p in made.values())
    result.chunks_tried = dict(next(c for c in candidates if c.name == found.name).tried)
    result.budget_ran_out, result.budget_fallback = found.budget_ran_out, found.fell_back
    return result


class _Chained:
    """A prefetched candidate's job as the forked run of its one-pair chain: :meth:`result`
    returns what that run returns (the pair and its production, its time)."""

    def __init__(self, job: ForkedJob, pair: tuple[str, int]) -> None:
        self._job, self._pair = job, pair

    def done(self) -> bool:
        """Whether the prefetched job has finished."""
        return self._job.done()

    def result(self) -> tuple[list[tuple[tuple[str, int], _Produced | None]], list[float]]:
        produced = self._job.result()
        return [(self._pair, produced)], [produced.predicted_ns]

    def cancel(self) -> None:
        self._job.cancel()


def _synthesize_with(
    topology: Topology,
    collective: Collective,
    nbytes: int,
    chunks_per_npu: int,
    name: str,
    seed: int,
    trials: int | None,
    root: int,
    on_step: Callable[[str], None] | None,
    label: str,
    network_model: str,
    forest: dict[str, Any],
    to_beat_ns: float | None = None,
) -> SynthesisResult:
    """:func:`synthesize` of producer ``name`` for one chunk count, without the bounds (``forest``:
    ForestColl's options; ``to_beat_ns``: :attr:`~chakra_collectives.synth.registry.SynthesisOptions.to_beat_ns`)."""
    options = SynthesisOptions(size_bytes=nbytes, chunks_per_npu=chunks_per_npu, seed=seed, trials=trials, root=root, to_beat_ns=to_beat_ns, **forest)
    with progress.task(label or "candidates"):
        require(estimate(name, topology, collective, topology.num_npus if options.group is None else len(options.group), options))
        produced = _produce(topology, collective, options, name, network_model, on_step or (lambda step: None), False)
    result = _result(topology, produced, name, chunks_per_npu, network_model, name, [])
    result.synthesis_s = produced.synthesis_s
    result.predict_s += produced.predict_s
    return result


def _result(topology: Topology, produced: _Produced, name: str, chunks_per_npu: int, network_model: str, requested: str, candidates: list[Candidate]) -> SynthesisResult:
    """The :class:`SynthesisResult` of one produced algorithm, without the bounds; its
    ``predict_s`` counts only finding what limits it (when the producer timed itself)."""
    made, limit = produced.made, produced.bottleneck
    limit_s = 0.0
    if limit is None:  # the producer timed itself: what limits it comes from the model's run
        started = time.perf_counter()
        with progress.task("what limits it"):
            limit = busiest_link(simulate_collective(made.algorithm, topology, network_model=network_model))
        limit_s = time.perf_counter() - started
    details = made.details
    return SynthesisResult(
        algorithm=made.algorithm,
        topology=topology,
        algorithm_name=name,
        chunks_per_npu=chunks_per_npu,
        predicted_ns=produced.predicted_ns,
        schedule_ns=made.schedule_ns,
        bounds=None,
        synthesis_s=0.0,
        predict_s=limit_s,
        seed=details.get("seed"),
        trials=details.get("trials", 1),
        requested=requested,
        candidates=candidates,
        phase_seeds=tuple(details.get("phase_seeds", ())),
        phase_latency_ratios=tuple(details.get("phase_latency_ratios", ())),
        details=dict(details),
        network_model=network_model,
        bottleneck=limit,
    )


__all__ = ["AUTO_CHUNKS", "AUTO_CHUNKS_BUDGET", "BEST_WITHIN", "BOUNDS", "DEFAULT_ALGORITHM", "EXACT_BOUNDS_NPUS", "SynthesisResult", "algorithm_names", "auto_chunk_counts", "bounds_method", "group_bounds", "synthesize"]
