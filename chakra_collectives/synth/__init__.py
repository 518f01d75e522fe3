"""Producers of collective algorithms: TACOS synthesis and classic baselines, in one registry.

Every producer registers itself by name in :mod:`~chakra_collectives.synth.registry`, which
imports a producer's module when it is first asked for (``synth -a tacos`` imports TACOS
alone). :func:`synthesize` (:mod:`~chakra_collectives.synth.synthesis`) is what
``chakra-coll synth`` runs: it produces the algorithm (one registered producer, or ``best`` of
them, :mod:`~chakra_collectives.synth.best`), predicts its time under the shared network model
(:func:`chakra_collectives.network.predict_time`), and puts it beside the lower bounds
(:func:`chakra_collectives.bounds.lower_bounds`). Producers: TACOS
(:mod:`~chakra_collectives.synth.tacos`), the baselines, BFB, ForestColl, the exact MILP
(:mod:`~chakra_collectives.synth.milp`), and route-planned grids
(:mod:`~chakra_collectives.synth.gridpipe`).

>>> from chakra_collectives.topology import load_topology
>>> result = synthesize(load_topology("torus2d:4x4"), "all-gather", "16MiB", algorithm="tacos")
>>> result.algorithm.num_ranks, result.predicted_ns == result.schedule_ns, 0 < result.efficiency <= 1
(16, True, True)
"""

from chakra_collectives.synth.synthesis import (
    AUTO_CHUNKS,
    BEST_WITHIN,
    BOUNDS,
    DEFAULT_ALGORITHM,
    SynthesisResult,
    algorithm_names,
    auto_chunk_counts,
    bounds_method,
    group_bounds,
    synthesize,
)

from chakra_collectives.lazy_names import LazyNames

# best's names load on first use: one producer asked by name (synth -a tacos) needs none of its search
__getattr__ = LazyNames(__name__, {"Candidate": "chakra_collectives.synth.best", "applicable": "chakra_collectives.synth.best"}, globals())


__all__ = ["AUTO_CHUNKS", "BEST_WITHIN", "BOUNDS", "Candidate", "DEFAULT_ALGORITHM", "SynthesisResult", "algorithm_names", "applicable", "auto_chunk_counts", "bounds_method", "group_bounds", "synthesize"]
