"""The collective-algorithm IR: one representation for every producer and consumer.

* :mod:`~chakra_collectives.ir.collective` -- what a collective means in chunks;
* :mod:`~chakra_collectives.ir.ops` -- operations, stored column-wise;
* :mod:`~chakra_collectives.ir.algorithm` -- :class:`CollectiveAlgorithm`;
* :mod:`~chakra_collectives.ir.builder` -- :class:`AlgorithmBuilder`;
* :mod:`~chakra_collectives.ir.parts` -- an algorithm lowered a range of ranks at a time as it is written;
* :mod:`~chakra_collectives.ir.workload` -- :class:`Workload`, a training step's nodes per rank
  (:class:`NodeKind`), which format readers build and the replays run;

and the analyses every consumer shares (the verifier, the network model, the MSCCL-IR
exporter, ``inspect``, the replayer):

* :mod:`~chakra_collectives.ir.structure` -- well-formedness, dependency cycles, dependents;
* :mod:`~chakra_collectives.ir.matching` -- pairing SENDs with RECVs (FIFO per ``(src, dst, tag)``);
* :mod:`~chakra_collectives.ir.execution` -- running the dependency + message graph under eager
  or rendezvous sends, and describing where it gets stuck.
"""

from chakra_collectives.ir.algorithm import CollectiveAlgorithm
from chakra_collectives.ir.builder import AlgorithmBuilder
from chakra_collectives.ir.collective import Collective
from chakra_collectives.ir.ops import NONE, Buffer, ChunkRef, Op, OpKind, OpTable

from chakra_collectives.lazy_names import LazyNames

# a workload's types load on first use: an algorithm's commands (synth) never read a workload
__getattr__ = LazyNames(__name__, {"NodeKind": "chakra_collectives.ir.workload", "Workload": "chakra_collectives.ir.workload"}, globals())


__all__ = ["AlgorithmBuilder", "Buffer", "ChunkRef", "Collective", "CollectiveAlgorithm", "NONE", "NodeKind", "Op", "OpKind", "OpTable", "Workload"]
