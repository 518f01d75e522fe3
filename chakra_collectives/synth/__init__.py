"""Producers of collective algorithms: TACOS synthesis and classic baselines, in one registry.

Every producer registers itself by name in :mod:`~chakra_collectives.synth.registry`, which
imports a producer's module when it is first asked for (``synth -a tacos`` imports TACOS
alone). :func:`synthesize` (:mod:`~chakra_collectives.synth.synthesis`) is what
``chakra-coll synth`` runs: it produces the algorithm (one registered producer, or ``best`` of
them, :mod:`~chakra_collectives.synth.best`), predicts its time under the shared network model
(:func:`chakra_collectives.network.predict_time`), and puts it beside the lower bounds
(:func:`chakra_collectives.bounds.lower_bounds`). Producers: TACOS
(:mod:`~chakra_collectives.synth.tacos`), the baselines, BFB, ForestColl, the exact MILP
(:mod:`~chakra_collectives.synth.milp`), route-planned grids
(:mod:`~chakra_collectives.synth.gridpipe`), and for process groups rails between servers
(:mod:`~chakra_collectives.synth.rails`), unicast copies along the flow optimum's paths
(:mod:`~chakra_collectives.synth.flowcast`) and chains of members
(:mod:`~chakra_collectives.synth.chains`).

>>> from chakra_collectives.synth import synthesize
>>> from chakra_collectives.topology import load_topology
>>> result = synthesize(load_topology("torus2d:4x4"), "all-gather", "16MiB", algorithm="tacos")
>>> result.algorithm.num_ranks, result.predicted_ns == result.schedule_ns, 0 < result.efficiency <= 1
(16, True, True)
"""

from chakra_collectives.lazy_names import LazyNames

# every name loads on first use (PEP 562): synth --help lists the producers without importing
# numpy, and one producer asked by name (synth -a tacos) does not import best's search
_SYNTHESIS = "chakra_collectives.synth.synthesis"
__getattr__ = LazyNames(__name__, {
    **dict.fromkeys(["AUTO_CHUNKS", "BEST_WITHIN", "BOUNDS", "SynthesisResult", "auto_chunk_counts", "bounds_method", "group_bounds", "synthesize"], _SYNTHESIS),
    **dict.fromkeys(["DEFAULT_ALGORITHM", "algorithm_names"], "chakra_collectives.synth.registry"),
    **dict.fromkeys(["Candidate", "applicable"], "chakra_collectives.synth.best"),
}, globals())


__all__ = ["AUTO_CHUNKS", "BEST_WITHIN", "BOUNDS", "Candidate", "DEFAULT_ALGORITHM", "SynthesisResult", "algorithm_names", "applicable", "auto_chunk_counts", "bounds_method", "group_bounds", "synthesize"]
