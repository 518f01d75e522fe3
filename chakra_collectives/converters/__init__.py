"""Format converters, imported as ``chakra_collectives.converters``.

* :mod:`.chakra_et` -- Chakra execution traces (``PREFIX.{rank}.et``), read and write.
* :mod:`.msccl` -- MSCCL-IR XML (MSCCLang's output, the MSCCL runtime's input), read and write.
* :mod:`.pytorch` -- PyTorch execution traces and Kineto traces, read (to workload ETs).
"""
