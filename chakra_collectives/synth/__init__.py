"""Producers of collective algorithms: TACOS synthesis and classic baselines, in one registry.

Every producer registers itself by name in :mod:`~chakra_collectives.synth.registry` (this
package imports each producer module, so the registry is complete once ``synth`` is
imported). :func:`synthesize` is what ``chakra-coll synth`` runs: it produces the algorithm
(one registered producer, or ``best`` of them), predicts its time under the shared network
model (:func:`chakra_collectives.network.predict_time`), and puts it beside the lower bounds
(:func:`chakra_collectives.bounds.lower_bounds`).

>>> from chakra_collectives.topology import load_topology
>>> result = synthesize(load_topology("torus2d:4x4"), "all-gather", "16MiB", algorithm="tacos")
>>> result.algorithm.num_ranks, result.predicted_ns == result.schedule_ns, 0 < result.efficiency <= 1
(16, True, True)
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from chakra_collectives.bounds import SUPPORTED as BOUNDED
from chakra_collectives.bounds import LowerBounds, lower_bounds
from chakra_collectives.errors import InputError
from chakra_collectives.ir import Collective, CollectiveAlgorithm
from chakra_collectives.network import predict_time
from chakra_collectives.network.model import Mode
from chakra_collectives.resources import Estimate, fits, require
from chakra_collectives.synth.best import Candidate, applicable, baseline_bound_ns, choose
from chakra_collectives.synth.footprint import estimate
from chakra_collectives.synth.registry import SynthesisOptions, Synthesized, get, names
from chakra_collectives.topology.core import Topology
from chakra_collectives.units import format_size, parse_size

# Every producer module registers itself when imported; best breaks ties in registration order.
import chakra_collectives.synth.tacos  # noqa: E402,F401  (first)
import chakra_collectives.synth.baselines  # noqa: E402,F401
import chakra_collectives.synth.bfb  # noqa: E402,F401


def algorithm_names() -> list[str]:
    """Names ``--algorithm`` accepts: ``best``, then every registered producer.

    >>> algorithm_names()
    ['best', 'tacos', 'ring', 'biring', 'direct', 'rhd', 'tree', 'bfb']
    """
    return ["best", *names()]

DEFAULT_ALGORITHM = "best"
"""What :func:`synthesize` and ``chakra-coll synth`` produce unless told otherwise."""


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
    """``None`` for collectives without bounds (all-to-all, broadcast, reduce)."""
    synthesis_s: float
    predict_s: float
    seed: int | None = None
    trials: int = 1
    requested: str = ""
    """The ``algorithm`` asked for (``best``, or the one produced)."""
    candidates: list[Candidate] = field(default_factory=list)
    """``best`` only: every applicable algorithm, its predicted time (or a bound when it could not win)."""
    phase_seeds: tuple[int, ...] = ()
    phase_latency_ratios: tuple[float, ...] = ()
    network_model: str = "tacos"
    """The network model's mode the candidates were timed (and ``best`` chose) under."""

    @property
    def efficiency(self) -> float | None:
        """Best bound over predicted time: how far from what *any* algorithm could do."""
        return None if self.bounds is None else self.bounds.efficiency(self.predicted_ns)

    @property
    def reduce_scatter_all_gather_efficiency(self) -> float | None:
        """All-Reduce only: design.md's efficiency, against the bound of reduce-scatter-then-all-gather algorithms."""
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
            "npus": self.topology.num_npus,
            "switches": self.topology.num_switches,
            "links": len(self.topology.links),
            "collective": algo.collective.value,
            "algorithm": self.algorithm_name,
            "requested_algorithm": self.requested or self.algorithm_name,
            "candidates": {c.name: c.as_dict() for c in self.candidates},
            "size_bytes": algo.size_bytes,
            "chunks_per_npu": self.chunks_per_npu,
            "chunks": algo.chunk_count,
            "chunk_bytes": algo.chunk_bytes(),
            "operations": algo.num_ops,
            "predicted_ns": self.predicted_ns,
            "network_model": self.network_model,
            "schedule_ns": self.schedule_ns,
            "bounds": None if bounds is None else {k: v for k, v in bounds.as_dict().items() if k.endswith("_ns")},
            "efficiency": self.efficiency,
            "reduce_scatter_all_gather_efficiency": self.reduce_scatter_all_gather_efficiency,
            "synthesis_s": self.synthesis_s,
            "predict_s": self.predict_s,
            "seed": self.seed,
            "trials": self.trials,
            "phase_seeds": list(self.phase_seeds),
            "phase_latency_ratios": list(self.phase_latency_ratios),
            "switch_handling": self.switch_handling,
        }


def synthesize(
    topology: Topology,
    collective: Collective | str,
    size_bytes: int | str,
    *,
    chunks_per_npu: int = 1,
    algorithm: str = DEFAULT_ALGORITHM,
    seed: int = 0,
    trials: int | None = None,
    root: int = 0,
    on_step: Callable[[str], None] | None = None,
    network_model: str = "tacos",
) -> SynthesisResult:
    """Produce ``collective`` of ``size_bytes`` for ``topology`` with ``algorithm``; time and bound it.

    ``algorithm`` is a registered producer's name or ``"best"``, which produces every applicable
    one -- TACOS and the baselines -- (:func:`applicable`),
    predicts each under the network model and keeps the fastest (ties: the first in
    :func:`applicable`'s order); :attr:`SynthesisResult.candidates` lists them all.
    ``chunks_per_npu`` is TACOS's ``K`` and the baselines' chunks per rank (per direction for
    ``biring``; the number of pipelined pieces for ``tree``). The size is cut into chunks of
    ``ceil(size / chunks)`` bytes (the IR's padding rule), so any size works. ``trials=None``:
    TACOS's default (:func:`~chakra_collectives.synth.tacos.auto_trials`). ``on_step(name)``
    is called before each phase (for progress displays). ``network_model`` is the mode every
    candidate is timed under: ``tacos`` (default) or ``astra-sim`` (ASTRA-sim's congestion-aware
    rule: on a switch, messages queued at a port overlap their latencies).
    """
    step = on_step or (lambda name: None)
    collective = Collective.parse(collective) if isinstance(collective, str) else collective
    name = algorithm.lower()
    if name not in algorithm_names():
        raise InputError(f"unknown algorithm {algorithm!r} (valid: {', '.join(algorithm_names())})")
    network_model = Mode.parse(network_model).value
    options = SynthesisOptions(size_bytes=parse_size(size_bytes), chunks_per_npu=chunks_per_npu, seed=seed, trials=trials, root=root)
    topology.validate()
    produced: dict[str, tuple[Synthesized, float, float, float]] = {}

    def produce(candidate: str) -> tuple[CollectiveAlgorithm, float]:
        step(f"synthesize ({candidate})" if name == "best" else "synthesize")
        started = time.perf_counter()
        made = get(candidate).make(topology, collective, topology.num_npus, options)
        synthesis_s = time.perf_counter() - started
        step("predict")
        started = time.perf_counter()
        predicted = predict_time(made.algorithm, topology, mode=network_model)
        produced[candidate] = (made, synthesis_s, time.perf_counter() - started, predicted)
        return made.algorithm, predicted

    def footprint(candidate: str) -> Estimate:
        return estimate(candidate, topology, collective, topology.num_npus, options)

    if name == "best":
        candidate_names = applicable(collective, topology.num_npus, topology)
        if not candidate_names:
            raise InputError(f"no algorithm implements {collective.value}")
        # a candidate whose memory estimate does not fit is neither bounded nor produced
        too_large = {c: footprint(c) for c in candidate_names if not fits(footprint(c))}
        if len(too_large) == len(candidate_names):
            require(min(too_large.values(), key=lambda e: e.nbytes))
        started = time.perf_counter()
        chosen, algo, candidates = choose(
            [c for c in candidate_names if c not in too_large],
            lambda n: baseline_bound_ns(n, topology, collective, options.size_bytes, chunks_per_npu, mode=network_model),
            produce,
        )
        candidates += [Candidate(c, None, 0.0, skipped=f"needs about {format_size(e.nbytes)} ({e.work})") for c, e in too_large.items()]
        candidates.sort(key=lambda c: candidate_names.index(c.name))
        bounding_s = time.perf_counter() - started - sum(p[1] + p[2] for p in produced.values())
    else:
        chosen = name
        require(footprint(name))
        algo, _ = produce(name)
        candidates, bounding_s = [], 0.0
    made, _, _, predicted = produced[chosen]
    step("bounds")
    bounds = lower_bounds(topology, collective, options.size_bytes) if collective in BOUNDED else None
    details = made.details
    return SynthesisResult(
        algorithm=algo,
        topology=topology,
        algorithm_name=chosen,
        chunks_per_npu=chunks_per_npu,
        predicted_ns=predicted,
        schedule_ns=made.schedule_ns,
        bounds=bounds,
        synthesis_s=sum(p[1] for p in produced.values()) + bounding_s,
        predict_s=sum(p[2] for p in produced.values()),
        seed=details.get("seed"),
        trials=details.get("trials", 1),
        requested=name,
        candidates=candidates,
        phase_seeds=tuple(details.get("phase_seeds", ())),
        phase_latency_ratios=tuple(details.get("phase_latency_ratios", ())),
        network_model=network_model,
    )


__all__ = ["Candidate", "DEFAULT_ALGORITHM", "SynthesisResult", "algorithm_names", "applicable", "synthesize"]
