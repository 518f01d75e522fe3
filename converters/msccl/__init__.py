"""MSCCL-IR XML (MSCCLang's compiler output, the MSCCL runtime's input), read and write.

* :func:`read_msccl` -- an XML file to a :class:`~chakra_collectives.ir.CollectiveAlgorithm`
  with the runtime's full semantics (:mod:`.lower`), errors pointing at XML lines;
* :func:`write_msccl` -- any algorithm to MSCCL-IR (:mod:`.lift`): threadblocks, channels,
  cross-threadblock dependencies, the attributes the current runtime requires; how, in one
  :class:`MscclOptions`.

Runtime limits (64 steps per threadblock, cnt < 72, 32 threadblocks per channel, 32 channels)
and dependencies the runtime would hang on are reported as :class:`MscclWarning`.
"""

from chakra_collectives.converters.msccl.io import MscclWarning, read_msccl, read_programs, write_msccl
from chakra_collectives.converters.msccl.options import MscclOptions
from chakra_collectives.converters.msccl.program import Gpu, Program, Step, StepType, Threadblock

__all__ = [
    "Gpu",
    "MscclOptions",
    "MscclWarning",
    "Program",
    "Step",
    "StepType",
    "Threadblock",
    "read_msccl",
    "read_programs",
    "write_msccl",
]
