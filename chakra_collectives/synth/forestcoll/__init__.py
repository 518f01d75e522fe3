"""ForestColl: throughput-optimal schedules from spanning trees, on any topology.

Zhao et al., "ForestColl: Throughput-Optimal Collective Communications on Heterogeneous Network
Fabrics" (arXiv 2402.06787). The steps, each its own module:

1. :mod:`~chakra_collectives.synth.forestcoll.optimum` -- the optimal ``(U, k)`` exactly, from the
   cut ratio shared with the lower bounds (:mod:`chakra_collectives.flow`): ``k`` trees per NPU,
   each edge loaded with at most ``U`` times its bandwidth;
2. :mod:`~chakra_collectives.synth.forestcoll.splitting` -- switches removed by edge splitting;
   each logical NPU-to-NPU edge remembers the switch path it stands for;
3. :mod:`~chakra_collectives.synth.forestcoll.packing` -- ``k`` spanning out-trees per NPU within
   those loads (Edmonds' theorem, built edge by edge under a flow test), one root per symmetry
   class when the topology knows its symmetries;
4. :mod:`~chakra_collectives.synth.forestcoll.lowering` -- the trees as IR with chunk identity:
   All-Gather and broadcast down the trees, Reduce-Scatter and reduce up the reversed network's
   trees with reductions, All-Reduce = Reduce-Scatter then All-Gather; ``P`` pieces per tree.

:mod:`~chakra_collectives.synth.forestcoll.producer` runs them (:func:`forestcoll`) and registers
the producer. The bandwidth term of the result equals the cut bound: ``(M/N) * U/k`` seconds
per GB/s for All-Gather of ``M`` bytes over ``N`` NPUs.

>>> from chakra_collectives.topology import load_topology
>>> result = forestcoll(load_topology("a100:2"), "all-gather", "1GiB")
>>> result.optimal_k, round(float(16 * result.optimal_k / result.optimal_U), 3)   # ForestColl's algbw
(13, 346.667)
"""

from chakra_collectives.synth.forestcoll.producer import COLLECTIVES, ForestCollResult, Trees, build_trees, forestcoll, report

__all__ = ["COLLECTIVES", "ForestCollResult", "Trees", "build_trees", "forestcoll", "report"]
