"""MSCCL-IR XML (MSCCLang's compiler output, the MSCCL runtime's input), read and write.

* :func:`read_msccl` -- an XML file to a :class:`~chakra_collectives.ir.CollectiveAlgorithm`
  with the runtime's full semantics (:mod:`.lower`), errors pointing at XML lines;
* :func:`export_msccl` (:func:`write_msccl` returns just the program) -- any algorithm to
  MSCCL-IR (:mod:`.lift`): threadblocks, channels, cross-threadblock dependencies, the
  attributes the current runtime requires; how, in one :class:`MscclOptions`. What it writes
  is read back and executed with rendezvous sends: an algorithm that never deadlocks that way
  gets a program that does not either (or an error).

Runtime limits (64 steps per threadblock, cnt < 72, 32 threadblocks per channel, 32 channels)
are met or the export is refused (``fit_limits``); without it they are reported as
:class:`MscclWarning`.
"""

from chakra_collectives.converters.msccl.io import MscclWarning, export_msccl, read_msccl, read_programs, write_msccl
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
    "export_msccl",
    "read_msccl",
    "read_programs",
    "write_msccl",
]
