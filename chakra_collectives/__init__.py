"""chakra-collectives: collective-communication algorithms as Chakra execution traces.

Everything the ``chakra-coll`` command does is a library function first:

>>> import chakra_collectives as cc
>>> torus = cc.load_topology("torus2d:4x4")
>>> result = cc.synthesize(torus, "all-reduce", "64MiB")            # TACOS or a baseline, the fastest
>>> cc.verify_algorithm(result.algorithm).ok
True
>>> cc.predict_time(result.algorithm, torus) == result.predicted_ns  # one network model everywhere
True
>>> cc.lower_bounds(torus, cc.Collective.ALL_REDUCE, 64 * 2**20).efficiency(result.predicted_ns) > 0.9
True
"""

from chakra_collectives.errors import AlgorithmError, ChakraCollError, InputError
from chakra_collectives.ir import AlgorithmBuilder, Buffer, Collective, CollectiveAlgorithm, OpKind
from chakra_collectives.topology import Topology, load_topology
from chakra_collectives.synth import synthesize
from chakra_collectives.synth.baselines import ring
from chakra_collectives.verify import verify_algorithm
from chakra_collectives.network import predict_time, simulate_collective
from chakra_collectives.bounds import lower_bounds
from chakra_collectives.replay import replay
from chakra_collectives.converters.chakra_et import read_algorithm, write_algorithm
from chakra_collectives.converters.msccl import read_msccl, write_msccl

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
