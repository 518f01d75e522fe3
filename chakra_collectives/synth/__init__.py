"""Producers of collective algorithms: TACOS synthesis and classic baselines.

:func:`synthesize` is what ``chakra-coll synth`` runs: it produces the algorithm, predicts its
time under the shared network model (:func:`chakra_collectives.network.predict_time`), and
puts it beside the lower bounds (:func:`chakra_collectives.bounds.lower_bounds`).

>>> from chakra_collectives.topology import load_topology
>>> result = synthesize(load_topology("torus2d:4x4"), "all-gather", "16MiB")
>>> result.algorithm.num_ranks, result.predicted_ns == result.schedule_ns, 0 < result.efficiency <= 1
(16, True, True)
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from chakra_collectives.bounds import SUPPORTED as BOUNDED
from chakra_collectives.bounds import LowerBounds, lower_bounds
from chakra_collectives.errors import InputError
from chakra_collectives.ir import Collective, CollectiveAlgorithm
from chakra_collectives.network import predict_time
from chakra_collectives.synth.baselines import BASELINES
from chakra_collectives.synth.tacos import SWITCH_HANDLING, tacos
from chakra_collectives.topology.core import Topology
from chakra_collectives.units import parse_size

ALGORITHMS = ("tacos", *BASELINES)
"""Names ``--algorithm`` accepts."""


@dataclass
class SynthesisResult:
    """An algorithm with its predicted time, the bounds, and what producing it cost."""

    algorithm: CollectiveAlgorithm
    topology: Topology
    algorithm_name: str
    chunks_per_npu: int
    predicted_ns: float
    """Time under the network model (tacos mode), for ``algorithm.size_bytes``."""
    schedule_ns: float | None
    """TACOS only: the matcher's own schedule time (see :attr:`model_agreement`)."""
    bounds: LowerBounds | None
    """``None`` for collectives without bounds (all-to-all, broadcast, reduce)."""
    synthesis_s: float
    predict_s: float
    seed: int | None = None
    trials: int = 1

    @property
    def efficiency(self) -> float | None:
        return None if self.bounds is None else self.bounds.efficiency(self.predicted_ns)

    @property
    def switch_handling(self) -> str:
        if not self.topology.num_switches:
            return "no switches"
        if self.algorithm_name == "tacos":
            return SWITCH_HANDLING
        return "messages routed through the switches by the network model"

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
            "size_bytes": algo.size_bytes,
            "chunks_per_npu": self.chunks_per_npu,
            "chunks": algo.chunk_count,
            "chunk_bytes": algo.chunk_bytes(),
            "operations": algo.num_ops,
            "predicted_ns": self.predicted_ns,
            "schedule_ns": self.schedule_ns,
            "bounds": None
            if bounds is None
            else {"ingress_ns": bounds.ingress_ns, "cut_ns": bounds.cut_ns, "latency_ns": bounds.latency_ns, "best_ns": bounds.best_ns},
            "efficiency": self.efficiency,
            "synthesis_s": self.synthesis_s,
            "predict_s": self.predict_s,
            "seed": self.seed,
            "trials": self.trials,
            "switch_handling": self.switch_handling,
        }


def synthesize(
    topology: Topology,
    collective: Collective | str,
    size_bytes: int | str,
    *,
    chunks_per_npu: int = 1,
    algorithm: str = "tacos",
    seed: int = 0,
    trials: int = 1,
    root: int = 0,
    on_step: Callable[[str], None] | None = None,
) -> SynthesisResult:
    """Produce ``collective`` of ``size_bytes`` for ``topology`` with ``algorithm``; time and bound it.

    ``chunks_per_npu`` is TACOS's ``K`` and the baselines' chunks per rank (per direction for
    ``biring``; the number of pipelined pieces for ``tree``). The size is cut into chunks of
    ``ceil(size / chunks)`` bytes (the IR's padding rule), so any size works. ``on_step(name)``
    is called before each phase (for progress displays).
    """
    step = on_step or (lambda name: None)
    collective = Collective.parse(collective) if isinstance(collective, str) else collective
    size = parse_size(size_bytes)
    name = algorithm.lower()
    if name not in ALGORITHMS:
        raise InputError(f"unknown algorithm {algorithm!r} (valid: {', '.join(ALGORITHMS)})")
    if chunks_per_npu < 1:
        raise InputError(f"chunks per NPU must be positive, got {chunks_per_npu}")
    topology.validate()
    step("synthesize")
    started = time.perf_counter()
    schedule_ns = None
    used_seed: int | None = None
    if name == "tacos":
        found = tacos(topology, collective, size, chunks_per_npu=chunks_per_npu, seed=seed, trials=trials)
        algo, schedule_ns, used_seed = found.algorithm, found.schedule_ns, found.seed
    elif name == "tree":
        algo = BASELINES[name](collective, topology.num_npus, size_bytes=size, chunks=chunks_per_npu, root=root)
    else:
        algo = BASELINES[name](collective, topology.num_npus, size_bytes=size, chunks_per_rank=chunks_per_npu)
    synthesis_s = time.perf_counter() - started
    step("predict")
    started = time.perf_counter()
    predicted = predict_time(algo, topology)
    predict_s = time.perf_counter() - started
    step("bounds")
    bounds = lower_bounds(topology, collective, size) if collective in BOUNDED else None
    return SynthesisResult(
        algorithm=algo,
        topology=topology,
        algorithm_name=name,
        chunks_per_npu=chunks_per_npu,
        predicted_ns=predicted,
        schedule_ns=schedule_ns,
        bounds=bounds,
        synthesis_s=synthesis_s,
        predict_s=predict_s,
        seed=used_seed,
        trials=trials if name == "tacos" else 1,
    )


__all__ = ["ALGORITHMS", "SynthesisResult", "synthesize"]
