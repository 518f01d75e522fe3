"""chakra-collectives: collective-communication algorithms as Chakra execution traces.

Everything the ``chakra-coll`` command does is a library function first:

>>> import chakra_collectives as cc
>>> algo = cc.ring(cc.Collective.ALL_REDUCE, 4, size_bytes=64 * 2**20)
>>> cc.verify_algorithm(algo).ok
True
"""

from chakra_collectives.errors import AlgorithmError, ChakraCollError, InputError
from chakra_collectives.ir import AlgorithmBuilder, Buffer, Collective, CollectiveAlgorithm, OpKind
from chakra_collectives.synth.baselines import ring
from chakra_collectives.verify import verify_algorithm
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
    "read_algorithm",
    "read_msccl",
    "ring",
    "verify_algorithm",
    "write_algorithm",
    "write_msccl",
]
