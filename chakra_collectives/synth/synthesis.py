"""What ``chakra-coll synth`` runs: :func:`synthesize` produces a collective with one registered
producer (or ``best`` of them), predicts its time under the shared network model
(:func:`chakra_collectives.network.predict_time`) and puts it beside the lower bounds
(:func:`chakra_collectives.bounds.lower_bounds`); :class:`SynthesisResult` is what it returns.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from chakra_collectives import progress
from chakra_collectives.bounds import SUPPORTED as BOUNDED
from chakra_collectives.bounds import LowerBounds, lower_bounds
from chakra_collectives.errors import InputError
from chakra_collectives.ir import Collective, CollectiveAlgorithm
from chakra_collectives.network import simulate_collective
from chakra_collectives.network.bottleneck import Bottleneck, busiest_link
from chakra_collectives.network.model import Mode
from chakra_collectives.resources import Estimate, fits, require
from chakra_collectives.synth.best import Candidate, applicable, baseline_bound_ns, choose
from chakra_collectives.synth.footprint import estimate
from chakra_collectives.synth.registry import SynthesisOptions, Synthesized, get, names
from chakra_collectives.topology.core import Topology
from chakra_collectives.units import format_size, parse_size

def algorithm_names() -> list[str]:
    """Names ``--algorithm`` accepts: ``best``, then every registered producer.

    >>> algorithm_names()
    ['best', 'tacos', 'ring', 'biring', 'direct', 'rhd', 'tree', 'bfb', 'forestcoll', 'milp']
    """
    return ["best", *names()]

DEFAULT_ALGORITHM = "best"
"""What :func:`synthesize` and ``chakra-coll synth`` produce unless told otherwise."""

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

    algorithm: CollectiveAlgorithm
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


def auto_chunk_counts(num_npus: int) -> list[int]:
    """The chunks per NPU :func:`synthesize` tries for ``num_npus`` NPUs when none is given.

    >>> auto_chunk_counts(8), auto_chunk_counts(64), auto_chunk_counts(1024)
    ([1, 2, 4, 8, 16], [1, 2, 4], [1])
    """
    return [k for k in AUTO_CHUNKS if k == 1 or num_npus * num_npus * k <= AUTO_CHUNKS_BUDGET]


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
    time_limit_s: float | None = None,
) -> SynthesisResult:
    """Produce ``collective`` of ``size_bytes`` for ``topology`` with ``algorithm``; time and bound it.

    ``algorithm`` is a registered producer's name or ``"best"``, which produces every applicable
    one -- TACOS and the baselines -- (:func:`applicable`),
    predicts each under the network model and keeps the fastest (ties: the first in
    :func:`applicable`'s order); :attr:`SynthesisResult.candidates` lists them all.
    ``chunks_per_npu`` is TACOS's ``K`` and the baselines' chunks per rank (per direction for
    ``biring``; the number of pipelined pieces for ``tree``); ``None`` chooses it by predicted
    time: ``K`` = 1, 2, 4, ... (:func:`auto_chunk_counts`) until one is not faster than the
    fastest so far (:attr:`SynthesisResult.chunks_tried` lists the times). The size is cut into
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
    """
    collective = Collective.parse(collective) if isinstance(collective, str) else collective
    name = algorithm.lower()
    if name not in algorithm_names():
        raise InputError(f"unknown algorithm {algorithm!r} (valid: {', '.join(algorithm_names())})")
    method = bounds_method(bounds, topology.num_npus)
    network_model = Mode.parse(network_model).value
    nbytes = parse_size(size_bytes)
    counts = [chunks_per_npu] if chunks_per_npu is not None else auto_chunk_counts(topology.num_npus)
    if name != "best" and not get(name).chunked:
        counts = counts[:1]
    forest = {"trees_per_npu": trees_per_npu, "chunks_per_tree": chunks_per_tree, "time_limit_s": time_limit_s}
    SynthesisOptions(size_bytes=nbytes, chunks_per_npu=counts[0], seed=seed, trials=trials, root=root, **forest)  # validates
    topology.validate()
    tried: dict[int, float] = {}
    found: SynthesisResult | None = None
    spent_s = [0.0, 0.0]
    unchunked: dict[str, _Produced] = {}  # built once, whatever K
    with progress.task("synthesize"):
        for k in counts:
            label = f"K={k}" if chunks_per_npu is None else ""
            attempt = _synthesize_with(topology, collective, nbytes, k, name, seed, trials, root, on_step, label, network_model, forest, unchunked)
            tried[k] = attempt.predicted_ns
            spent_s = [spent_s[0] + attempt.synthesis_s, spent_s[1] + attempt.predict_s]
            if found is not None and attempt.predicted_ns >= found.predicted_ns:
                break
            found = attempt
        assert found is not None
        found.synthesis_s, found.predict_s = spent_s
        if on_step:
            on_step("bounds")
        with progress.task("lower bounds"):
            started = time.perf_counter()
            found.bounds = lower_bounds(topology, collective, nbytes, method=method) if method and collective in BOUNDED else None
            found.bounds_s = time.perf_counter() - started
    found.chunks_tried = tried if chunks_per_npu is None else {}
    return found


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
    unchunked: dict[str, _Produced],
) -> SynthesisResult:
    """:func:`synthesize` for one chunk count, without the bounds (``forest``: ForestColl's options;
    ``unchunked``: what producers that ignore the chunk count made for an earlier ``K``)."""
    step = on_step or (lambda name: None)
    options = SynthesisOptions(size_bytes=nbytes, chunks_per_npu=chunks_per_npu, seed=seed, trials=trials, root=root, **forest)
    produced: dict[str, _Produced] = {}

    def produce(candidate: str) -> tuple[CollectiveAlgorithm, float]:
        if candidate in unchunked:
            produced[candidate] = unchunked[candidate]
            return unchunked[candidate].made.algorithm, unchunked[candidate].predicted_ns
        step(f"synthesize ({candidate})" if name == "best" else "synthesize")
        with progress.task(candidate):
            started = time.perf_counter()
            made = get(candidate).make(topology, collective, topology.num_npus, options)
            synthesis_s = time.perf_counter() - started
            step("predict")
            started = time.perf_counter()
            with progress.task("predict"):
                # a producer that timed itself did so under the default model
                own = made.predicted_ns if network_model == "default" else None
                if own is not None:
                    predicted, limit = own, None
                else:
                    timing = simulate_collective(made.algorithm, topology, network_model=network_model)
                    predicted, limit = timing.time_ns, busiest_link(timing)
                    del timing
            produced[candidate] = _Produced(made, synthesis_s, time.perf_counter() - started, predicted, limit)
        if not get(candidate).chunked:
            unchunked[candidate] = produced[candidate]
        return made.algorithm, predicted

    def footprint(candidate: str) -> Estimate:
        return estimate(candidate, topology, collective, topology.num_npus, options)

    candidate_names = applicable(collective, topology.num_npus, topology) if name == "best" else [name]
    if not candidate_names:
        raise InputError(f"no algorithm implements {collective.value}")
    with progress.task(label or "candidates"):
        if name == "best":
            # a candidate whose memory estimate does not fit is neither bounded nor produced
            too_large = {c: footprint(c) for c in candidate_names if not fits(footprint(c))}
            if len(too_large) == len(candidate_names):
                require(min(too_large.values(), key=lambda e: e.nbytes))
            started = time.perf_counter()
            chosen, algo, candidates = choose(
                [c for c in candidate_names if c not in too_large],
                lambda n: baseline_bound_ns(n, topology, collective, options.size_bytes, chunks_per_npu, network_model=network_model),
                produce,
            )
            candidates += [Candidate(c, None, 0.0, skipped=f"needs about {format_size(e.nbytes)} ({e.work})") for c, e in too_large.items()]
            candidates.sort(key=lambda c: candidate_names.index(c.name))
            bounding_s = time.perf_counter() - started - sum(p.synthesis_s + p.predict_s for p in produced.values())
        else:
            chosen = name
            require(footprint(name))
            algo, _ = produce(name)
            candidates, bounding_s = [], 0.0
    made, predicted, limit = produced[chosen].made, produced[chosen].predicted_ns, produced[chosen].bottleneck
    limit_s = 0.0
    if limit is None:  # the producer timed itself: what limits it comes from the model's run
        started = time.perf_counter()
        with progress.task("what limits it"):
            limit = busiest_link(simulate_collective(algo, topology, network_model=network_model))
        limit_s = time.perf_counter() - started
        produced[chosen].bottleneck = limit  # kept for the next chunk count too, when it reuses the candidate
    details = made.details
    return SynthesisResult(
        algorithm=algo,
        topology=topology,
        algorithm_name=chosen,
        chunks_per_npu=chunks_per_npu,
        predicted_ns=predicted,
        schedule_ns=made.schedule_ns,
        bounds=None,
        synthesis_s=sum(p.synthesis_s for p in produced.values()) + bounding_s,
        predict_s=sum(p.predict_s for p in produced.values()) + limit_s,
        seed=details.get("seed"),
        trials=details.get("trials", 1),
        requested=name,
        candidates=candidates,
        phase_seeds=tuple(details.get("phase_seeds", ())),
        phase_latency_ratios=tuple(details.get("phase_latency_ratios", ())),
        details=dict(details),
        network_model=network_model,
        bottleneck=limit,
    )


__all__ = ["AUTO_CHUNKS", "AUTO_CHUNKS_BUDGET", "BOUNDS", "DEFAULT_ALGORITHM", "EXACT_BOUNDS_NPUS", "SynthesisResult", "algorithm_names", "auto_chunk_counts", "bounds_method", "synthesize"]
