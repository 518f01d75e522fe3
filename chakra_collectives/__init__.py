"""chakra-collectives: collective-communication algorithms as Chakra execution traces.

Everything the ``chakra-coll`` command does is a library function first:

>>> import chakra_collectives as cc
>>> torus = cc.load_topology("torus2d:4x4")
>>> result = cc.synthesize(torus, "all-reduce", "64MiB")            # TACOS, ForestColl, BFB or a baseline: the fastest
>>> cc.verify_algorithm(result.algorithm).ok
True
>>> cc.predict_time(result.algorithm, torus) == result.predicted_ns  # one network model everywhere
True
>>> cc.lower_bounds(torus, cc.Collective.ALL_REDUCE, 64 * 2**20).efficiency(result.predicted_ns) > 0.9
True
"""

from chakra_collectives.lazy_names import LazyNames

# Names load on first use (PEP 562), so ``import chakra_collectives`` -- and every ``chakra-coll``
# command, whose package this is -- does not import numpy, networkx, scipy and protobuf first.
_HOMES = {
    "AlgorithmError": "chakra_collectives.errors",
    "ChakraCollError": "chakra_collectives.errors",
    "InputError": "chakra_collectives.errors",
    "AlgorithmBuilder": "chakra_collectives.ir",
    "Buffer": "chakra_collectives.ir",
    "Collective": "chakra_collectives.ir",
    "CollectiveAlgorithm": "chakra_collectives.ir",
    "OpKind": "chakra_collectives.ir",
    "Topology": "chakra_collectives.topology",
    "load_topology": "chakra_collectives.topology",
    "synthesize": "chakra_collectives.synth",
    "ring": "chakra_collectives.synth.baselines",
    "verify_algorithm": "chakra_collectives.verify",
    "predict_time": "chakra_collectives.network",
    "simulate_collective": "chakra_collectives.network",
    "lower_bounds": "chakra_collectives.bounds",
    "replay": "chakra_collectives.replay",
    "read_algorithm": "chakra_collectives.converters.chakra_et",
    "write_algorithm": "chakra_collectives.converters.chakra_et",
    "read_msccl": "chakra_collectives.converters.msccl",
    "write_msccl": "chakra_collectives.converters.msccl",
}


__getattr__ = LazyNames(__name__, _HOMES, globals())


def __dir__() -> list[str]:
    return __getattr__.listed(globals())


__version__ = "0.1.0"

__all__ = [
    "AlgorithmBuilder",
    "AlgorithmError",
    "Buffer",
    "ChakraCollError",
    "Collective",
    "CollectiveAlgorithm",
    "InputError",
    "OpKind",
    "Topology",
    "load_topology",
    "lower_bounds",
    "predict_time",
    "read_algorithm",
    "read_msccl",
    "replay",
    "ring",
    "simulate_collective",
    "synthesize",
    "verify_algorithm",
    "write_algorithm",
    "write_msccl",
]
